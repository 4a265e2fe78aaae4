"""GPU smoke check: profile YOLO11n at 640 px for ~30 steps with CUDA activities, then check the evidence.

Exits 0 with a message when there is no CUDA device (CI and CPU machines). On a GPU it checks that the
trace holds CUDA kernels and that the key_averages tables hold device times, and prints the headline numbers.

    .venv/bin/python benchmarks/gpu_smoke.py [--steps 30] [--batch 16]
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
import tempfile


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--imgsz", type=int, default=640)
    args = parser.parse_args()

    import torch

    if not torch.cuda.is_available():
        print("gpu_smoke: SKIPPED (no CUDA device here)")
        return 0

    import os

    os.environ.setdefault("YOLO_MLOPS_HOME", tempfile.mkdtemp(prefix="yolo-mlops-gpu-smoke-"))
    os.environ.setdefault("MLFLOW_TRACKING_URI", f"sqlite:///{os.environ['YOLO_MLOPS_HOME']}/mlflow.db")
    from yolo_mlops.run import pipeline
    from yolo_mlops.run.config import build_run_spec

    spec = build_run_spec({
        "imgsz": args.imgsz, "batch": args.batch, "epochs": 10, "max_steps": args.steps, "device": "0",
        "workers": 4, "synthetic_images": args.batch * 8, "run_kind": "smoke",
        "profiler": {"skip_first": 5, "wait": 2, "warmup": 3, "active": 5},
    })
    prepared = pipeline.prepare(spec)
    outcome = pipeline.train(prepared)
    analysis = pipeline.analyse(prepared, outcome)
    result = pipeline.track(prepared, outcome, analysis)
    from yolo_mlops import tracking

    tracking.end_run(tracking.client(), result.run_id, "FINISHED")

    trace = json.loads(gzip.decompress(outcome.trace_files[0].read_bytes()))
    kernels = [e for e in trace["traceEvents"] if e.get("cat") == "kernel"]
    device_table = next(t for t in outcome.tables if t.name == "key_averages_self_device")
    device_us = float(device_table.frame["self_device_time_us"].sum())
    print(f"device: {torch.cuda.get_device_name(0)}  torch {torch.__version__}  CUDA {torch.version.cuda}")
    print(f"trace: {outcome.trace_files[0].name}  kernel events: {len(kernels)}")
    print(f"self device time in key_averages: {device_us / 1e3:.1f} ms")
    print(f"nvml backend: {outcome.nvml.backend}  notes: {'; '.join(outcome.nvml.reasons) or '-'}")
    shown = ("perf/step_time_ms_p50", "perf/step_time_ms_p90", "perf/images_per_s", "perf/data_wait_pct")
    for key in [*shown, *sorted(k for k in result.metrics if k.startswith(("gpu/", "trace/gpu")))]:
        print(f"{key:<40} {result.metrics[key]:10.2f}")
    for finding in result.findings:
        print(f"finding [{finding['severity']}] {finding['title']} -> {finding['recommended_variants']}")
    print(device_table.text[:4000])
    ok = len(kernels) > 0 and device_us > 0
    print("gpu_smoke:", "PASSED" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
