"""`yolo-mlops profile` and `demo`, and the run options every run command shares (they build one RunSpec)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

# CLI flag -> RunSpec field path; None values are left to the config file / defaults.
_RUN_FLAGS: dict[str, tuple[str, ...]] = {
    **{flag: (flag,) for flag in ("model", "data", "imgsz", "batch", "epochs", "max_steps", "device", "workers")},
    **{flag: (flag,) for flag in ("seed", "experiment", "run_name")},
    **{flag: ("profiler", flag) for flag in ("skip_first", "wait", "warmup", "active", "repeat")},
    **{flag: ("profiler", flag) for flag in ("with_stack", "with_modules")},
    "nvml_backend": ("nvml", "backend"),
    "nvml_interval_ms": ("nvml", "interval_ms"),
    "nvml_devices": ("nvml", "devices"),
    "ranks": ("ddp", "ranks"),
    "ddp_backend": ("ddp", "backend"),
}


def add_run_options(parser: argparse.ArgumentParser) -> None:
    run = parser.add_argument_group("run options (override --config)")
    run.add_argument("--config", type=Path, help="run YAML with RunSpec fields (see docs/config.md)")
    run.add_argument("--model", help="yolo11{n,s,m,l,x}.yaml (from scratch) or a local .pt")
    run.add_argument("--data", type=Path, help="ultralytics dataset YAML (default: synthetic demo dataset)")
    run.add_argument("--imgsz", type=int)
    run.add_argument("--batch", type=int)
    run.add_argument("--epochs", type=int, help="whole epochs (default: 1, or as many as --max-steps needs)")
    run.add_argument(
        "--max-steps", type=int, help="train exactly N steps; with --epochs: at most N steps within those epochs"
    )
    run.add_argument(
        "--device",
        help="'cpu', '0', 'cuda:0', or '0,1,2,3' for one data-parallel rank per GPU (default: first GPU, else cpu)",
    )
    run.add_argument(
        "--ranks",
        type=int,
        help="data-parallel CPU ranks (gloo), with --device cpu: the CPU twin of a multi-GPU job (docs/ddp.md)",
    )
    run.add_argument(
        "--ddp-backend",
        choices=["auto", "nccl", "gloo"],
        help="process-group backend (auto: nccl on GPUs, gloo on CPU)",
    )
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
    nvml.add_argument(
        "--nvml-devices",
        type=lambda text: [int(d) for d in text.split(",")],
        help="CUDA device indices to sample, e.g. 0,1 (default: the training device)",
    )


def spec_from_args(args: argparse.Namespace, defaults: dict[str, Any] | None = None):
    from yolo_mlops.config import build_run_spec, deep_merge, load_run_spec

    overrides: dict[str, Any] = {}
    if getattr(args, "max_steps", None) is not None and getattr(args, "epochs", None) is None and defaults:
        # a command's default epochs (demo) must not cut short the steps the user asked for
        defaults = {k: v for k, v in defaults.items() if k != "epochs"}
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
        return {
            "imgsz": 640,
            "batch": 16,
            "epochs": 3,
            "synthetic_images": 128,
            "workers": 4,
            "profiler": {"wait": 2, "warmup": 2, "active": 4},
            "run_name": "demo",
        }
    return {
        "imgsz": 128,
        "batch": 8,
        "epochs": 3,
        "synthetic_images": 64,
        "workers": 2,
        "profiler": {"wait": 2, "warmup": 1, "active": 3},
        "run_name": "demo",
    }


def cmd_profile(args: argparse.Namespace, defaults: dict[str, Any] | None = None) -> int:
    from yolo_mlops.run import preflight

    spec = spec_from_args(args, defaults)
    preflight.check(spec)  # bad input fails here, in one line, before Prefect or MLflow start
    from yolo_mlops.cli.prefect_output import quiet_prefect_tracebacks
    from yolo_mlops.flows.profile_training import profile_training

    quiet_prefect_tracebacks()
    result = profile_training(spec)
    from yolo_mlops.tracking import connection, queries

    print(f"\nMLflow run {result.run_id} ({connection.tracking_uri()})")
    for key in sorted(result.metrics):
        print(f"  {key:<36} {result.metrics[key]:>12.4g}")
    from yolo_mlops.analysis.diagnosis import headline

    for f in result.findings:
        print(f"  finding {f.line()}")
    print(f"\n{headline(result.findings)}")
    print(f"\nOpen the MLflow UI:  {queries.ui_command()}\n  then {result.run_url}")
    return 0


def register(sub) -> None:
    demo = sub.add_parser("demo", help="profiled YOLO11n run on a synthetic dataset, logged to local MLflow")
    add_run_options(demo)
    demo.set_defaults(handler=lambda a: cmd_profile(a, demo_defaults()))
    profile = sub.add_parser("profile", help="profiled YOLO11 training run")
    add_run_options(profile)
    profile.set_defaults(handler=cmd_profile)
