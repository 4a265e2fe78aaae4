"""`yolo-mlops bisect --good REV --bad REV (--run RUN_ID | --series KEY)`: the commit that made training slower.

Checks the input first (one line each: a revision that does not exist, good not an ancestor of bad, uncommitted
changes, a series without runs, a good commit the series' history already shows slow), then runs the Prefect
flow `bisect`. Exit code 0 with a first bad commit or with "no regression between good and bad"; 3 when a step
stayed inconclusive (the range narrowed so far is printed); 2 for bad input.
"""

from __future__ import annotations

import argparse

from yolo_mlops import names


def cmd_bisect(args: argparse.Namespace) -> int:
    from yolo_mlops import bisect as bisection

    fields = dict(  # the request checked here is the flow's arguments
        good=args.good,
        bad=args.bad,
        repo=args.repo,
        series=args.series,
        run_id=args.run,
        experiment=args.experiment,
        bisect_experiment=args.bisect_experiment,
        repeats=args.repeats,
        max_repeats=args.max_repeats,
        metric=args.metric,
        alpha=args.alpha,
        min_effect=args.min_effect,
        run_timeout_s=args.run_timeout,
    )
    bisection.prepare(bisection.BisectRequest(**fields))  # bad input fails here, in one line, before Prefect starts
    from yolo_mlops.config import data_home
    from yolo_mlops.run import prefect_server

    prefect_server.configure(data_home())  # before prefect is imported, as for the other flow commands
    from yolo_mlops.run.prefect_server import check_api, detach_temporary_server

    check_api()  # a PREFECT_API_URL that does not answer: one line before the flow starts
    detach_temporary_server()
    from yolo_mlops.cli.prefect_output import quiet_prefect_tracebacks
    from yolo_mlops.flows.bisection import bisect

    quiet_prefect_tracebacks()
    result = bisect(**fields)
    print("\n" + result.report)
    return bisection.exit_code(result)


DEFAULT_EXPERIMENT = names.BENCHMARK_EXPERIMENT
DEFAULT_BISECT_EXPERIMENT = names.BISECT_EXPERIMENT
RUN_TIMEOUT_S = 3600.0  # as yolo_mlops.bisect.models.RUN_TIMEOUT_S


def register(sub) -> None:
    p = sub.add_parser("bisect", help="find the commit between --good and --bad that made training slower")
    p.add_argument("--good", required=True, help="a revision whose code was fast")
    p.add_argument("--bad", required=True, help="a later revision whose code is slow")
    p.add_argument("--repo", help="repository of the code the runs executed (default: this installation's)")
    workload = p.add_mutually_exclusive_group()
    workload.add_argument("--run", help="workload: the RunSpec (run_spec.yaml) this MLflow run logged")
    workload.add_argument("--series", help="workload: the newest run of this series in --experiment")
    p.add_argument(
        "--experiment",
        default=DEFAULT_EXPERIMENT,
        help=f"experiment of --series and of its history (default {DEFAULT_EXPERIMENT})",
    )
    p.add_argument(
        "--bisect-experiment",
        default=DEFAULT_BISECT_EXPERIMENT,
        help=f"experiment the bisection's runs go to (default {DEFAULT_BISECT_EXPERIMENT})",
    )
    p.add_argument("--repeats", type=int, default=3, help="runs a side per step at the first look (default 3)")
    p.add_argument(
        "--max-repeats", type=int, default=6, help="runs a side before a step is called inconclusive (default 6)"
    )
    p.add_argument(
        "--metric",
        default=names.STEP_TIME_P50,
        help=f"watched metric (default {names.STEP_TIME_P50}), or an operator series (op/cpu/<operator>): every "
        "step then decides on that operator's own time",
    )
    p.add_argument("--alpha", type=float, default=0.01, help="error bound of each decision (default 0.01)")
    p.add_argument(
        "--min-effect",
        type=float,
        default=0.05,
        help="smallest slowdown the premise calls a regression, a fraction (default 0.05)",
    )
    p.add_argument(
        "--run-timeout",
        type=float,
        default=RUN_TIMEOUT_S,
        help=f"seconds after which a profiled run is killed and counts as failed (default {RUN_TIMEOUT_S:g})",
    )
    p.set_defaults(handler=cmd_bisect)
