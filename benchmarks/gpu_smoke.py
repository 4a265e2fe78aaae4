"""GPU smoke check: one profiled YOLO11n run (640 px, ~30 steps) with CUDA activities, then its evidence checked.

The run goes through the library's own steps (prepare, train, analyze, track: what the `profile-training`
flow calls, without starting Prefect) into a real MLflow store, with the real NVML backend. Checked:
CUDA kernels in the Chrome trace, device time in the key_averages tables, the NVML backend is a real one
(GPM on Hopper and newer), and the `gpu/*` metrics exist and lie in physical ranges.

    python3 benchmarks/gpu_smoke.py [--steps 30] [--batch 16] [--result summary.json] [--copy-trace DIR]
    python3 benchmarks/gpu_smoke.py --dry-run     # imports and the run's config only, no CUDA call
    python3 benchmarks/gpu_smoke.py --device cpu --imgsz 64 --batch 4 --steps 12   # CPU rehearsal
    python3 benchmarks/gpu_smoke.py --ddp-backend nccl   # the same run as a one-rank DDP job (torchrun, NCCL)

With --ddp-backend the run is a data-parallel job of one rank (the data-parallel path on the one GPU a machine
may have): also checked are the trace's distributedInfo (rank 0, world size 1, the backend), `ddp.backend_used`,
the collectives the analysis found and the rank's own NVML metrics (rank0/gpu/*). NCCL launches no kernel for a
collective over one rank (seen on an H100, NCCL 2.28.9), so over NCCL the collectives are the host's
record_param_comms: calls per step, and message bytes that must be the model's gradients (all-reduced once a
step) plus DDP's buffer broadcast; collective time is not measured there and `rank0/comm/collective_pct` must be
absent, not 0. Over gloo (the CPU rehearsal) gloo's own spans time them: `rank0/comm/collective_pct` > 0.
What needs two or more GPUs (cross-rank waits, a straggler, NCCL between devices) stays unverified by it.

Exit 0 when every check passed; 1 when a check failed; 2 when the run could not be made (no CUDA device).
On a CPU device the CUDA checks are recorded as not applicable (ok = null), never as passed.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--imgsz", type=int, default=640)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--device", default="0", help="a CUDA index such as 0, or cpu for a rehearsal")
    parser.add_argument("--result", type=Path, help="write the checks and metrics here as JSON")
    parser.add_argument("--copy-trace", type=Path, help="copy the run's gzipped Chrome trace into this folder")
    parser.add_argument("--tables", type=Path, help="write the key_averages tables (text) to this file")
    parser.add_argument(
        "--ddp-backend", choices=["nccl", "gloo"], help="train as a one-rank data-parallel job over this backend"
    )
    parser.add_argument("--dry-run", action="store_true", help="imports and config only; no CUDA call")
    return parser


def run_spec(args: argparse.Namespace):
    from yolo_mlops.config import build_run_spec

    return build_run_spec(
        {
            "imgsz": args.imgsz,
            "batch": args.batch,
            "epochs": 10,
            "max_steps": args.steps,
            "device": args.device,
            "workers": args.workers,
            "synthetic_images": args.batch * 8,
            "run_kind": "smoke",
            "val": False,
            "profiler": {"skip_first": 5, "wait": 2, "warmup": 3, "active": 5},
            **({"ddp": {"backend": args.ddp_backend}} if args.ddp_backend else {}),
        }
    )


def check(name: str, ok: bool | None, value, expect: str) -> dict:
    return {"name": name, "ok": ok, "value": value, "expect": expect}


def in_range(metrics: dict[str, float], key: str, low: float, high: float, applicable: bool = True) -> dict:
    value = metrics.get(key)
    if not applicable:
        return check(key, None, value, "in range, on a GPU only")
    return check(key, value is not None and low <= value <= high, value, f"{low}..{high}")


def evidence(torch, device: str, outcome, result) -> list[dict]:
    """The smoke's checks over one run's outcome and logged metrics."""
    cuda = device != "cpu"
    m = result.metrics
    trace = json.loads(gzip.decompress(outcome.trace_files[0].read_bytes())) if outcome.trace_files else {}
    events = trace.get("traceEvents", [])
    kernels = [e for e in events if e.get("cat") == "kernel"]
    kernel_ms = sum(float(e.get("dur", 0)) for e in kernels) / 1e3
    tables = {t.name: t for t in outcome.tables}
    device_table = tables.get("key_averages_self_device")
    device_ms = float(device_table.frame["self_device_time_us"].sum()) / 1e3 if device_table is not None else None
    backend = outcome.nvml.backend
    hopper = cuda and torch.cuda.get_device_capability(int(device))[0] >= 9
    total_gib = torch.cuda.get_device_properties(int(device)).total_memory / 2**30 if cuda else None
    util_key = "gpu/sm_util_pct_mean" if backend == "gpm" else "gpu/gpu_util_pct_mean"
    checks = [
        check("trace files", len(outcome.trace_files) > 0, len(outcome.trace_files), ">= 1"),
        check("CUDA kernel events in the trace", len(kernels) > 0 if cuda else None, len(kernels), "> 0 on a GPU"),
        check("kernel time in the trace (ms)", kernel_ms > 0 if cuda else None, round(kernel_ms, 3), "> 0 on a GPU"),
        check(
            "key_averages_self_device table",
            device_table is not None if cuda else None,
            sorted(tables),
            "present on a GPU",
        ),
        check("self device time in key_averages (ms)", (device_ms or 0) > 0 if cuda else None, device_ms, "> 0"),
        check(
            "NVML backend is real",
            backend in ("gpm", "samples", "utilization") if cuda else None,
            backend,
            "gpm | samples | utilization on a GPU",
        ),
        check(
            "GPM on Hopper or newer",
            (backend == "gpm") if hopper else None,
            backend,
            "gpm when compute capability >= 9.0",
        ),
        in_range(m, util_key, 0.01, 100.0, cuda),
        in_range(m, "gpu/dram_bw_util_pct_mean", 0.0, 100.0, cuda and backend == "gpm"),
        in_range(m, "gpu/mem_used_gib_max", 0.05, (total_gib or 0) * 1.01, cuda),
        in_range(m, "gpu/mem_total_gib", (total_gib or 0) * 0.9, (total_gib or 0) * 1.1, cuda),
        in_range(m, "gpu/power_w_mean", 20.0, 1500.0, cuda),
        in_range(m, "gpu/energy_j", 0.001, 1e6, cuda),
        in_range(m, "gpu/energy_per_image_j", 1e-6, 1e4, cuda),
        in_range(m, "gpu/sm_clock_mhz_mean", 100.0, 4000.0, cuda),
        in_range(m, "gpu/temp_c_max", 5.0, 110.0, cuda),
        # the fleet view's evidence of a slow machine (H200: max SM clock 1980 MHz, 700 W, PCIe 5 x16)
        in_range(m, "gpu/sm_clock_max_mhz", 300.0, 4000.0, cuda),
        in_range(m, "gpu/power_limit_w", 50.0, 1500.0, cuda),
        in_range(m, "gpu/pcie_gen", 1.0, 6.0, cuda),
        in_range(m, "gpu/pcie_width", 1.0, 32.0, cuda),
        in_range(m, "perf/step_time_ms_p50", 0.01, 60_000.0),
        in_range(m, "perf/images_per_s", 0.01, 1e7),
    ]
    return checks


def ddp_evidence(device: str, backend: str, outcome, result, params: dict[str, str]) -> list[dict]:
    """A one-rank data-parallel job: its process group, its collectives and its own NVML sampler."""
    cuda = device != "cpu"
    m = result.metrics
    traces = [f for rank in outcome.ranks for f in rank.trace_files]
    info = json.loads(gzip.decompress(traces[-1].read_bytes())).get("distributedInfo", {}) if traces else {}
    return [
        check("one rank's outcome", len(outcome.ranks) == 1, len(outcome.ranks), "1"),
        check("distributedInfo backend", info.get("backend") == backend, info.get("backend"), backend),
        check(
            "distributedInfo rank, world size",
            (info.get("rank"), info.get("world_size")) == (0, 1),
            [info.get("rank"), info.get("world_size")],
            "[0, 1]",
        ),
        check(
            "ddp.backend_used param", params.get("ddp.backend_used") == backend, params.get("ddp.backend_used"), backend
        ),
        check(
            "DDP wrapped the model",
            "ddp.applied.find_unused_parameters" in params,
            sorted(k for k in params if k.startswith("ddp.applied.")),
            "ddp.applied.* params",
        ),
        in_range(m, "rank0/comm/calls_per_step", 1.0, 1e4),
        *comm_evidence(backend, m),
        in_range(m, "rank0/gpu/mem_used_gib_max", 0.05, 1e4, cuda),
        in_range(m, "rank0/gpu/power_w_mean", 20.0, 1500.0, cuda),
    ]


def comm_evidence(backend: str, m: dict[str, float]) -> list[dict]:
    """What a one-rank job's collectives can show: NCCL runs no kernel for them (no time, only the host's calls
    and their message sizes), gloo times them on its own threads."""
    if backend != "nccl":
        return [in_range(m, "rank0/comm/collective_pct", 1e-6, 100.0)]
    gradient_mib = m.get("comm/gradient_mib")
    absent = "absent: NCCL runs no kernel for one rank, nothing to time"
    return [
        check(
            "rank0/comm/collective_pct",
            "rank0/comm/collective_pct" not in m,
            m.get("rank0/comm/collective_pct"),
            absent,
        ),
        # every gradient all-reduced once a step, plus DDP's unused-parameter map and buffer broadcast (H100: +0.6%)
        in_range(m, "rank0/comm/message_mib_per_step", gradient_mib, gradient_mib * 1.05)
        if gradient_mib
        else check("comm/gradient_mib", False, None, "logged by a data-parallel job"),
    ]


def main() -> int:
    args = build_parser().parse_args()
    home = os.environ.setdefault("YOLO_MLOPS_HOME", tempfile.mkdtemp(prefix="yolo-mlops-gpu-smoke-"))
    os.environ.setdefault("MLFLOW_TRACKING_URI", f"sqlite:///{home}/mlflow.db")
    import torch

    from yolo_mlops.run import pipeline
    from yolo_mlops.tracking import connection, run_end

    spec = run_spec(args)
    record: dict = {
        "step": "gpu_ddp" if args.ddp_backend else "gpu_smoke",
        "device_arg": args.device,
        "spec": {
            "model": spec.model,
            "imgsz": spec.imgsz,
            "batch": spec.batch,
            "max_steps": spec.max_steps,
            "workers": spec.workers,
        },
    }
    if args.dry_run:
        record["status"] = "dry-run"
        print("gpu_smoke: dry-run - imports and run config ok; no CUDA call made")
        return finish(args, record, 0)
    if args.device != "cpu" and not torch.cuda.is_available():
        record["status"] = "no-cuda"
        print(f"gpu_smoke: no CUDA device visible to torch {torch.__version__} (CUDA build {torch.version.cuda})")
        return finish(args, record, 2)

    prepared = pipeline.prepare(spec)
    mlflow = connection.client()
    with run_end.run_guard(mlflow, prepared.run_id, salvage=pipeline.RunSalvage(mlflow, prepared)):
        outcome = pipeline.train(prepared)
        analysis = pipeline.analyze(prepared, outcome)
        result = pipeline.track(prepared, outcome, analysis)
    ddp_job = bool(args.ddp_backend)
    checks = evidence(torch, args.device, outcome.ranks[0] if ddp_job else outcome, result)
    if ddp_job:
        params = mlflow.get_run(result.run_id).data.params
        checks += ddp_evidence(args.device, args.ddp_backend, outcome, result, params)
    failed = [c for c in checks if c["ok"] is False]
    cuda = args.device != "cpu"
    record.update(
        {
            "status": "failed" if failed else "passed",
            "device": torch.cuda.get_device_name(int(args.device)) if cuda else "cpu",
            "capability": list(torch.cuda.get_device_capability(int(args.device))) if cuda else None,
            "torch": torch.__version__,
            "torch_cuda": torch.version.cuda,
            "mlflow_run_id": result.run_id,
            "nvml_backend": outcome.nvml.backend,
            "nvml_notes": outcome.nvml.reasons,
            "checks": checks,
            "metrics": {
                k: v
                for k, v in sorted(result.metrics.items())
                if k.startswith(("gpu/", "perf/", "trace/", "comm/", "rank0/comm/"))
            },
            "findings": [
                {"severity": f.severity, "title": f.title, "recommended_variants": f.recommended_variants}
                for f in result.findings
            ],
            "applied": outcome.applied.tags(),
        }
    )
    if outcome.trace_files:
        record["trace_source"] = str(outcome.trace_files[0])
    if args.copy_trace and outcome.trace_files:
        args.copy_trace.mkdir(parents=True, exist_ok=True)
        record["trace_file"] = str(shutil.copy2(outcome.trace_files[0], args.copy_trace))
    if args.tables:
        tables = (outcome.ranks[0] if ddp_job else outcome).tables
        args.tables.write_text("\n\n".join(f"== {t.name} (sorted by {t.sort_by})\n{t.text}" for t in tables))
    print(f"device {record['device']}  torch {torch.__version__}  nvml backend {outcome.nvml.backend}")
    for c in checks:
        mark = {True: "ok  ", False: "FAIL", None: "n/a "}[c["ok"]]
        print(f"  {mark} {c['name']:<44} {c['value']!s:<24} (expect {c['expect']})")
    for f in record["findings"]:
        print(f"  finding [{f['severity']}] {f['title']} -> {f['recommended_variants']}")
    print("gpu_smoke:", record["status"].upper())
    return finish(args, record, 1 if failed else 0)


def finish(args: argparse.Namespace, record: dict, code: int) -> int:
    """Exit code `code`, once `record` is written to --result when one was asked for (gpu_checks.py reads it)."""
    if args.result:
        args.result.write_text(json.dumps(record, indent=2, default=str))
    return code


if __name__ == "__main__":
    sys.exit(main())
