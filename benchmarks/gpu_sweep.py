"""GPU sweep: YOLO11n at 640 px, baseline vs the usual speed knobs, with bootstrap 95% CIs.

Runs the real `sweep` flow (every child a real profiled training run logged to MLflow) and prints the
comparison table. Without CUDA it prints why it skipped and exits 0.

    .venv/bin/python benchmarks/gpu_sweep.py                       # defaults below, ~10 min on one GPU (compile children dominate)
    .venv/bin/python benchmarks/gpu_sweep.py --repeats 2 --max-steps 40 --variants amp_bf16,compile

Prefect: with PREFECT_API_URL set the flow runs against that server, and the concurrency limit
`gpu-<index>` must exist there (`prefect gcl create gpu-0 --limit 1`; the sweep fails otherwise); without it
a throwaway local server is started and the limit created on it. MLflow: MLFLOW_TRACKING_URI, else the project's local SQLite store.

Variants: amp_bf16 (bfloat16 autocast), cudnn_benchmark (with deterministic=False), channels_last
(ultralytics 8.4.190 already uses it on CUDA: this is an A/A control that should show no difference),
channels_first (NCHW: measures what channels_last buys), compile (torch.compile default mode; its first
steps compile, hence the larger --warmup-steps), workers_2 (vs the baseline's 8).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_VARIANTS = "amp_bf16,cudnn_benchmark,channels_last,channels_first,compile,workers_2"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--variants", default=DEFAULT_VARIANTS)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--imgsz", type=int, default=640)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--images", type=int, default=960, help="synthetic training images")
    parser.add_argument("--max-steps", type=int, default=60)
    parser.add_argument("--warmup-steps", type=int, default=15, help="steps discarded per child (compile!)")
    parser.add_argument("--device", default="0")
    parser.add_argument("--experiment", default="gpu-sweep")
    args = parser.parse_args()

    import torch

    if not torch.cuda.is_available():
        print("gpu_sweep: skipped - no CUDA device visible to torch "
              f"(torch {torch.__version__}, CUDA build {torch.version.cuda}); run it on a GPU machine.")
        return 0

    from yolo_mlops.run.config import RunSpec
    from yolo_mlops.run.environment import cuda_indices

    base = RunSpec(model="yolo11n.yaml", imgsz=args.imgsz, batch=args.batch, workers=args.workers,
                   synthetic_images=args.images, max_steps=args.max_steps, epochs=1, val=False,
                   device=args.device, experiment=args.experiment,
                   # profiler window after the discarded warm-up: its steps are excluded from timing anyway
                   profiler={"skip_first": args.warmup_steps, "wait": 1, "warmup": 1, "active": 3})
    names = [v.strip() for v in args.variants.split(",") if v.strip()]
    index = cuda_indices(args.device)[0]
    limit = f"gpu-{index}"
    print(f"GPU {torch.cuda.get_device_name(index)}, torch {torch.__version__}; variants: baseline, "
          + ", ".join(names) + f"; {args.repeats} repeats, interleaved; limit {limit}")

    harness = contextlib.nullcontext()
    if not os.environ.get("PREFECT_API_URL"):
        from prefect.testing.utilities import prefect_test_harness

        harness = prefect_test_harness(server_startup_timeout=180)
    with harness:
        if not os.environ.get("PREFECT_API_URL"):
            _create_limit(limit)  # throwaway server; on a real server the limit must already exist (strict)
        from yolo_mlops.flows.sweep import sweep

        result = sweep(base=base, variants=names, repeats=args.repeats, order="interleaved",
                       warmup_steps=args.warmup_steps, concurrency_limit=limit)
    print()
    print(result.markdown)
    print(f"\nMLflow parent run {result.parent_run_id} ({result.run_url})")
    for child in result.children:
        if child["status"] != "ok":
            print(f"  failed child {child['variant']} r{child['repeat']}: {child['error']}")
    return 0


def _create_limit(name: str) -> None:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import GlobalConcurrencyLimitCreate

    print(f"creating Prefect concurrency limit {name} (1 slot)")
    with get_client(sync_client=True) as client:
        client.create_global_concurrency_limit(GlobalConcurrencyLimitCreate(name=name, limit=1))


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main())
