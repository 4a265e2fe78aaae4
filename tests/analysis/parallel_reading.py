"""Test helper: make the trace loader read indexed gzip members in parallel whatever the file size and core count."""

from __future__ import annotations

import gzip
from pathlib import Path
from typing import BinaryIO, cast

from yolo_mlops.analysis import trace_loader
from yolo_mlops.profiling.trace_gzip import write_members


def force_parallel_reading(monkeypatch, processes: int = 3) -> list[int]:
    """Indexed files of any size are read by `processes` processes (more than this machine may have cores); the
    list returned collects one entry per forked reader, so a test can tell that the parallel reader ran."""
    forked: list[int] = []
    start = trace_loader._Part.__init__

    def counting(self, *args, **kwargs):
        forked.append(1)
        start(self, *args, **kwargs)

    monkeypatch.setattr(trace_loader, "PARALLEL_MIN_TEXT_BYTES", 0)
    monkeypatch.setattr(trace_loader, "_parallel_processes", lambda: processes)
    monkeypatch.setattr(trace_loader._Part, "__init__", counting)
    return forked


def as_members(source: Path, target: Path, member_bytes: int = 64 << 10) -> Path:
    """The text of `source` (plain or gzipped) as indexed gzip members (many even for small traces)."""
    opener = gzip.open if source.name.endswith(".gz") else open
    with opener(source, "rb") as text, open(target, "wb") as out:
        # a GzipFile reads as a binary file (write_members only calls read), but is no BinaryIO to mypy
        write_members(cast(BinaryIO, text), out, member_bytes=member_bytes)
    return target
