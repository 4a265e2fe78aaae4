"""Load Kineto / Chrome traces written by `torch.profiler` into columnar numpy arrays.

The decompressed file is streamed in blocks; each block's complete events are decoded by a typed
msgspec decoder that builds only the fields we use, appended to typed `array.array` columns and
dropped. Memory therefore grows with the number of events (the columns, their integers narrowed), not
with the JSON size, and no per-event Python object outlives its
block. Names, categories and process ids are interned into small tables. Layouts the block decoder
does not handle fall back to ijson streaming. docs/analysis.md has the measurements that picked
this design.
"""

from __future__ import annotations

import ctypes
import gc
import gzip
import io
import os
import pickle
import re
import signal
import sys
import threading
import zlib
from array import array
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from operator import attrgetter
from pathlib import Path
from typing import Any, NamedTuple, Protocol, TypeVar

import ijson
import msgspec
import numpy as np

from yolo_mlops.profiling import trace_gzip as gzip_members

# Streaming parser backend: the C one, far faster than ijson's pure-Python fallback (docs/benchmarks.md, "Figures
# behind code choices").
try:
    _IJSON = ijson.get_backend("yajl2_c")
except ImportError:  # pragma: no cover - wheels ship the C backend; keep working without it
    _IJSON = ijson

TRACE_SUFFIXES = (".json", ".json.gz")
# Kineto writes `distributedInfo` / `deviceProperties` before `traceEvents`; reading this many
# decompressed bytes from the head is enough to find them without a second full pass.
METADATA_HEAD_BYTES = 1 << 20
READ_BUFFER_BYTES = 1 << 18
_METADATA_KEYS = ("distributedInfo", "deviceProperties")  # the top-level keys the analyses read

# Event categories that are activities on the GPU itself (Kineto names; old traces capitalise).
GPU_ACTIVITY_CATEGORIES = frozenset({"kernel", "gpu_memcpy", "gpu_memset", "memcpy", "memset"})
MEMORY_EVENT_NAME = "[memory]"
COLLECTIVE_RECORD_NAME = "record_param_comms"  # torch's record of each c10d collective a rank issued
CUDA_DEVICE_TYPE = 1  # `Device Type` in [memory] events: 0 = CPU, 1 = CUDA


# Our own indexed multi-member traces (gzip_members) of at least this much text are read by one process per core,
# each decompressing and parsing its share of the members; below it a fork costs more than it saves.
PARALLEL_MIN_TEXT_BYTES = 64 << 20

Progress = Callable[[int], None]  # called with the number of file bytes just read
# (path, file size) -> a progress callback with a close() method, or None; set by reporting_progress()
_progress_factory: Callable[[Path, int], ProgressReporter | None] | None = None


class ProgressReporter:
    """What reporting_progress's factory returns: called with the bytes just read, closed when the file is done."""

    def __call__(self, nbytes: int) -> None:  # pragma: no cover - interface
        raise NotImplementedError

    def close(self) -> None:  # pragma: no cover - interface
        raise NotImplementedError


@contextmanager
def reporting_progress(factory: Callable[[Path, int], ProgressReporter | None]) -> Iterator[None]:
    """Within the block, every trace file loaded reports its bytes read to `factory(path, file size)`'s reporter."""
    global _progress_factory
    previous, _progress_factory = _progress_factory, factory
    try:
        yield
    finally:
        _progress_factory = previous


class TraceError(ValueError):
    """A trace file or directory that cannot be analyzed; the message names the file."""


@dataclass
class RankTrace:
    """Complete ("X") events of one rank as parallel columns; strings live in `names`/`categories`."""

    path: str
    rank: int
    names: list[str]
    categories: list[str]
    # The integer columns are signed and as narrow as their values allow (int8 to int64, see _narrowed_copy):
    # a big trace's few categories, threads and streams then take a byte an event, not four or eight.
    name_id: np.ndarray  # index into names
    cat_id: np.ndarray  # index into categories
    pid_id: np.ndarray  # index into pids (Kineto: the device id for GPU activities)
    ts: np.ndarray  # float64 microseconds
    dur: np.ndarray  # float64 microseconds
    stream: np.ndarray  # -1 when the event has no CUDA stream
    correlation: np.ndarray  # -1 when absent
    pids: list[str]
    memory: MemoryEvents
    device_properties: list[dict] = field(default_factory=list)
    # thread of each event (index into tids): on CPU ranks gloo's collectives run on threads of their own
    tid_id: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int8))
    tids: list[str] = field(default_factory=list)
    backend: str | None = None  # distributedInfo.backend ("nccl", "gloo"); None outside a process group
    world_size: int | None = None  # distributedInfo.world_size
    warnings: list[str] = field(default_factory=list)  # what was left out of the analysis, and why
    # the record_param_comms events whose args name their collective (torch's c10d records them, with or
    # without a kernel behind them), in file order
    collective_records: list[CollectiveRecord] = field(default_factory=list)

    @property
    def event_count(self) -> int:
        return int(self.ts.size)

    def category_mask(self, categories: frozenset[str]) -> np.ndarray:
        wanted = [i for i, c in enumerate(self.categories) if c.lower() in categories]
        return id_mask(self.cat_id, wanted, len(self.categories))

    def name_mask(self, name_ids: Iterable[int]) -> np.ndarray:
        """Which events have one of these names (indices into `names`)."""
        return id_mask(self.name_id, name_ids, len(self.names))

    def gpu_mask(self) -> np.ndarray:
        return self.category_mask(GPU_ACTIVITY_CATEGORIES) & (self.stream >= 0)

    def take_memory(self) -> MemoryEvents:
        """The `[memory]` events, handed over: the trace keeps empty columns. Only the memory profile reads them,
        so a big trace's are freed once it has, before the GPU activities exist (what that saves:
        docs/benchmarks.md)."""
        memory, self.memory = self.memory, MemoryEvents.empty()
        return memory


