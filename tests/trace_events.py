"""Kineto trace events laid out as torch.profiler writes them: the complete ("X") events of host ranges, CUDA
runtime calls and kernels, and the `[memory]` instant events of the caching allocator. The trace builders of the
analysis tests (tests/analysis) and the trace benchmark's generator (benchmarks/bench_trace_analysis.py) put
their traces together from these. The golden analysis (tests/fixtures/trace_golden) was made from events of
exactly this layout: keep the keys and their order."""

from __future__ import annotations

from typing import Any


def complete_event(
    cat: str, name: str, pid: int, tid: int, ts: float, dur: float, args: dict[str, Any] | None = None
) -> dict[str, Any]:
    """One complete event of category `cat` on thread (or stream) `tid` of process (or device) `pid`; no
    "args" key when `args` is None."""
    event: dict[str, Any] = {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur}
    if args is not None:
        event["args"] = args
    return event


def memory_event(
    ts: float,
    allocated: float,
    reserved: float,
    *,
    size: int,
    addr: int | None = None,
    device_type: int = 1,
    pid: int = 1,
    tid: int = 1,
) -> dict[str, Any]:
    """One `[memory]` instant event: `size` bytes (de)allocated at `addr` (no "Addr" key when None) on device 0
    of `device_type` (1: CUDA), the allocator then holding `allocated` of `reserved` bytes."""
    args: dict[str, Any] = {"Device Type": device_type, "Device Id": 0}
    if addr is not None:
        args["Addr"] = addr
    args |= {"Bytes": size, "Total Allocated": allocated, "Total Reserved": reserved}
    return {
        "ph": "i",
        "cat": "cpu_instant_event",
        "s": "t",
        "name": "[memory]",
        "pid": pid,
        "tid": tid,
        "ts": ts,
        "args": args,
    }
