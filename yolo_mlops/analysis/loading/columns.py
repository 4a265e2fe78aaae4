"""Decoded events appended to typed columns: names, categories, processes and threads interned into small tables,
integers held as narrow as their values (narrowing.py), and no event object kept past the block that brought it.
A builder's state also travels between processes (`state_items`, `merge`) when parts of a file are read apart."""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Iterator
from operator import attrgetter
from pathlib import Path
from typing import Any

import numpy as np

from yolo_mlops.analysis.loading.events import Args, as_float, as_int
from yolo_mlops.analysis.loading.narrowing import BUFFER_DTYPE, column_view, narrowed_copy, widened
from yolo_mlops.analysis.loading.rank_trace import (
    COLLECTIVE_RECORD_NAME,
    MEMORY_EVENT_NAME,
    CollectiveRecord,
    MemoryEvents,
    RankTrace,
)


class Interner:
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


_TS, _DUR, _NAME, _CAT = (attrgetter(f) for f in ("ts", "dur", "name", "cat"))
_PID, _TID = attrgetter("pid"), attrgetter("tid")
_ARGS, _STREAM, _CORRELATION = attrgetter("args"), attrgetter("stream"), attrgetter("correlation")
_DEVICE_TYPE, _ALLOCATED = attrgetter("device_type"), attrgetter("total_allocated")
_RESERVED = attrgetter("total_reserved")
_COLLECTIVE = attrgetter("collective")


def _append_floats(column: array, values: list) -> None:
    """values as as_float reads them: a list of numbers converts in C (fromlist leaves the column unchanged when
    it fails), anything else (None, strings) value by value."""
    try:
        column.fromlist(values)
    except TypeError:
        column.fromlist([as_float(v) for v in values])


def _append_ints(column: array, values: list) -> None:
    """values as as_int reads them (see _append_floats)."""
    try:
        column.fromlist(values)
    except TypeError:
        column.fromlist([as_int(v) for v in values])


class ColumnBuilder:
    """Appends decoded events to typed buffers; no event object outlives `add_events`."""

    def __init__(self) -> None:
        self.names = Interner()
        self.categories = Interner()
        self.pids = Interner()
        self.tids = Interner()
        # the events' integer columns start as bytes and widen when a value needs it (narrowing.widened)
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
        (narrowing.widened); a value beyond the column's widest type raises OverflowError."""
        buffer = getattr(self, column)
        try:
            buffer.fromlist(values)  # unchanged when a value does not fit
        except OverflowError:
            wider = widened(buffer, values, self._WIDEST.get(column, "i"))
            if wider is None:
                raise
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
                self._append(key, narrowed_copy(codes.pop(key)[value]) if value.size else value)
            else:
                self._append(key, value)

    def _append(self, column: str, values: np.ndarray) -> None:
        """The column, final (see _final), with values after it; one column at a time is ever held twice.
        A buffer still being filled that has values' type grows in place instead (no third copy)."""
        buffer = getattr(self, column)
        if isinstance(buffer, array) and BUFFER_DTYPE[buffer.typecode] == values.dtype:
            buffer.frombytes(np.ascontiguousarray(values).view(np.uint8).data)
            return
        own = self._final(column)
        joined = np.concatenate([own, values])
        del own
        setattr(self, column, narrowed_copy(joined) if joined.dtype.kind == "i" else joined)

    def _final(self, column: str) -> np.ndarray:
        """The column as a numpy array, the integer ones in the narrowest type that holds their values (the same
        numbers); a buffer still being filled is released once copied, so the columns are never held twice."""
        values = getattr(self, column)
        if isinstance(values, np.ndarray):
            return values
        final = column_view(values)  # a view: the buffer lives on as its base, unless narrowed into a copy
        if final.dtype.kind == "i":
            final = narrowed_copy(final)
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


def _collective_record(ts: float, args: Args) -> CollectiveRecord:
    """A record_param_comms event's collective; an arg of an unexpected type reads as unknown (None)."""
    nelems, group = args.in_nelems, args.group_size
    return CollectiveRecord(
        ts,
        str(args.collective),
        nelems if type(nelems) is int and nelems >= 0 else None,
        args.dtype if isinstance(args.dtype, str) else None,
        group if type(group) is int and group > 0 else None,
    )
