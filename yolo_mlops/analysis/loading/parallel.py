"""Our own indexed multi-member traces (profiling/trace_gzip.py) read by one process per core: each decompresses
and decodes a run of members that starts and ends at an event, this process the first run (the metadata head),
the others in the analysis layer's worker pool (analysis/worker_pool.py). A worker writes its columns to a file of
its own, pickled one at a time, and this process appends them in file order, one column at a time, so the result
is what one process reading the file from the start makes."""

from __future__ import annotations

import os
import pickle
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from yolo_mlops.analysis import worker_pool
from yolo_mlops.analysis.loading.columns import ColumnBuilder
from yolo_mlops.analysis.loading.formats import head_and_metadata
from yolo_mlops.analysis.loading.heap import release_free_heap
from yolo_mlops.analysis.loading.msgspec_chunks import FastPathUnavailable, decode_events_chunked
from yolo_mlops.analysis.loading.progress import Progress
from yolo_mlops.profiling import trace_gzip as gzip_members

if TYPE_CHECKING:
    from concurrent.futures import Future

# Traces of at least this much text are read in parallel; below it starting the workers costs more than it saves.
PARALLEL_MIN_TEXT_BYTES = 64 << 20
LOST_READER = "a trace reader process ended without a result"


def parallel_processes() -> int:
    """How many processes may read one file: one per core where the pool forks its workers (they start at once,
    the loader already imported), else one: a worker started from the fork server would import the loader before
    reading, and a pool's own worker already shares the cores with the others."""
    return worker_pool.cores() if worker_pool.fork_is_safe() else 1


def member_groups(members: list[gzip_members.Member], count: int) -> list[list[gzip_members.Member]] | None:
    """`count` runs of consecutive members of about equal text, each but the last ending at an event."""
    total = sum(m.text_size for m in members)
    groups: list[list[gzip_members.Member]] = []
    current: list[gzip_members.Member] = []
    done = 0
    for member in members:
        current.append(member)
        done += member.text_size
        if len(groups) < count - 1 and member.ends_at_event and done >= total * (len(groups) + 1) / count:
            groups.append(current)
            current = []
    if current:
        groups.append(current)
    return groups if len(groups) > 1 else None


def load_members_in_parallel(path: Path, progress: Progress | None) -> tuple[dict, ColumnBuilder] | None:
    """Metadata and events of an indexed multi-member file read in parallel. None when the file is not such a
    file, too small, or anything needs the sequential reader (which then reads it all)."""
    processes = parallel_processes()
    if processes < 2:
        return None
    with open(path, "rb") as raw:
        members = gzip_members.read_index(raw, os.fstat(raw.fileno()).st_size)
    if members is None or sum(m.text_size for m in members) < PARALLEL_MIN_TEXT_BYTES:
        return None
    groups = member_groups(members, processes)
    if groups is None:
        return None
    parts = len(groups) - 1
    with (
        tempfile.TemporaryDirectory(prefix="yolo-mlops-trace-parts-") as folder,
        worker_pool.WorkerPool(parts, parts) as pool,
    ):
        started = _start_parts(pool, path, groups, Path(folder))
        loaded = _read_first_group(path, groups[0], members, progress)
        if loaded is None:
            return None
        meta, columns = loaded
        for future, out in started:
            if not _part_result(future):
                return None
            columns.merge(_state_items(out))
        # here, before the pool shuts down (docs/benchmarks.md has the peak with each order)
        release_free_heap()
    return meta, columns


def _start_parts(
    pool: worker_pool.WorkerPool, path: Path, groups: list[list[gzip_members.Member]], folder: Path
) -> list[tuple[Future, Path]]:
    """Every group but the first, each read by a worker into a file of `folder`."""
    started = []
    for i, group in enumerate(groups[1:], start=1):
        out = folder / f"part{i}.pickle"
        started.append((pool.submit(read_part, path, group, i == len(groups) - 1, out), out))
    return started


def _read_first_group(
    path: Path, group: list[gzip_members.Member], members: list[gzip_members.Member], progress: Progress | None
) -> tuple[dict, ColumnBuilder] | None:
    """The metadata and the events of the first group, read here; None when the block decoder cannot."""
    scale = sum(m.size for m in members) / sum(m.size for m in group)  # the other groups move alike

    def texts(raw) -> Iterator[bytes]:
        for member in group:
            text = gzip_members.member_text(raw, member)
            if progress is not None:
                progress(int(member.size * scale))
            yield text

    with open(path, "rb") as raw:
        blocks = texts(raw)
        text, meta = head_and_metadata(path, blocks)
        columns = ColumnBuilder()
        try:
            if not decode_events_chunked(blocks, columns, text, ends_at_event=True):
                return None
        except FastPathUnavailable:
            return None
    return meta, columns


def read_part(path: Path, group: list[gzip_members.Member], last: bool, out: Path) -> bool:
    """A worker's task: decode one group of members and write the columns' state items to `out`, pickled one after
    another; False when the block decoder cannot read the group. An error is raised again in the caller's
    process, as if it had read the group itself."""
    try:
        columns = ColumnBuilder()
        with open(path, "rb") as raw:
            texts = (gzip_members.member_text(raw, m) for m in group)
            decode_events_chunked(texts, columns, next(texts, b""), in_events=True, ends_at_event=not last)
    except FastPathUnavailable:
        return False
    except Exception as exc:
        try:
            pickle.dumps(exc)
        except Exception:
            raise RuntimeError(f"{type(exc).__name__}: {exc}") from None
        raise
    with open(out, "wb") as fh:
        for item in columns.state_items():
            pickle.dump(item, fh, protocol=pickle.HIGHEST_PROTOCOL)
    return True


def _part_result(future: Future) -> bool:
    from concurrent.futures.process import BrokenProcessPool

    try:
        return future.result()
    except BrokenProcessPool:  # the worker died: killed, or out of memory
        raise RuntimeError(LOST_READER) from None


def _state_items(out: Path) -> Iterator[tuple[str, Any]]:
    """A worker's state items as they are read from its file, which is removed once read."""
    with open(out, "rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        while fh.tell() < size:
            yield pickle.load(fh)
    out.unlink()
