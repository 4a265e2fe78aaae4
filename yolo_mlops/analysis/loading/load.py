"""One trace file, or a folder with one trace per rank, loaded end to end: the parallel reader for our indexed
traces, the chosen decode backend otherwise, every unusable input raised as a TraceError that names the file."""

from __future__ import annotations

import gc
import zlib
from pathlib import Path
from typing import Protocol, TypeVar

import ijson
import numpy as np

from yolo_mlops.analysis.loading.backends import DecodeBackend, read_sequential
from yolo_mlops.analysis.loading.formats import find_trace_files, is_gzipped, rank_from_meta
from yolo_mlops.analysis.loading.parallel import load_members_in_parallel
from yolo_mlops.analysis.loading.progress import reporter_for
from yolo_mlops.analysis.loading.rank_trace import RankTrace, TraceError

_PARALLEL_BACKENDS = (None, DecodeBackend.MSGSPEC_CHUNKED)  # the parallel reader decodes with msgspec


def load_trace_file(path: str | Path, default_rank: int = 0, backend: DecodeBackend | None = None) -> RankTrace:
    """Parse one trace file with `backend` (None: the automatic choice, see DecodeBackend); raise TraceError naming
    the file on any unusable input."""
    path = Path(path)
    if not path.is_file():
        raise TraceError(f"{path}: no such trace file")
    reporter = reporter_for(path)
    collecting = gc.isenabled()
    gc.disable()  # decoding makes many short-lived objects, none in a cycle: collections would only re-scan them
    try:
        parallel = backend in _PARALLEL_BACKENDS and is_gzipped(path)
        loaded = load_members_in_parallel(path, reporter) if parallel else None
        meta, columns = loaded or read_sequential(path, reporter, backend)
    except TraceError:
        raise
    except (OSError, EOFError, zlib.error) as exc:
        # gzip.BadGzipFile is an OSError; a truncated .gz raises EOFError.
        raise TraceError(f"{path}: cannot read ({type(exc).__name__}: {exc})") from exc
    except ijson.JSONError as exc:
        raise TraceError(f"{path}: invalid or truncated JSON ({str(exc).splitlines()[0][:120]})") from exc
    except OverflowError as exc:  # an id or timestamp beyond what the columns hold (int64 / int32 streams)
        raise TraceError(f"{path}: a value out of range for a trace field ({exc})") from exc
    finally:
        if collecting:
            gc.enable()
        if reporter is not None:
            reporter.close()
    if columns.seen_events == 0:
        if meta.get("_has_trace_events"):
            raise TraceError(f"{path}: empty trace (traceEvents has no events)")
        raise TraceError(f"{path}: not a Kineto trace (no traceEvents)")
    if len(columns.ts) == 0:
        raise TraceError(f"{path}: not a Kineto trace (no complete 'X' events with ts and dur)")
    rank = rank_from_meta(meta)
    return _without_negative_durations(columns.build(path, default_rank if rank is None else rank, meta))


def _without_negative_durations(trace: RankTrace) -> RankTrace:
    """Events with a negative duration have no interval to count: left out, and said so in the result."""
    negative = trace.dur < 0
    if not negative.any():
        return trace
    first = int(np.flatnonzero(negative)[0])
    trace.warnings.append(
        f"{Path(trace.path).name}: {int(negative.sum())} event(s) with a negative duration left out, e.g. "
        f"{trace.names[int(trace.name_id[first])]!r} at {trace.ts[first]:.0f} us (dur {trace.dur[first]:g} us)"
    )
    keep = ~negative
    for column in ("name_id", "cat_id", "pid_id", "ts", "dur", "stream", "correlation", "tid_id"):
        values = getattr(trace, column)
        if values.size == keep.size:
            setattr(trace, column, values[keep])
    return trace


def load_traces(path: str | Path) -> list[RankTrace]:
    """One trace file, or a directory with one trace per rank; sorted by rank.

    The rank comes from `distributedInfo.rank`; traces without it are numbered in file-name order.
    """
    path = Path(path)
    if path.is_dir():
        files = find_trace_files(path)
        if not files:
            raise TraceError(f"{path}: directory holds no trace files (*.json, *.json.gz)")
    elif path.is_file():
        files = [path]
    else:
        raise TraceError(f"{path}: no such file or directory")
    return in_rank_order([load_trace_file(f, default_rank=i) for i, f in enumerate(files)], path)


class _OfRank(Protocol):
    rank: int
    path: str


_R = TypeVar("_R", bound=_OfRank)


def in_rank_order(per_file: list[_R], source: str | Path) -> list[_R]:
    """What each file of `source` gave (a trace, or its analysis), in rank order; two files of one rank are an
    error (two profiling cycles of one job in one folder)."""
    by_rank: dict[int, _R] = {}
    for item in per_file:
        if item.rank in by_rank:
            raise TraceError(
                f"{source}: two traces for rank {item.rank} ({Path(by_rank[item.rank].path).name}, "
                f"{Path(item.path).name}); analyze one file at a time"
            )
        by_rank[item.rank] = item
    return [by_rank[r] for r in sorted(by_rank)]
