"""`yolo-mlops analyze`: breakdowns and diagnosis of any torch.profiler trace.

Only the analysis modules are imported, and only when the command runs: no pydantic, MLflow or pandas.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from yolo_mlops.errors import ConfigError


def _on_off(text: str) -> bool:
    value = text.strip().lower()
    if value in ("on", "true", "1", "yes"):
        return True
    if value in ("off", "false", "0", "no"):
        return False
    raise argparse.ArgumentTypeError(f"expected on or off, got {text!r}")


def analyze_command(path: str, fmt: str = "text", context=None) -> str:
    """`yolo-mlops analyze PATH [--format text|json]`: breakdowns, then the diagnosis of the trace.

    `context` is a DiagnosisInput holding what the trace cannot say (AMP, batch, workers, ...); its
    `analysis` is filled in here. The rules and thresholds are the ones a profiled run uses."""
    from dataclasses import replace

    from yolo_mlops.analysis.diagnosis import DiagnosisInput, diagnose, headline
    from yolo_mlops.analysis.model import json_text
    from yolo_mlops.analysis.render_text import render_text
    from yolo_mlops.analysis.trace_analysis import analyze_traces

    if fmt not in ("text", "json"):
        raise ValueError(f"unknown format {fmt!r}: expected 'text' or 'json'")
    analysis = analyze_traces(path)
    findings = diagnose(replace(context or DiagnosisInput(), analysis=analysis))
    if fmt == "json":
        doc = analysis.to_dict()
        doc["findings"] = [f.to_dict() for f in findings]
        doc["headline"] = headline(findings)
        return json_text(doc) + "\n"
    lines = [f"warning: {w}" for w in analysis.warnings]
    lines += [render_text(analysis), "findings (largest estimated saving first):"]
    lines += [f"  {f.line()}" for f in findings] or ["  none: no rule fired"]
    lines += ["", headline(findings)]
    return "\n".join(lines) + "\n"


def cmd_analyze(args: argparse.Namespace) -> int:
    if "numpy" not in sys.modules:
        # The analysis does no linear algebra: without this, importing numpy starts OpenBLAS' thread pool
        # (one thread per core), a large share of the import's CPU time (docs/benchmarks.md, "Figures behind code
        # choices"). A user's own setting wins.
        os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    from yolo_mlops.analysis.diagnosis import DiagnosisInput
    from yolo_mlops.analysis.trace_loader import TraceError

    peak, total = args.peak_memory_gib, args.gpu_memory_gib
    if peak is not None and total is not None and peak > total:
        raise ConfigError(
            f"--peak-memory-gib {peak:g} is more than --gpu-memory-gib {total:g}: a run cannot use more memory "
            "than its device has (both in GiB)"
        )
    context = DiagnosisInput(
        data_wait_pct=args.data_wait_pct,
        device_type=args.device_type,
        amp=args.amp,
        cudnn_benchmark=args.cudnn_benchmark,
        gpu_memory_total_gib=args.gpu_memory_gib,
        peak_memory_gib=args.peak_memory_gib,
        batch_size=args.batch,
        workers=args.workers,
        step_time_ms=args.step_time_ms,
    )
    try:
        if sys.stderr.isatty():  # a progress bar for a person watching; nothing in pipes, CI logs or tests
            from yolo_mlops.analysis.progress_bar import terminal_progress
            from yolo_mlops.analysis.trace_loader import reporting_progress

            with reporting_progress(terminal_progress(sys.stderr)):
                text = analyze_command(str(args.path), args.format, context)
        else:
            text = analyze_command(str(args.path), args.format, context)
        print(text, end="")
    except TraceError as exc:
        raise ConfigError(str(exc)) from None
    return 0


def _count(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a non-negative integer, got {text}")
    return value


def _positive(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text}")
    return value


def _pct(text: str) -> float:
    value = float(text)
    if not 0 <= value <= 100:
        raise argparse.ArgumentTypeError(f"expected a percentage from 0 to 100, got {text}")
    return value


def register(sub) -> None:
    analyze = sub.add_parser(
        "analyze", help="analyze and diagnose any torch.profiler trace (file, .gz, or a folder of ranks)"
    )
    analyze.add_argument("path", type=Path)
    analyze.add_argument("--format", choices=["text", "json"], default="text")
    ctx = analyze.add_argument_group("run context: what the trace cannot say (unknown context fires no rule)")
    ctx.add_argument("--device-type", choices=["cpu", "cuda"], help="default: cuda when the trace has GPU activity")
    ctx.add_argument("--amp", type=_on_off, metavar="on|off", help="mixed precision was on / off")
    ctx.add_argument("--cudnn-benchmark", type=_on_off, metavar="on|off")
    ctx.add_argument("--batch", type=_count, help="batch size (sizes the batch_<n> suggestions)")
    ctx.add_argument("--workers", type=_count, help="data-loader workers (sizes workers_<n>)")
    ctx.add_argument("--data-wait-pct", type=_pct, help="data-wait share of step time from your own step timer")
    ctx.add_argument("--step-time-ms", type=_positive, help="mean step time from your own step timer")
    ctx.add_argument("--gpu-memory-gib", type=_positive, help="device memory")
    ctx.add_argument("--peak-memory-gib", type=_positive, help="peak GPU memory the run used")
    analyze.set_defaults(handler=cmd_analyze)