class CollectiveRecord(NamedTuple):
    """One `record_param_comms` event: a collective as c10d issued it on the host, from the event's args."""

    ts: float  # microseconds, the trace's clock
    collective: str  # "Collective name": allreduce, broadcast, allgather, ..., and "wait" for a wait on one
    in_nelems: int | None  # "In msg nelems": elements of the rank's input message
    dtype: str | None  # "dtype": c10's scalar type name (Float, Half, BFloat16, Long, ...)
    group_size: int | None  # "Group size": ranks in the collective's process group


def id_mask(ids: np.ndarray, wanted: Iterable[int], size: int) -> np.ndarray:
    """np.isin(ids, wanted) for interned ids in [0, size), read through a table of `size` booleans: the mask is
    the only array made, where np.isin makes temporaries several times its size and takes longer (the figures:
    docs/benchmarks.md)."""
    table = np.zeros(size, dtype=bool)
    table[list(wanted)] = True
    return table[ids]


@dataclass
class MemoryEvents:
    """`[memory]` instant events (only present when profiling with profile_memory=True)."""

    ts: np.ndarray
    device_type: np.ndarray  # narrowed like RankTrace's integer columns
    total_allocated: np.ndarray  # bytes, float64 (some traces lack it: NaN)
    total_reserved: np.ndarray

    @classmethod
    def empty(cls) -> MemoryEvents:
        return cls(np.zeros(0), np.zeros(0, dtype=np.int8), np.zeros(0), np.zeros(0))


class _Interner:
    def __init__(self) -> None:
        self.index: dict = {}
        self.values: list = []

    def many(self, values: list) -> list[int]:
        index, table = self.index, self.values
        # new values in first-seen order (dict.fromkeys dedups in C; a block has few distinct values),
        # then every value's code through dict lookups mapped in C
        for value in dict.fromkeys(values):
            if value not in index:
                index[value] = len(table)
                table.append(value)
        return list(map(index.__getitem__, values))


def _open_binary(path: Path) -> io.BufferedIOBase:
    if path.name.endswith(".gz"):
        return gzip.open(path, "rb")
    return open(path, "rb")


def _metadata_before_events(head: bytes) -> dict | None:
    """Kineto's layout: every metadata key precedes traceEvents, so the text before the key plus
    `"traceEvents": []}` is a complete JSON object. None when that does not hold."""
    match = _TRACE_EVENTS_KEY_RE.search(head)
    if match is None:
        return None
    try:
        meta = msgspec.json.decode(head[: match.start()] + b'"traceEvents": []}')
    except msgspec.DecodeError:
        return None
    if not isinstance(meta, dict):
        return None
    meta.pop("traceEvents", None)
    meta["_has_trace_events"] = True
    return meta


def _read_metadata(path: Path, head: bytes) -> dict:
    """Top-level keys other than traceEvents found in the file's head (its first decompressed bytes)."""
    if not head.strip():
        raise TraceError(f"{path}: empty file")
    first = head.lstrip()[:1]
    if first != b"{":
        raise TraceError(f"{path}: not a Kineto trace (top level is not a JSON object)")
    fast = _metadata_before_events(head)
    if fast is not None and all(key in fast or f'"{key}"'.encode() not in head for key in _METADATA_KEYS):
        # every key we use is before the events or nowhere in the head: parsing the head's events
        # (tens of ms for a MiB of them) could find nothing more
        return fast
    # Otherwise read every complete top-level key in the head, including any after traceEvents.
    meta: dict = {}
    try:
        for key, value in _IJSON.kvitems(io.BytesIO(head), "", use_float=True):
            if key == "traceEvents":  # built only within the bounded head; metadata may follow
                meta["_has_trace_events"] = True
                continue
            meta[key] = value
    except ijson.IncompleteJSONError:
        # The head ends inside traceEvents (or inside whatever comes first): expected for big files.
        pass
    except ijson.JSONError as exc:
        raise TraceError(f"{path}: invalid JSON ({exc})") from exc
    if b'"traceEvents"' in head:
        meta["_has_trace_events"] = True
    return meta


