"""What a loaded trace is: one rank's complete events as parallel numpy columns, its memory events and collective
records, and the error that names a file that cannot be analyzed."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

# Event categories that are activities on the GPU itself (Kineto names; old traces capitalise).
GPU_ACTIVITY_CATEGORIES = frozenset({"kernel", "gpu_memcpy", "gpu_memset", "memcpy", "memset"})
MEMORY_EVENT_NAME = "[memory]"
COLLECTIVE_RECORD_NAME = "record_param_comms"  # torch's record of each c10d collective a rank issued
CUDA_DEVICE_TYPE = 1  # `Device Type` in [memory] events: 0 = CPU, 1 = CUDA


class TraceError(ValueError):
    """A trace file or directory that cannot be analyzed; the message names the file."""


@dataclass
class RankTrace:
    """Complete ("X") events of one rank as parallel columns; strings live in `names`/`categories`."""

    path: str
    rank: int
    names: list[str]
    categories: list[str]
    # The integer columns are signed and as narrow as their values allow (int8 to int64, see narrowing.py):
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
