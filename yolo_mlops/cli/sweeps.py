"""`yolo-mlops variants | sweep | optimize` (flows `sweep` and `optimize`)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from yolo_mlops.cli.run import add_run_options, demo_defaults, spec_from_args

if TYPE_CHECKING:
    from pydantic import ValidationError

    from yolo_mlops.config import SweepRequest


def register(sub) -> None:
    listing = sub.add_parser("variants", help="list the optimisation variants a sweep can run")
    listing.set_defaults(handler=cmd_variants)
    sweep = sub.add_parser("sweep", help="baseline + variants x repeats, speed-up with bootstrap 95%% CI")
    sweep.add_argument(
        "--variants",
        default="",
        help="comma-separated variant expressions, e.g. "
        "amp_bf16,channels_first,workers_8 or amp_bf16+channels_last (baseline is always included)",
    )
    _add_sweep_options(sweep)
    _add_fleet_options(sweep)
    add_run_options(sweep)
    sweep.set_defaults(handler=cmd_sweep)
    optimize = sub.add_parser("optimize", help="profile the baseline, sweep the variants its diagnosis recommends")
    _add_sweep_options(optimize)
    add_run_options(optimize)
    optimize.set_defaults(
        handler=cmd_optimize, devices=None, pool=None, deployment=None, isolation="side-by-side", lost_after=None
    )


def _add_sweep_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("sweep options")
    group.add_argument("--repeats", type=int, default=3, help="repeats per variant (default 3)")
    group.add_argument(
        "--order",
        choices=["interleaved", "blocked"],
        default="interleaved",
        help="interleaved: A B C A B C (default, spreads drift over all variants); blocked: A A B B",
    )
    group.add_argument("--warmup-steps", type=int, default=1, help="steps discarded at the start of each child")
    group.add_argument(
        "--concurrency-limit",
        help="Prefect global concurrency limit held by each child "
        "(default gpu-<machine>-<index> on a GPU, none on CPU; it must exist)",
    )


def _add_fleet_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("devices and machines")
    group.add_argument(
        "--devices",
        help="run children side by side, one per device of this machine (e.g. 0,1,2,3); "
        "each device runs whole blocks, speed-ups are paired within a block",
    )
    group.add_argument(
        "--pool",
        help="Prefect work pool whose machines run the children (a worker per machine "
        "polling the work queue named after it); needs PREFECT_API_URL",
    )
    group.add_argument("--deployment", help="the pool's profile-training deployment, when it has several")
    group.add_argument(
        "--isolation",
        choices=["side-by-side", "exclusive"],
        default="side-by-side",
        help="exclusive: one child at a time over all devices/machines (no interference, slower)",
    )
    group.add_argument(
        "--lost-after",
        type=float,
        default=None,
        metavar="SECONDS",
        help="a pool machine whose worker has not polled for this long is lost (default 120)",
    )


def cmd_variants(args: argparse.Namespace) -> int:
    from yolo_mlops.sweeps import variants

    print(variants.describe())
    return 0


def _devices(args: argparse.Namespace) -> list[str] | None:
    return None if args.devices is None else args.devices.split(",")


def _request(args: argparse.Namespace, names: list[str]) -> SweepRequest:
    """The SweepRequest of a command line (the sweep's run options build its base); ConfigError, one line, for a
    bad option."""
    from pydantic import ValidationError

    from yolo_mlops.config import SweepRequest
    from yolo_mlops.errors import ConfigError

    if args.lost_after is not None and args.lost_after <= 0:
        raise ConfigError("--lost-after must be > 0 seconds")
    if args.deployment is not None and args.pool is None:
        raise ConfigError("--deployment names a deployment of --pool; give --pool too")
    defaults = None
    if args.data is None and args.config is None:  # the synthetic dataset: start from the demo's sizes
        defaults = {k: v for k, v in demo_defaults().items() if k != "run_name"}
    fields = {
        "base": spec_from_args(args, defaults),
        "variants": names,
        "repeats": args.repeats,
        "order": args.order,
        "warmup_steps": args.warmup_steps,
        "concurrency_limit": args.concurrency_limit,
        "devices": _devices(args),
        "pool": args.pool,
        "deployment": args.deployment,
        "isolation": args.isolation,
    }
    if args.lost_after is not None:
        fields["lost_after_s"] = args.lost_after
    try:
        return SweepRequest(**fields)
    except ValidationError as exc:
        raise ConfigError(_option_error(exc)) from None


def _option_error(exc: ValidationError) -> str:
    """A refused sweep option, in one line: `--repeats: Input should be greater than or equal to 1`."""
    parts = []
    for err in exc.errors():
        where = "--" + str(err["loc"][0]).replace("_", "-") if err["loc"] else "sweep"
        parts.append(f"{where}: {err['msg']}")
    return "; ".join(parts)


def _check(request: SweepRequest) -> None:
    """Validate variants, the base run, devices, the pool and the concurrency limits before MLflow starts."""
    from yolo_mlops import sweeps
    from yolo_mlops.errors import ConfigError
    from yolo_mlops.run import gpu_lock, prefect_server, preflight
    from yolo_mlops.sweeps import remote

    target = None
    if request.pool is not None:
        if prefect_server.api_url() is None:
            raise ConfigError("--pool needs the Prefect server the pool's workers poll: set PREFECT_API_URL")
        # the parent run is made here, its children on the pool's machines
        preflight.check_servers(request.base.experiment, prefect_context=f"--pool {request.pool}: ")
        target = remote.find_target(request.pool, request.deployment, request.lost_after_s)
    plan = sweeps.plan_request(request, target.machines if target else None)
    if target is None:
        preflight.check(request.base)
    limits = {lane.limit for lane in plan.lanes if lane.limit}
    if not limits and plan.concurrency_limit is not None:
        limits = {plan.concurrency_limit}
    for lane_limit in sorted(limits):
        gpu_lock.check_limit(lane_limit)


def cmd_sweep(args: argparse.Namespace) -> int:
    names = [v.strip() for v in args.variants.split(",") if v.strip()]
    request = _request(args, names)
    _check(request)
    from yolo_mlops.flows.sweep import sweep

    result = sweep(request)
    print("\n" + result.markdown)
    print(f"\nMLflow parent run {result.parent_run_id}: {result.run_url}")
    return 0


def cmd_optimize(args: argparse.Namespace) -> int:
    request = _request(args, [])
    _check(request)
    from yolo_mlops.flows.optimize import optimize

    result = optimize(
        base=request.base,
        repeats=request.repeats,
        order=request.order,
        warmup_steps=request.warmup_steps,
        concurrency_limit=request.concurrency_limit,
    )
    print("\n" + result.markdown)
    return 0