class _Args(
    msgspec.Struct,
    gc=False,  # never part of a reference cycle: untracked objects make decoding cheaper for the collector
    frozen=True,  # shared default of every event without args
    rename={
        "device_type": "Device Type",
        "total_allocated": "Total Allocated",
        "total_reserved": "Total Reserved",
        "collective": "Collective name",
        "in_nelems": "In msg nelems",
        "group_size": "Group size",
    },
):
    """The args we read (Kineto's key spelling); msgspec skips every other key without building it."""

    stream: int = -1  # typed: a non-integer stream or correlation sends the file to the ijson fallback
    correlation: int = -1
    device_type: Any = -1
    total_allocated: Any = None
    total_reserved: Any = None
    # record_param_comms only (COLLECTIVE_RECORD_NAME): what the collective was and its message
    collective: Any = None
    in_nelems: Any = None
    dtype: Any = None
    group_size: Any = None


_NO_ARGS = _Args()


class _TypedEvent(msgspec.Struct, gc=False):
    """One trace event, only the fields we use; values of unexpected type fall back to ijson."""

    ph: Any = None
    cat: Any = ""
    name: Any = ""
    pid: Any = ""
    tid: Any = ""
    ts: float | None = None
    dur: float | None = None
    args: _Args = _NO_ARGS


_CHUNK_DECODER = msgspec.json.Decoder(list[_TypedEvent])
_TRACE_EVENTS_KEY_RE = re.compile(rb'"traceEvents"\s*:\s*\[')
_EVENT_BOUNDARY = b"},"
_NEXT_EVENT_RE = re.compile(rb"\s*\{")
# Give up on the fast path (and stream with ijson instead) when this much text has no decodable cut.
_MAX_PENDING_BYTES = 64 << 20
_CUT_ATTEMPTS = 8
_TAIL_ATTEMPTS = 256


class _FastPathUnavailable(Exception):
    """The chunked decoder met a layout it does not handle; the caller falls back to ijson."""


def _read_blocks(fh) -> Iterator[bytes]:
    """The rest of fh, READ_BUFFER_BYTES at a time."""
    return iter(lambda: fh.read(READ_BUFFER_BYTES), b"")


def _decode_events_chunked(
    blocks: Iterator[bytes],
    columns: _ColumnBuilder,
    pending: bytes = b"",
    in_events: bool = False,
    ends_at_event: bool = False,
) -> bool:
    """Decode traceEvents in blocks with msgspec, starting with `pending` (the bytes before `blocks`);
    False when the file has no traceEvents key.

    Blocks are cut after a `},` and validated by decoding `[` + block + `]`: a cut that falls
    inside an event leaves unbalanced JSON, which the decoder rejects, so we retry at an earlier
    `},`. Raises _FastPathUnavailable for anything else (odd types, no cut in _MAX_PENDING_BYTES, bad tail).
    The text waits in one bytearray, `[` + what is not decoded yet, and is decoded in place (through
    a memoryview, with the `,` after the cut briefly made a `]`): each byte is copied once, on arrival.

    A part of the events array alone (the text of a group of gzip members, read in parallel): `in_events`,
    the text starts at an event, not at the file's start; `ends_at_event`, it ends right after an event's
    `},` rather than with the array's end.
    """
    if in_events:
        buffer = bytearray(b"[")
        buffer += pending
    else:
        while True:  # find the start of the traceEvents array
            match = _TRACE_EVENTS_KEY_RE.search(pending)
            if match:
                break
            block = next(blocks, b"")
            if not block:
                return False
            pending = pending[-64:] + block  # keep enough to match a key split across blocks
        buffer = bytearray(b"[")
        buffer += memoryview(pending)[match.end() :]
    del pending
    for block in blocks:
        buffer += block
        _decode_complete_prefix(buffer, columns)
        if len(buffer) > _MAX_PENDING_BYTES:
            raise _FastPathUnavailable
    _decode_complete_prefix(buffer, columns)
    if ends_at_event:
        _decode_rest_of_part(buffer, columns)
    else:
        _decode_tail(buffer, columns)
    return True


def _decode_rest_of_part(buffer: bytearray, columns: _ColumnBuilder) -> None:
    """The events left at the end of a part that ends right after an event's `},`."""
    end = len(buffer.rstrip())
    if end <= 1 and not buffer[1:].strip():
        return
    if buffer[end - 1] != 0x2C:  # ","
        raise _FastPathUnavailable
    events = _decode_array(buffer, end - 1)
    if events is None:
        raise _FastPathUnavailable
    columns.add_events(events)


