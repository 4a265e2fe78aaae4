"""`yolo-mlops fleet`: the same workload on several machines, and the machine slower than its peers."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from yolo_mlops.cli.trends import DEFAULT_EXPERIMENT
from yolo_mlops.errors import ConfigError


def cmd_fleet(args: argparse.Namespace) -> int:
    from yolo_mlops.tracking import store
    from yolo_mlops.trends import fleet, history

    if args.plot is not None and not args.plot.parent.is_dir():
        raise ConfigError(f"--plot {args.plot}: folder {args.plot.parent} does not exist")
    if not 0 < args.alpha < 1:
        raise ConfigError(f"--alpha {args.alpha}: must be in (0, 1)")
    mlflow = store.client()
    experiment_id = store.find_experiment_id(mlflow, args.experiment)
    if experiment_id is None:
        raise ConfigError(f"experiment {args.experiment!r} does not exist in {store.tracking_uri()}")
    report = fleet.fleet_report(history.load_history(mlflow, [experiment_id]), alpha=args.alpha)
    if args.format == "json":
        print(json.dumps(fleet.to_json(report), indent=2))
    else:
        print(f"Fleet of experiment {args.experiment!r}\n")
        print(fleet.fleet_markdown(report))
    if args.plot is not None and report.workloads:
        fleet.plot_fleet(report, args.plot)
        print(f"\nplot: {args.plot}")
    return 0


def register(sub) -> None:
    p = sub.add_parser("fleet", help="each workload's step time per machine, and machines slower than their peers")
    p.add_argument("--experiment", default=DEFAULT_EXPERIMENT, help=f"MLflow experiment (default {DEFAULT_EXPERIMENT})")
    p.add_argument("--alpha", type=float, default=0.01, help="family-wise false-alarm rate per workload (0.01)")
    p.add_argument("--plot", type=Path, help="write the per-machine distributions (PNG) to this file")
    p.add_argument("--format", choices=["text", "json"], default="text")
    p.set_defaults(handler=cmd_fleet)
