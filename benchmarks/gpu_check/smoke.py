"""The smoke steps: a short profiled training run on the device (single process, then a one-rank data-parallel
job), and the analysis of its trace by the project's CLI."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

from . import BENCH, ROOT
from .output import last_line

if TYPE_CHECKING:
    from .runner import Checks, StepRun


FIXTURE_TRACES = (ROOT / "tests" / "fixtures" / "gpu_traces",)  # real GPU traces (HTA test data, see its README)
TRACE_CAP = 15 * 2**20  # the GPU machine returns files up to 16 MiB


def cmd_smoke(ch: Checks) -> list[str]:
    size = (
        ["--imgsz", "64", "--batch", "4", "--steps", "16", "--workers", "0"]
        if ch.tiny
        else ["--imgsz", "640", "--batch", "16", "--steps", "30", "--workers", "4"]
    )
    return [
        ch.py,
        str(BENCH / "gpu_smoke.py"),
        *size,
        "--device",
        ch.device,
        "--result",
        str(ch.work / "smoke.json"),
        "--copy-trace",
        str(ch.out / "trace"),
        "--tables",
        str(ch.out / "key_averages.txt"),
    ]


def cmd_ddp(ch: Checks) -> list[str]:
    """The smoke run as a one-rank data-parallel job: NCCL on the GPU (gloo in the CPU rehearsal)."""
    command = cmd_smoke(ch)
    command[command.index("--result") + 1] = str(ch.work / "ddp.json")
    command[command.index("--copy-trace") + 1] = str(ch.out / "trace-ddp")
    command[command.index("--tables") + 1] = str(ch.out / "key_averages_ddp.txt")
    return [*command, "--ddp-backend", "gloo" if ch.tiny else "nccl"]


def judge_ddp(ch: Checks, run: StepRun, output: str) -> None:
    judge_smoke(ch, run, output, "ddp.json")


def judge_smoke(ch: Checks, run: StepRun, output: str, result_file: str = "smoke.json") -> None:
    path = ch.work / result_file
    run.result = json.loads(path.read_text()) if path.exists() else {}
    trace = run.result.get("trace_file")
    if trace and Path(trace).stat().st_size > TRACE_CAP:
        mib = Path(trace).stat().st_size / 2**20
        run.result["trace_note"] = f"trace is {mib:.1f} MiB: too large to come back; removed from OUT"
        Path(trace).unlink()
    status = run.result.get("status")
    run.status = status if status in ("passed", "failed") else "error"
    failed = [c["name"] for c in run.result.get("checks", []) if c["ok"] is False]
    run.note = (
        f"failed checks: {failed}"
        if failed
        else (
            f"{status or 'no result'}; nvml backend {run.result.get('nvml_backend')}"
            if run.result
            else f"no result written (exit {run.rc}): {last_line(output)}"
        )
    )


def _gpu_trace(ch: Checks) -> Path | None:
    """The smoke run's trace: the copy under OUT, else (too large to come back) the run folder's own."""
    smoke = ch.result_of("gpu_smoke")
    for key in ("trace_file", "trace_source"):
        if smoke.get(key) and Path(smoke[key]).exists():
            return Path(smoke[key])
    return None


def cmd_trace_analysis(ch: Checks) -> list[str] | str:
    trace = _gpu_trace(ch)
    if trace is None:
        return "the smoke step left no trace to analyze"
    return [ch.py, "-m", "yolo_mlops.cli", "analyze", str(trace), "--format", "json"]


def judge_trace_analysis(ch: Checks, run: StepRun, output: str) -> None:
    start = output.find("{")
    report = json.JSONDecoder().raw_decode(output[start:])[0] if run.rc == 0 and start >= 0 else {}
    ranks = report.get("ranks") or [{}]
    gpu = ranks[0].get("gpu") or {}
    run.result = {
        "whole_process_s": run.seconds,
        "hta": "not carried to the GPU machine (size); no HTA comparison",
        "device_name": ranks[0].get("device_name"),
        "event_count": ranks[0].get("event_count"),
        "gpu": gpu,
        "kernel_types": ranks[0].get("kernel_types"),
        "step_time": ranks[0].get("step_time"),
        "top_kernels": (ranks[0].get("top_kernels") or [])[:5],
        "idle_breakdown": ranks[0].get("idle_breakdown"),
    }
    cuda = ch.device != "cpu"
    kernels = gpu.get("kernel_count") or 0
    if run.rc != 0 or not report:
        run.status, run.note = "failed", f"analyze exited {run.rc}: {last_line(output)}"
    elif cuda and kernels == 0:
        run.status, run.note = "failed", "the analyzer found no GPU kernels in a CUDA trace"
    else:
        run.status = "passed"
        idle = gpu.get("idle_pct", float("nan"))
        run.note = (
            f"{kernels} kernels, GPU idle {idle:.1f}%, {run.seconds} s whole process"
            if gpu
            else f"no GPU section (device {ch.device}); {run.seconds} s"
        )


def dry_trace_analysis(ch: Checks) -> list[str]:
    fixtures = [p for d in FIXTURE_TRACES if d.is_dir() for p in sorted(d.glob("*.json.gz"))]
    if fixtures:  # a real GPU trace from elsewhere: the same command, on a file that exists already
        smallest = min(fixtures, key=lambda p: p.stat().st_size)
        return [ch.py, "-m", "yolo_mlops.cli", "analyze", str(smallest), "--format", "json"]
    return [ch.py, "-m", "yolo_mlops.cli", "analyze", "--help"]