def _decode_complete_prefix(buffer: bytearray, columns: _ColumnBuilder) -> None:
    """Decode the longest run of whole events at the start of buffer (`[` + text); leave `[` + the rest."""
    end = len(buffer)
    for _ in range(_CUT_ATTEMPTS):
        cut = buffer.rfind(_EVENT_BOUNDARY, 1, end)
        # a `},` inside a string (C++ kernel names hold `{lambda()#1}, ...`) is not followed by the next
        # event's `{`: skip it without the failed decode of a whole block
        while cut >= 0 and not _NEXT_EVENT_RE.match(buffer, cut + 2):
            cut = buffer.rfind(_EVENT_BOUNDARY, 1, cut)
        if cut < 0:
            return
        events = _decode_array(buffer, cut + 1)
        if events is None:
            end = cut  # the cut was inside an event: try an earlier one
            continue
        columns.add_events(events)
        del buffer[1 : cut + 2]
        return


def _decode_tail(buffer: bytearray, columns: _ColumnBuilder) -> None:
    """The last event(s) and the array's closing `]`.

    Exactly one `]` closes a valid array; scan from the left, since after the last event can come
    top-level metadata with many `]` (Kineto's "INFO" log lines), while the events left here
    (after _decode_complete_prefix) hold few.
    """
    close = 0
    for _ in range(_TAIL_ATTEMPTS):
        close = buffer.find(b"]", close + 1)
        if close < 0:
            break
        events = _decode_array(buffer, close)
        if events is not None:
            columns.add_events(events)
            return
    raise _FastPathUnavailable


def _decode_array(buffer: bytearray, close: int) -> list | None:
    """Decode buffer[: close + 1] with the byte at `close` read as `]`; None when that is not complete
    JSON (an earlier cut may be); _FastPathUnavailable when an event has odd types."""
    original = buffer[close]
    buffer[close] = 0x5D  # "]"
    try:
        with memoryview(buffer) as whole, whole[: close + 1] as text:
            return _CHUNK_DECODER.decode(text)
    except msgspec.ValidationError as exc:
        raise _FastPathUnavailable from exc
    except msgspec.DecodeError:
        return None
    finally:
        buffer[close] = original


def _stream_events_ijson(fh, columns: _ColumnBuilder) -> None:
    """Fallback parser: any valid JSON layout, one event dict at a time (several times slower)."""
    batch: list[_TypedEvent] = []
    for event in _IJSON.items(fh, "traceEvents.item", use_float=True, buf_size=READ_BUFFER_BYTES):
        batch.append(_event_from_dict(event))
        if len(batch) >= 4096:
            columns.add_events(batch)
            batch = []
    columns.add_events(batch)


def _event_from_dict(event) -> _TypedEvent:
    if not isinstance(event, dict):
        return _TypedEvent()  # counted as seen, read as nothing
    args = event.get("args")
    if isinstance(args, dict):
        args = _Args(
            stream=_as_int(args.get("stream", -1)),
            correlation=_as_int(args.get("correlation", -1)),
            device_type=args.get("Device Type", -1),
            total_allocated=args.get("Total Allocated"),
            total_reserved=args.get("Total Reserved"),
            collective=args.get("Collective name"),
            in_nelems=args.get("In msg nelems"),
            dtype=args.get("dtype"),
            group_size=args.get("Group size"),
        )
    else:
        args = _NO_ARGS
    ts, dur = _as_float(event.get("ts")), _as_float(event.get("dur"))
    return _TypedEvent(
        ph=event.get("ph"),
        cat=_hashable(event.get("cat", "")),
        name=_hashable(event.get("name", "")),
        pid=_hashable(event.get("pid", "")),
        tid=_hashable(event.get("tid", "")),
        ts=None if ts != ts else ts,  # NaN (missing or unreadable) -> None
        dur=None if dur != dur else dur,
        args=args,
    )


def _hashable(value):
    return value if isinstance(value, (str, int, float)) else str(value)


def _parse_events_ijson(path: Path) -> _ColumnBuilder:
    columns = _ColumnBuilder()
    with _open_binary(path) as fh:
        _stream_events_ijson(fh, columns)
    return columns


def _text_blocks(path: Path, raw, progress: Progress | None) -> Iterator[bytes]:
    """The decompressed text of the open file `raw`: gunzipped by a reader thread for .gz files."""
    if path.name.endswith(".gz"):
        return gzip_members.gzip_pieces(raw, progress)
    if progress is None:
        return _read_blocks(raw)
    return _counted(_read_blocks(raw), progress)


def _counted(blocks: Iterator[bytes], progress: Progress) -> Iterator[bytes]:
    for block in blocks:
        progress(len(block))
        yield block


