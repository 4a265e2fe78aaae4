"""GPU sweep: YOLO11n at 640 px, baseline vs the usual speed knobs, with bootstrap 95% CIs.

Runs the real `sweep` flow (every child a real profiled training run logged to MLflow, each holding the
device's Prefect concurrency slot) and prints the comparison table.

    python3 benchmarks/gpu_sweep.py              # defaults below: the longest (compile children dominate; docs/gpu.md)
    python3 benchmarks/gpu_sweep.py --repeats 2 --max-steps 40 --variants amp_bf16,compile
    python3 benchmarks/gpu_sweep.py --dry-run             # imports and the sweep plan only, no CUDA call

Prefect: with PREFECT_API_URL set the flow runs against that server, and the concurrency limit
`gpu-<machine>-<index>` must exist there (deploy/bootstrap.sh; the sweep fails otherwise); without it
a throwaway local server is started and the limits created on it. MLflow: MLFLOW_TRACKING_URI, else the
project's local SQLite store.

Variants: amp_bf16 (bfloat16 autocast), cudnn_benchmark (with deterministic=False), channels_last
(ultralytics 8.4.190 already uses it on CUDA: this is an A/A control that should show no difference),
channels_first (NCHW: measures what channels_last buys), compile (torch.compile default mode; its first
steps compile, hence the larger --warmup-steps), workers_2 (vs the baseline's 8).

Exit 0 when the sweep ran (its table may still show failed children: see --result); 1 when it broke;
2 when there is no CUDA device (and --device is not cpu).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from pathlib import Path

# run as a script, or loaded by gpu_checks.py (itself a script in this folder): this folder is on sys.path
from gpu_smoke import finish

DEFAULT_VARIANTS = "amp_bf16,cudnn_benchmark,channels_last,channels_first,compile,workers_2"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--variants", default=DEFAULT_VARIANTS)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--imgsz", type=int, default=640)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--images", type=int, default=960, help="synthetic training images")
    parser.add_argument("--max-steps", type=int, default=60)
    parser.add_argument("--warmup-steps", type=int, default=15, help="steps discarded per child (compile!)")
    parser.add_argument("--device", default="0", help="a CUDA index such as 0, or cpu for a rehearsal")
    parser.add_argument(
        "--devices",
        help="run through the lanes of `sweep --devices` (e.g. 0 or 0,1): each "
        "device's children in a worker process, blocks paired within a device",
    )
    parser.add_argument("--experiment", default="gpu-sweep")
    parser.add_argument("--result", type=Path, help="write the comparison (table, children) here as JSON")
    parser.add_argument("--dry-run", action="store_true", help="imports and the sweep plan only; no CUDA call")
    return parser


def main() -> int:
    args = build_parser().parse_args()
    import torch

    from yolo_mlops import sweeps
    from yolo_mlops.config import ProfilerSettings, RunSpec, SweepRequest
    from yolo_mlops.flows.sweep import sweep
    from yolo_mlops.run import gpu_lock
    from yolo_mlops.run.environment import cuda_indices, machine_name
    from yolo_mlops.sweeps.plan import check_devices

    base = RunSpec(
        model="yolo11n.yaml",
        imgsz=args.imgsz,
        batch=args.batch,
        workers=args.workers,
        synthetic_images=args.images,
        max_steps=args.max_steps,
        epochs=1,
        val=False,
        device=args.device,
        experiment=args.experiment,
        # profiler window after the discarded warm-up: its steps are excluded from timing anyway
        profiler=ProfilerSettings(skip_first=args.warmup_steps, wait=1, warmup=1, active=3),
    )
    names = [v.strip() for v in args.variants.split(",") if v.strip()]
    devices = args.devices.split(",") if args.devices else None
    cuda = args.device != "cpu" if devices is None else devices != ["cpu"]
    lane_devices = devices if devices is not None else [args.device]
    limits = [gpu_lock.machine_limit(machine_name(), cuda_indices(d)[0]) for d in lane_devices] if cuda else []
    limit = None if devices is not None or not limits else limits[0]  # lanes take their own
    record: dict = {
        "step": "gpu_sweep",
        "variants": names,
        "repeats": args.repeats,
        "max_steps": args.max_steps,
        "warmup_steps": args.warmup_steps,
        "concurrency_limit": limit,
        "devices": devices,
    }
    if args.dry_run:
        if devices is not None:  # devices are checked against this machine only when the sweep runs
            check_devices(devices, local=False)
        plan = sweeps.plan_sweep(base, names, args.repeats, "interleaved", args.warmup_steps, limit)
        record.update(status="dry-run", children=len(plan.children), skipped=plan.skipped)
        print(f"gpu_sweep: dry-run - plan of {len(plan.children)} children ok; no CUDA call made")
        return finish(args, record, 0)
    if cuda and not torch.cuda.is_available():
        record["status"] = "no-cuda"
        print(
            f"gpu_sweep: no CUDA device visible to torch (torch {torch.__version__}, CUDA build {torch.version.cuda})"
        )
        return finish(args, record, 2)
    where = torch.cuda.get_device_name(cuda_indices(args.device)[0]) if cuda else "cpu"
    print(
        f"device {where}, torch {torch.__version__}; variants: baseline, "
        + ", ".join(names)
        + f"; {args.repeats} repeats, interleaved; limit {limit}"
    )

    shared = bool(os.environ.get("PREFECT_API_URL"))
    harness: contextlib.AbstractContextManager[object] = contextlib.nullcontext()
    if not shared:
        from prefect.testing.utilities import prefect_test_harness

        harness = prefect_test_harness(server_startup_timeout=180)
    with harness:
        if not shared:  # throwaway server; on a real server the limits must already exist (strict)
            for name in limits:
                _create_limit(name)
        result = sweep(
            SweepRequest(
                base=base,
                variants=names,
                repeats=args.repeats,
                order="interleaved",
                warmup_steps=args.warmup_steps,
                concurrency_limit=limit,
                devices=devices,
            )
        )
    print()
    print(result.markdown)
    print(f"\nMLflow parent run {result.parent_run_id} ({result.run_url})")
    for child in result.children:
        if child["status"] != "ok":
            print(f"  failed child {child['variant']} r{child['repeat']}: {child['error']}")
    record.update(
        status="ran",
        device=where,
        parent_run_id=result.parent_run_id,
        best=result.best_variant,
        best_evidence=result.best_evidence,
        failed_children=result.failed_children,
        total_children=result.total_children,
        skipped=result.skipped,
        table=result.table,
        markdown=result.markdown,
        children=[
            {k: c[k] for k in ("variant", "repeat", "lane", "block", "status", "wall_s", "error")}
            for c in result.children
        ],
    )
    return finish(args, record, 0)


def _create_limit(name: str) -> None:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import GlobalConcurrencyLimitCreate

    print(f"creating Prefect concurrency limit {name} (1 slot)")
    with get_client(sync_client=True) as client:
        client.create_global_concurrency_limit(GlobalConcurrencyLimitCreate(name=name, limit=1))


if __name__ == "__main__":
    sys.exit(main())
