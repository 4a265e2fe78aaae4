"""Test helper: make the trace loader read indexed gzip members in parallel whatever the file size and core count."""

from __future__ import annotations

import gzip
from pathlib import Path
from typing import BinaryIO, cast

from yolo_mlops.analysis import worker_pool
from yolo_mlops.analysis.loading import parallel
from yolo_mlops.profiling.trace_gzip import write_members


def force_parallel_reading(monkeypatch, processes: int = 3) -> list[int]:
    """Indexed files of any size are read by `processes` processes (more than this machine may have cores), the
    workers forked from this process even beside a test runner's threads (so they carry the test's patches); the
    list returned collects one entry per reader process started, so a test can tell that the parallel reader ran."""
    started: list[int] = []
    start = parallel._start_parts

    def counting(*args):
        parts = start(*args)
        started.extend(1 for _ in parts)
        return parts

    monkeypatch.setattr(parallel, "PARALLEL_MIN_TEXT_BYTES", 0)
    monkeypatch.setattr(parallel, "parallel_processes", lambda: processes)
    monkeypatch.setattr(parallel, "_start_parts", counting)
    monkeypatch.setattr(worker_pool, "fork_is_safe", lambda: True)
    return started


def as_members(source: Path, target: Path, member_bytes: int = 64 << 10) -> Path:
    """The text of `source` (plain or gzipped) as indexed gzip members (many even for small traces)."""
    opener = gzip.open if source.name.endswith(".gz") else open
    with opener(source, "rb") as text, open(target, "wb") as out:
        # a GzipFile reads as a binary file (write_members only calls read), but is no BinaryIO to mypy
        write_members(cast(BinaryIO, text), out, member_bytes=member_bytes)
    return target