def _head_and_rest(blocks: Iterator[bytes]) -> bytes:
    """The text from the start up to at least METADATA_HEAD_BYTES (or all of it): blocks hold the rest."""
    parts, size = [], 0
    while size < METADATA_HEAD_BYTES:
        block = next(blocks, b"")
        if not block:
            break
        parts.append(block)
        size += len(block)
    return b"".join(parts)


def _load_sequential(path: Path, progress: Progress | None) -> tuple[dict, _ColumnBuilder]:
    """Metadata and events, the file read once from the start (decompressed beside the parsing)."""
    with open(path, "rb") as raw:
        blocks = _text_blocks(path, raw, progress)
        try:
            text = _head_and_rest(blocks)
            meta = _read_metadata(path, text[:METADATA_HEAD_BYTES])
            columns = _ColumnBuilder()
            try:
                _decode_events_chunked(blocks, columns, text)
                return meta, columns
            except _FastPathUnavailable:
                pass
        finally:
            close = getattr(blocks, "close", None)
            if close is not None:
                close()  # stops the reader thread when the parse ended early
    return meta, _parse_events_ijson(path)


def _parallel_processes() -> int:
    """How many processes may read one file: one per core, but only from a process that forks safely (Linux,
    no other thread: a forked child inherits no lock another thread holds) and is no worker of a pool already
    spreading files over the cores."""
    if sys.platform != "linux" or threading.active_count() != 1:
        return 1
    multiprocessing = sys.modules.get("multiprocessing")
    if multiprocessing is not None and multiprocessing.parent_process() is not None:
        return 1
    return len(os.sched_getaffinity(0))


def _member_groups(members: list[gzip_members.Member], count: int) -> list[list[gzip_members.Member]] | None:
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


_LOST_READER = "a trace reader process ended without a result"


class _Part:
    """A forked child parsing one group of members; its columns come back through a pipe, pickled one at a
    time, so the parent holds one of them at once beside its own (not the part's whole state)."""

    def __init__(self, path: Path, group: list[gzip_members.Member], last: bool) -> None:
        read_end, write_end = os.pipe()
        self.pid = os.fork()
        if self.pid == 0:  # the child: parse, send, leave without running the parent's exit handlers
            try:
                os.close(read_end)
                with os.fdopen(write_end, "wb") as out:
                    status, value = _parse_part(path, group, last)
                    if isinstance(value, _ColumnBuilder):
                        pickle.dump((status, None), out, protocol=pickle.HIGHEST_PROTOCOL)
                        for item in value.state_items():
                            pickle.dump(item, out, protocol=pickle.HIGHEST_PROTOCOL)
                        pickle.dump(None, out)  # the end of the items
                    else:
                        pickle.dump((status, value), out, protocol=pickle.HIGHEST_PROTOCOL)
            finally:
                os._exit(0)
        os.close(write_end)
        self.read_end: int | None = read_end
        self.pipe: io.BufferedReader | None = None

    def result(self) -> tuple[str, object]:
        """("ok", the part's state items as they arrive: read them all before the next part), ("fallback", None)
        or ("error", exception)."""
        assert self.read_end is not None
        self.pipe = os.fdopen(self.read_end, "rb")
        self.read_end = None
        try:
            status, value = pickle.load(self.pipe)
        except EOFError:
            status, value = "error", RuntimeError(_LOST_READER)
        if status != "ok":
            self._end()
            return status, value
        return status, self._items()

    def _items(self) -> Iterator[tuple[str, Any]]:
        assert self.pipe is not None
        try:
            while (item := pickle.load(self.pipe)) is not None:
                yield item
        except EOFError:
            raise RuntimeError(_LOST_READER) from None
        finally:
            self._end()

    def _end(self) -> None:
        if self.pipe is not None:
            self.pipe.close()
            self.pipe = None
        if self.pid:
            os.waitpid(self.pid, 0)
            self.pid = 0

    def stop(self) -> None:
        if self.read_end is not None:
            os.close(self.read_end)
            self.read_end = None
        if self.pipe is not None:
            self.pipe.close()
            self.pipe = None
        if self.pid:
            os.kill(self.pid, signal.SIGKILL)
            os.waitpid(self.pid, 0)
            self.pid = 0


def _parse_part(path: Path, group: list[gzip_members.Member], last: bool) -> tuple[str, object]:
    """("ok", the columns read), ("fallback", None) when the fast decoder cannot read it, or ("error", exception)."""
    try:
        columns = _ColumnBuilder()
        with open(path, "rb") as raw:
            texts = (gzip_members.member_text(raw, m) for m in group)
            _decode_events_chunked(texts, columns, next(texts, b""), in_events=True, ends_at_event=not last)
        return "ok", columns
    except _FastPathUnavailable:
        return "fallback", None
    except Exception as exc:  # raised again in the parent, as if it had read the part itself
        try:
            pickle.dumps(exc)
        except Exception:
            exc = RuntimeError(f"{type(exc).__name__}: {exc}")
        return "error", exc


