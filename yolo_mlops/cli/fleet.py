"""`yolo-mlops fleet`: the same workload on several machines, and the machines slower than their peers.

An experiment without a workload on two or more machines is not an error: the command says so in one line
and exits 0 (the nightly suite of a single machine has no fleet yet). Bad input exits 2 with one line."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from yolo_mlops.cli.trends import DEFAULT_EXPERIMENT
from yolo_mlops.errors import ConfigError
from yolo_mlops.render import figure_path_problem

DEFAULT_MAX_PVALUE = 0.01


def cmd_fleet(args: argparse.Namespace) -> int:
    from yolo_mlops.tracking import connection
    from yolo_mlops.trends import bounds, fleet

    problem = None if args.plot is None else figure_path_problem(args.plot)
    if problem is not None:
        raise ConfigError(f"--plot {args.plot}: {problem}")
    if args.alpha is not None and args.max_pvalue is not None and args.alpha != args.max_pvalue:
        raise ConfigError(
            f"--alpha {args.alpha:g} and --max-pvalue {args.max_pvalue:g} are one setting given two values: give one"
        )
    flag = "--alpha" if args.alpha is not None else "--max-pvalue"
    max_pvalue = args.alpha if args.alpha is not None else args.max_pvalue
    max_pvalue = bounds.check_pvalue(flag, DEFAULT_MAX_PVALUE if max_pvalue is None else max_pvalue)
    bounds.check_fraction("--min-effect", args.min_effect)
    settings = fleet.FleetSettings(max_pvalue=max_pvalue, min_effect=args.min_effect)
    client = connection.checked_client()
    report = fleet.explain(client, fleet.load_fleet(client, args.experiment, settings))  # + what moved on slow ones
    if args.format == "json":
        print(json.dumps(fleet.to_json(report), indent=2))
    elif not report.workloads:
        print(fleet.no_fleet_line(report))
    else:
        print(f"Fleet of experiment {args.experiment!r}\n")
        print(fleet.fleet_markdown(report))
    if args.plot is not None:
        if report.workloads:
            fleet.plot_fleet(report, args.plot)
            print(f"\nplot: {args.plot}")
        elif args.format != "json":
            print(f"no plot written to {args.plot}: no fleet to compare")
    return 0


def register(sub) -> None:
    p = sub.add_parser("fleet", help="each workload's step time per machine, and machines slower than their peers")
    p.add_argument("--experiment", default=DEFAULT_EXPERIMENT, help=f"MLflow experiment (default {DEFAULT_EXPERIMENT})")
    p.add_argument(
        "--max-pvalue",
        type=float,
        help=f"family-wise false-alarm rate over a workload's machines (default {DEFAULT_MAX_PVALUE:g})",
    )
    p.add_argument("--alpha", type=float, help="the same as --max-pvalue (give one of the two)")
    p.add_argument(
        "--min-effect",
        type=float,
        default=0.03,
        help="smallest slowdown reported, a fraction of the peers' median (default 0.03 = 3%%)",
    )
    p.add_argument("--plot", type=Path, help="write the per-machine step-time distributions (PNG) to this file")
    p.add_argument("--format", choices=["text", "json"], default="text")
    p.set_defaults(handler=cmd_fleet)
