"""`yolo-mlops` command line. Every run command builds one RunSpec and hands it to a Prefect flow."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from yolo_mlops.config import ConfigError, build_run_spec, deep_merge, load_run_spec

# CLI flag -> RunSpec field path; None values are left to the config file / defaults.
_RUN_FLAGS: dict[str, tuple[str, ...]] = {
    "model": ("model",), "data": ("data",), "imgsz": ("imgsz",), "batch": ("batch",), "epochs": ("epochs",),
    "max_steps": ("max_steps",), "device": ("device",), "workers": ("workers",), "seed": ("seed",),
    "experiment": ("experiment",), "run_name": ("run_name",),
    "skip_first": ("profiler", "skip_first"), "wait": ("profiler", "wait"), "warmup": ("profiler", "warmup"),
    "active": ("profiler", "active"), "repeat": ("profiler", "repeat"),
    "with_stack": ("profiler", "with_stack"), "with_modules": ("profiler", "with_modules"),
    "nvml_backend": ("nvml", "backend"), "nvml_interval_ms": ("nvml", "interval_ms"),
    "nvml_devices": ("nvml", "devices"),
}


def add_run_options(parser: argparse.ArgumentParser) -> None:
    run = parser.add_argument_group("run options (override --config)")
    run.add_argument("--config", type=Path, help="run YAML with RunSpec fields (see docs/config.md)")
    run.add_argument("--model", help="yolo11{n,s,m,l,x}.yaml (from scratch) or a local .pt")
    run.add_argument("--data", type=Path, help="ultralytics dataset YAML (default: synthetic demo dataset)")
    run.add_argument("--imgsz", type=int)
    run.add_argument("--batch", type=int)
    steps = run.add_mutually_exclusive_group()
    steps.add_argument("--epochs", type=int)
    steps.add_argument("--max-steps", type=int, help="stop after N training steps")
    run.add_argument("--device", help="'cpu', '0', 'cuda:0' (default: first GPU, else cpu)")
    run.add_argument("--workers", type=int, help="data-loader workers")
    run.add_argument("--seed", type=int)
    run.add_argument("--experiment", help="MLflow experiment name")
    run.add_argument("--run-name")
    prof = parser.add_argument_group("profiler window: skip_first, then repeat x (wait, warmup, active) steps")
    for name in ("skip-first", "wait", "warmup", "active", "repeat"):
        prof.add_argument(f"--{name}", type=int)
    prof.add_argument("--with-stack", action="store_true", default=None)
    prof.add_argument("--with-modules", action="store_true", default=None)
    nvml = parser.add_argument_group("NVML sampler")
    nvml.add_argument("--nvml-backend", choices=["auto", "real", "fake", "none"])
    nvml.add_argument("--nvml-interval-ms", type=float)
    nvml.add_argument("--nvml-devices", type=lambda text: [int(d) for d in text.split(",")],
                      help="CUDA device indices to sample, e.g. 0,1 (default: the training device)")


def spec_from_args(args: argparse.Namespace, defaults: dict[str, Any] | None = None):
    overrides: dict[str, Any] = {}
    for flag, path in _RUN_FLAGS.items():
        value = getattr(args, flag, None)
        if value is None:
            continue
        target = overrides
        for part in path[:-1]:
            target = target.setdefault(part, {})
        target[path[-1]] = str(value) if isinstance(value, Path) else value
    if args.config is not None:
        return load_run_spec(args.config, deep_merge(defaults or {}, overrides))
    return build_run_spec(deep_merge(defaults or {}, overrides))


def demo_defaults() -> dict[str, Any]:
    """A run that finishes in about a minute on two CPU cores, or seconds on a GPU."""
    import torch

    if torch.cuda.is_available():
        return {"imgsz": 640, "batch": 16, "epochs": 3, "synthetic_images": 128, "workers": 4,
                "profiler": {"wait": 2, "warmup": 2, "active": 4}, "run_name": "demo"}
    return {"imgsz": 128, "batch": 8, "epochs": 3, "synthetic_images": 64, "workers": 2,
            "profiler": {"wait": 2, "warmup": 1, "active": 3}, "run_name": "demo"}


def cmd_profile(args: argparse.Namespace, defaults: dict[str, Any] | None = None) -> int:
    from yolo_mlops import pipeline, tracking

    spec = spec_from_args(args, defaults)
    pipeline.check_inputs(spec)  # bad input fails here, in one line, before Prefect or MLflow start
    from flows.profile_training import profile_training

    result = profile_training(spec)
    print(f"\nMLflow run {result.run_id} ({tracking.tracking_uri()})")
    for key in sorted(result.metrics):
        print(f"  {key:<36} {result.metrics[key]:>12.4g}")
    for f in result.findings:
        print(f"  finding [{f['severity']}] {f['title']}  -> try: {', '.join(f['recommended_variants']) or '-'}")
    print(f"\nOpen the MLflow UI:  {tracking.ui_command()}\n  then {result.run_url}")
    return 0


def cmd_analyze(args: argparse.Namespace) -> int:
    from yolo_mlops.analysis import TraceError, analyze_command

    try:
        print(analyze_command(str(args.path), args.format))
    except TraceError as exc:
        raise ConfigError(str(exc)) from None
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="yolo-mlops", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="profiled YOLO11n run on a synthetic dataset, logged to local MLflow")
    add_run_options(demo)
    demo.set_defaults(handler=lambda a: cmd_profile(a, demo_defaults()))
    profile = sub.add_parser("profile", help="profiled YOLO11 training run")
    add_run_options(profile)
    profile.set_defaults(handler=cmd_profile)
    analyze = sub.add_parser("analyze", help="analyse any torch.profiler trace (file, .gz, or a folder of ranks)")
    analyze.add_argument("path", type=Path)
    analyze.add_argument("--format", choices=["text", "json"], default="text")
    analyze.set_defaults(handler=cmd_analyze)
    add_sweep_commands(sub)
    return parser


# --- sweeps: `yolo-mlops variants | sweep | optimize` (issue 5; flows/sweep.py, flows/optimize.py) -----------------

def add_sweep_commands(sub) -> None:
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
    from yolo_mlops import variants

    print(variants.describe())
    return 0


def _sweep_plan(args: argparse.Namespace, names: list[str]):
    """Validate variants, the base run and the concurrency limit before Prefect or MLflow start."""
    from yolo_mlops import gpu_lock, pipeline, sweeps

    defaults = None
    if args.data is None and args.config is None:  # the synthetic dataset: start from the demo's sizes
        defaults = {k: v for k, v in demo_defaults().items() if k != "run_name"}
    spec = spec_from_args(args, defaults)
    plan = sweeps.plan_sweep(spec, names, args.repeats, args.order, args.warmup_steps, args.concurrency_limit)
    pipeline.check_inputs(spec)
    gpu_lock.check_limit(plan.concurrency_limit)
    return spec


def cmd_sweep(args: argparse.Namespace) -> int:
    names = [v.strip() for v in args.variants.split(",") if v.strip()]
    spec = _sweep_plan(args, names)
    from flows.sweep import sweep

    result = sweep(base=spec, variants=names, repeats=args.repeats, order=args.order,
                   warmup_steps=args.warmup_steps, concurrency_limit=args.concurrency_limit)
    print("\n" + result.markdown)
    print(f"\nMLflow parent run {result.parent_run_id}: {result.run_url}")
    return 0


def cmd_optimize(args: argparse.Namespace) -> int:
    spec = _sweep_plan(args, [])
    from flows.optimize import optimize

    result = optimize(base=spec, repeats=args.repeats, order=args.order, warmup_steps=args.warmup_steps,
                      concurrency_limit=args.concurrency_limit)
    print("\n" + result.markdown)
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.handler(args)
    except ConfigError as exc:
        print(f"yolo-mlops: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