def _load_members_in_parallel(path: Path, progress: Progress | None) -> tuple[dict, _ColumnBuilder] | None:
    """An indexed multi-member file (gzip_members) read by one process per core, each decompressing and parsing
    a run of members that starts and ends at an event; this process takes the first run (the metadata head)
    and appends the others' columns in order, so the result is the sequential reader's. None when the file
    is not such a file, too small, or anything needs the sequential reader (which then reads it all)."""
    processes = _parallel_processes()
    if processes < 2:
        return None
    with open(path, "rb") as raw:
        members = gzip_members.read_index(raw, os.fstat(raw.fileno()).st_size)
    if members is None or sum(m.text_size for m in members) < PARALLEL_MIN_TEXT_BYTES:
        return None
    groups = _member_groups(members, processes)
    if groups is None:
        return None
    parts = [_Part(path, group, last=i == len(groups) - 1) for i, group in enumerate(groups[1:], start=1)]
    try:
        scale = sum(m.size for m in members) / sum(m.size for m in groups[0])  # the others move alike

        def texts(raw) -> Iterator[bytes]:
            for member in groups[0]:
                text = gzip_members.member_text(raw, member)
                if progress is not None:
                    progress(int(member.size * scale))
                yield text

        with open(path, "rb") as raw:
            blocks = texts(raw)
            text = _head_and_rest(blocks)
            meta = _read_metadata(path, text[:METADATA_HEAD_BYTES])
            columns = _ColumnBuilder()
            try:
                if not _decode_events_chunked(blocks, columns, text, ends_at_event=True):
                    return None
            except _FastPathUnavailable:
                return None
        for part in parts:
            status, value = part.result()
            if status == "fallback":
                return None
            if status == "error":
                assert isinstance(value, BaseException)
                raise value
            assert isinstance(value, Iterator)
            columns.merge(value)
        _release_free_heap()
        return meta, columns
    finally:
        for part in parts:
            part.stop()


def _release_free_heap() -> None:
    """Give the heap's free pages back to the system (glibc's malloc_trim; nothing elsewhere). Merging the readers'
    columns frees as much as it keeps, and glibc's adaptive mmap threshold leaves those frees in the heap, where the
    analyses' own arrays would not reuse all of them."""
    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (AttributeError, OSError):
        return
    trim(0)


_TS, _DUR, _NAME, _CAT = (attrgetter(f) for f in ("ts", "dur", "name", "cat"))
_PID, _TID = attrgetter("pid"), attrgetter("tid")
_ARGS, _STREAM, _CORRELATION = attrgetter("args"), attrgetter("stream"), attrgetter("correlation")
_DEVICE_TYPE, _ALLOCATED = attrgetter("device_type"), attrgetter("total_allocated")
_RESERVED = attrgetter("total_reserved")
_COLLECTIVE = attrgetter("collective")


def _append_floats(column: array, values: list) -> None:
    """values as _as_float reads them: a list of numbers converts in C (fromlist leaves the column unchanged when
    it fails), anything else (None, strings) value by value."""
    try:
        column.fromlist(values)
    except TypeError:
        column.fromlist([_as_float(v) for v in values])


def _append_ints(column: array, values: list) -> None:
    """values as _as_int reads them (see _append_floats)."""
    try:
        column.fromlist(values)
    except TypeError:
        column.fromlist([_as_int(v) for v in values])


