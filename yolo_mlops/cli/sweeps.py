"""`yolo-mlops variants | sweep | optimize` (flows `sweep` and `optimize`)."""

from __future__ import annotations

import argparse

from yolo_mlops.cli.run import add_run_options, demo_defaults, spec_from_args


def register(sub) -> None:
    listing = sub.add_parser("variants", help="list the optimisation variants a sweep can run")
    listing.set_defaults(handler=cmd_variants)
    sweep = sub.add_parser("sweep", help="baseline + variants x repeats, speed-up with bootstrap 95%% CI")
    sweep.add_argument("--variants", default="", help="comma-separated variant expressions, e.g. "
                       "amp_bf16,channels_first,workers_8 or amp_bf16+channels_last (baseline is always included)")
    _add_sweep_options(sweep)
    add_run_options(sweep)
    sweep.set_defaults(handler=cmd_sweep)
    optimize = sub.add_parser("optimize", help="profile the baseline, sweep the variants its diagnosis recommends")
    _add_sweep_options(optimize)
    add_run_options(optimize)
    optimize.set_defaults(handler=cmd_optimize)


def _add_sweep_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("sweep options")
    group.add_argument("--repeats", type=int, default=3, help="repeats per variant (default 3)")
    group.add_argument("--order", choices=["interleaved", "blocked"], default="interleaved",
                       help="interleaved: A B C A B C (default, spreads drift over all variants); blocked: A A B B")
    group.add_argument("--warmup-steps", type=int, default=1, help="steps discarded at the start of each child")
    group.add_argument("--concurrency-limit", help="Prefect global concurrency limit held by each child "
                       "(default gpu-<index> on a GPU, none on CPU; it must exist)")


def cmd_variants(args: argparse.Namespace) -> int:
    from yolo_mlops.sweeps import variants

    print(variants.describe())
    return 0


def _sweep_plan(args: argparse.Namespace, names: list[str]):
    """Validate variants, the base run and the concurrency limit before Prefect or MLflow start."""
    from yolo_mlops import sweeps
    from yolo_mlops.run import gpu_lock, preflight

    defaults = None
    if args.data is None and args.config is None:  # the synthetic dataset: start from the demo's sizes
        defaults = {k: v for k, v in demo_defaults().items() if k != "run_name"}
    spec = spec_from_args(args, defaults)
    plan = sweeps.plan_sweep(spec, names, args.repeats, args.order, args.warmup_steps, args.concurrency_limit)
    preflight.check(spec)
    gpu_lock.check_limit(plan.concurrency_limit)
    return spec


def cmd_sweep(args: argparse.Namespace) -> int:
    names = [v.strip() for v in args.variants.split(",") if v.strip()]
    spec = _sweep_plan(args, names)
    from yolo_mlops.flows.sweep import sweep

    result = sweep(base=spec, variants=names, repeats=args.repeats, order=args.order,
                   warmup_steps=args.warmup_steps, concurrency_limit=args.concurrency_limit)
    print("\n" + result.markdown)
    print(f"\nMLflow parent run {result.parent_run_id}: {result.run_url}")
    return 0


def cmd_optimize(args: argparse.Namespace) -> int:
    spec = _sweep_plan(args, [])
    from yolo_mlops.flows.optimize import optimize

    result = optimize(base=spec, repeats=args.repeats, order=args.order, warmup_steps=args.warmup_steps,
                      concurrency_limit=args.concurrency_limit)
    print("\n" + result.markdown)
    return 0