class _ColumnBuilder:
    """Appends decoded events to typed buffers; no event object outlives `add_events`."""

    def __init__(self) -> None:
        self.names = _Interner()
        self.categories = _Interner()
        self.pids = _Interner()
        self.tids = _Interner()
        # the events' integer columns start as bytes and widen when a value needs it (_extend_narrow)
        self.name_id, self.cat_id, self.pid_id, self.tid_id = (array("b") for _ in range(4))
        self.stream, self.correlation = array("b"), array("b")
        self.ts, self.dur = array("d"), array("d")
        # the memory instant events' columns
        self.mem_ts, self.mem_allocated, self.mem_reserved = array("d"), array("d"), array("d")
        self.mem_device_type = array("i")
        self.collectives: list[CollectiveRecord] = []
        self.seen_events = 0

    def add_events(self, events: list) -> None:
        self.seen_events += len(events)
        complete = [e for e in events if e.ph == "X" and e.ts is not None and e.dur is not None]
        # array.fromlist converts a list in C; extend() from an iterator goes item by item (slower: docs/benchmarks.md)
        self.ts.fromlist(list(map(_TS, complete)))
        self.dur.fromlist(list(map(_DUR, complete)))
        self._extend_narrow("name_id", self.names.many(list(map(_NAME, complete))))
        self._extend_narrow("cat_id", self.categories.many(list(map(_CAT, complete))))
        self._extend_narrow("pid_id", self.pids.many(list(map(_PID, complete))))
        self._extend_narrow("tid_id", self.tids.many(list(map(_TID, complete))))
        args = list(map(_ARGS, complete))
        self._extend_narrow("stream", list(map(_STREAM, args)))
        self._extend_narrow("correlation", list(map(_CORRELATION, args)))
        named = list(map(_COLLECTIVE, args))
        if named.count(None) != len(named):  # a block without collective records costs this one C-level count
            # NCCL kernels of some torch versions carry a "Collective name" too: only the host's records count
            self.collectives += [
                _collective_record(event.ts, a)
                for event, a in zip(complete, args, strict=True)
                if a.collective is not None and event.name == COLLECTIVE_RECORD_NAME
            ]
        memory = [e for e in events if e.ph == "i" and e.name == MEMORY_EVENT_NAME]
        if memory:
            args = list(map(_ARGS, memory))
            _append_floats(self.mem_ts, list(map(_TS, memory)))
            _append_ints(self.mem_device_type, list(map(_DEVICE_TYPE, args)))
            _append_floats(self.mem_allocated, list(map(_ALLOCATED, args)))
            _append_floats(self.mem_reserved, list(map(_RESERVED, args)))

    def _extend_narrow(self, column: str, values: list[int]) -> None:
        """Append values to an integer column held in the narrowest signed type that holds every value so far
        (what _narrowed_copy would make of the whole column at the end, without a wider buffer before it);
        a value beyond the column's widest type raises OverflowError."""
        buffer = getattr(self, column)
        try:
            buffer.fromlist(values)  # unchanged when a value does not fit
        except OverflowError:
            low, high = min(values), max(values)
            codes = _NARROW_TYPECODES[_NARROW_TYPECODES.index(buffer.typecode) :]
            codes = codes[: codes.index(self._WIDEST.get(column, "i")) + 1]
            fits = [c for c in codes if _TYPECODE_INFO[c].min <= low and high <= _TYPECODE_INFO[c].max]
            if not fits:
                raise
            wider = array(fits[0], _column(buffer).astype(_BUFFER_DTYPE[fits[0]]).tobytes())
            wider.fromlist(values)
            setattr(self, column, wider)

    _WIDEST = {"correlation": "q"}  # the rest stop at int32 (a stream id beyond it is out of range)
    _COLUMNS = (
        "name_id",
        "cat_id",
        "pid_id",
        "tid_id",
        "ts",
        "dur",
        "stream",
        "correlation",
        "mem_ts",
        "mem_device_type",
        "mem_allocated",
        "mem_reserved",
    )
    _INTERNED = (("name_id", "names"), ("cat_id", "categories"), ("pid_id", "pids"), ("tid_id", "tids"))

    def state_items(self) -> Iterator[tuple[str, Any]]:
        """Everything read, as plain values, an item at a time (what a reader process sends back): the event
        count, each interned table just before its column, the columns as numpy arrays (the integer ones
        narrowed, so the pipe and the receiving process carry as few bytes as they hold)."""
        yield "seen_events", self.seen_events
        yield "collectives", self.collectives
        interned = dict(self._INTERNED)
        for column in self._COLUMNS:
            if column in interned:
                yield interned[column], getattr(self, interned[column]).values
            yield column, self._final(column)

    def merge(self, items: Iterable[tuple[str, Any]]) -> None:
        """Append the events of a later part of the file (another builder's state_items, taken as they come),
        in order: values new to the tables get the next codes in the order the part first met them, as if this
        builder had read it."""
        tables = {table: column for column, table in self._INTERNED}
        codes: dict[str, np.ndarray] = {}
        for key, value in items:
            if key == "seen_events":
                self.seen_events += value
            elif key == "collectives":
                self.collectives += value
            elif key in tables:
                codes[tables[key]] = np.asarray(getattr(self, key).many(value), dtype=np.int64)
            elif key in codes:
                self._append(key, _narrowed_copy(codes.pop(key)[value]) if value.size else value)
            else:
                self._append(key, value)

    def _append(self, column: str, values: np.ndarray) -> None:
        """The column, final (see _final), with values after it; one column at a time is ever held twice.
        A buffer still being filled that has values' type grows in place instead (no third copy)."""
        buffer = getattr(self, column)
        if isinstance(buffer, array) and _BUFFER_DTYPE[buffer.typecode] == values.dtype:
            buffer.frombytes(np.ascontiguousarray(values).view(np.uint8).data)
            return
        own = self._final(column)
        joined = np.concatenate([own, values])
        del own
        setattr(self, column, _narrowed_copy(joined) if joined.dtype.kind == "i" else joined)

    def _final(self, column: str) -> np.ndarray:
        """The column as a numpy array, the integer ones in the narrowest type that holds their values (the same
        numbers); a buffer still being filled is released once copied, so the columns are never held twice."""
        values = getattr(self, column)
        if isinstance(values, np.ndarray):
            return values
        final = _column(values)  # a view: the buffer lives on as its base, unless narrowed into a copy
        if final.dtype.kind == "i":
            final = _narrowed_copy(final)
        setattr(self, column, final)
        return final

    def build(self, path: Path, rank: int, meta: dict) -> RankTrace:
        memory = MemoryEvents(
            ts=self._final("mem_ts"),
            device_type=self._final("mem_device_type"),
            total_allocated=self._final("mem_allocated"),
            total_reserved=self._final("mem_reserved"),
        )
        device_properties = meta.get("deviceProperties")
        info = meta.get("distributedInfo")
        info = info if isinstance(info, dict) else {}
        world_size = info.get("world_size")
        return RankTrace(
            path=str(path),
            rank=rank,
            names=self.names.values,
            categories=self.categories.values,
            name_id=self._final("name_id"),
            cat_id=self._final("cat_id"),
            pid_id=self._final("pid_id"),
            ts=self._final("ts"),
            dur=self._final("dur"),
            stream=self._final("stream"),
            correlation=self._final("correlation"),
            pids=[str(pid) for pid in self.pids.values],
            memory=memory,
            device_properties=device_properties if isinstance(device_properties, list) else [],
            tid_id=self._final("tid_id"),
            tids=[str(tid) for tid in self.tids.values],
            backend=str(info["backend"]) if info.get("backend") else None,
            world_size=int(world_size) if isinstance(world_size, (int, float)) else None,
            collective_records=self.collectives,
        )


_NARROW_TYPES = (np.int8, np.int16, np.int32, np.int64)
_NARROW_TYPECODES = ("b", "h", "i", "q")  # array's signed C types, narrowest first: 1, 2, 4 and 8 bytes here
# the numpy type of each buffer's typecode (array typecodes name C types, whose sizes vary by platform)
_BUFFER_DTYPE = {code: np.dtype(f"i{array(code).itemsize}") for code in _NARROW_TYPECODES} | {"d": np.dtype("f8")}
_TYPECODE_INFO = {code: np.iinfo(_BUFFER_DTYPE[code]) for code in _NARROW_TYPECODES}


def _narrowed_copy(values: np.ndarray) -> np.ndarray:
    """values in the narrowest signed integer type that holds them all (the same numbers); a copy, unless
    values already have that type (then values themselves)."""
    if values.size == 0:
        return values.astype(np.int8)
    low, high = int(values.min()), int(values.max())
    for dtype in _NARROW_TYPES:
        info = np.iinfo(dtype)
        if info.min <= low and high <= info.max:
            return values.astype(dtype, copy=False)
    return values  # pragma: no cover - int64 holds every column's values


def _column(buffer: array) -> np.ndarray:
    """A numpy view of a finished buffer (no copy: the array stays alive as the view's base)."""
    dtype = _BUFFER_DTYPE[buffer.typecode]
    if len(buffer) == 0:
        return np.zeros(0, dtype=dtype)
    return np.frombuffer(buffer, dtype=dtype)


def _collective_record(ts: float, args: _Args) -> CollectiveRecord:
    """A record_param_comms event's collective; an arg of an unexpected type reads as unknown (None)."""
    nelems, group = args.in_nelems, args.group_size
    return CollectiveRecord(
        ts,
        str(args.collective),
        nelems if type(nelems) is int and nelems >= 0 else None,
        args.dtype if isinstance(args.dtype, str) else None,
        group if type(group) is int and group > 0 else None,
    )


def _as_int(value) -> int:
    try:
        return int(value)
    except (TypeError, ValueError, OverflowError):  # OverflowError: int(inf)
        return -1


def _as_float(value) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return float("nan")


def _rank_from_meta(meta: dict) -> int | None:
    info = meta.get("distributedInfo")
    if isinstance(info, dict) and isinstance(info.get("rank"), (int, float)):
        return int(info["rank"])
    return None


def load_trace_file(path: str | Path, default_rank: int = 0) -> RankTrace:
    """Parse one trace file; raise TraceError naming the file on any unusable input."""
    path = Path(path)
    if not path.is_file():
        raise TraceError(f"{path}: no such trace file")
    reporter = _progress_factory(path, path.stat().st_size) if _progress_factory is not None else None
    collecting = gc.isenabled()
    gc.disable()  # decoding makes many short-lived objects, none in a cycle: collections would only re-scan them
    try:
        loaded = _load_members_in_parallel(path, reporter) if path.name.endswith(".gz") else None
        meta, columns = loaded or _load_sequential(path, reporter)
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
    rank = _rank_from_meta(meta)
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


def find_trace_files(directory: Path) -> list[Path]:
    return sorted(p for p in directory.iterdir() if p.is_file() and p.name.endswith(TRACE_SUFFIXES))


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
