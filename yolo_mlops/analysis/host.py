"""Host-side analyses: profiled steps and where the host spends each step.

A step is a `ProfilerStep#N` span (written by `prof.step()`). Host time per category is the union
of that category's event intervals clipped to the step, so nested or repeated labels are not
counted twice.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from yolo_mlops.analysis.gpu import CHUNK_ELEMENTS, merge_intervals
from yolo_mlops.analysis.trace_loader import GPU_ACTIVITY_CATEGORIES, RankTrace, TraceError
from yolo_mlops.labels import PHASE_LABEL_PREFIX

DATA_LOADER_CATEGORY = "data_loader"
OPTIMIZER_CATEGORY = "optimizer"
CUDA_SYNC_CATEGORY = "cuda_sync"

_PROFILER_STEP_PREFIX = "ProfilerStep#"
_PROFILER_STEP_RE = re.compile(r"^ProfilerStep#(\d+)$")
# Events drawn on the GPU timeline: never host time even when they carry host-like names
# (e.g. a gpu_user_annotation named "Optimizer.step#SGD.step").
GPU_TIMELINE_CATEGORIES = GPU_ACTIVITY_CATEGORIES | {"gpu_user_annotation", "cuda_sync"}
# Runtime/driver calls that block the host until the GPU catches up.
SYNC_CALL_NAMES = frozenset(
    {
        "cudaStreamSynchronize",
        "cudaDeviceSynchronize",
        "cudaEventSynchronize",
        "cuStreamSynchronize",
        "cuCtxSynchronize",
        "cuEventSynchronize",
    }
)
TOP_HOST_OPS = 10


def is_sync_call(name: str) -> bool:
    """Synchronising CUDA calls, including blocking memcpy (cudaMemcpy, cudaMemcpy2D...; not *Async)."""
    if name in SYNC_CALL_NAMES:
        return True
    return name.startswith(("cudaMemcpy", "cuMemcpy")) and "Async" not in name and "Peer" not in name


def host_category(name: str) -> str | None:
    """The host-time category of an event name, or None for events we do not attribute."""
    if name.startswith(PHASE_LABEL_PREFIX):
        return name
    if name.startswith("enumerate(DataLoader)#") and "__next__" in name:
        return DATA_LOADER_CATEGORY
    if name.startswith("Optimizer.step#"):
        return OPTIMIZER_CATEGORY
    if is_sync_call(name):
        return CUDA_SYNC_CATEGORY
    return None


def categories_by_name(names: list[str]) -> list[str | None]:
    """host_category of each name of a trace's name table (computed once per rank, read by every analysis)."""
    return [host_category(n) for n in names]


@dataclass
class Steps:
    """ProfilerStep spans of one rank, sorted by start time."""

    number: np.ndarray  # int64 step number N of ProfilerStep#N
    start: np.ndarray  # float64 us
    end: np.ndarray

    @property
    def count(self) -> int:
        return int(self.number.size)

    @property
    def duration(self) -> np.ndarray:
        return self.end - self.start

    def index_of(self, ts: np.ndarray) -> np.ndarray:
        """Index of the step whose span holds each timestamp, -1 outside every step."""
        idx = np.searchsorted(self.start, ts, side="right")
        idx -= 1
        for at in range(0, idx.size, CHUNK_ELEMENTS):  # in place, a chunk at a time: one array of ts' size
            chunk = idx[at : at + CHUNK_ELEMENTS]
            inside = chunk >= 0
            inside[inside] = ts[at : at + CHUNK_ELEMENTS][inside] < self.end[chunk[inside]]
            chunk[~inside] = -1
        return idx


@dataclass
class CategoryTime:
    category: str
    time_us: float
    pct: float  # of the total step time the time was measured over
    count: int


def host_event_mask(trace: RankTrace) -> np.ndarray:
    return ~trace.category_mask(GPU_TIMELINE_CATEGORIES) & (trace.stream < 0)


def find_steps(trace: RankTrace, host: np.ndarray) -> Steps:
    numbers = {}
    malformed = {}
    for i, name in enumerate(trace.names):
        m = _PROFILER_STEP_RE.match(name)
        if m:
            numbers[i] = int(m.group(1))
        elif name.startswith(_PROFILER_STEP_PREFIX):
            malformed[i] = name
    if malformed:
        # a span named as a step without its number cannot be placed among the steps: reading the trace as if
        # it had none would report "no steps" for a trace that has them
        used = np.unique(trace.name_id[host & trace.name_mask(malformed)])
        if used.size:
            shown = ", ".join(repr(malformed[int(i)]) for i in used[:3])
            raise TraceError(
                f"{trace.path}: malformed step ids: {shown} (torch.profiler names each step ProfilerStep#<number>)"
            )
    if not numbers:
        return Steps(np.zeros(0, np.int64), np.zeros(0), np.zeros(0))
    idx = np.flatnonzero(host & trace.name_mask(numbers))
    # One span per step number: a step can be recorded twice (e.g. cpu_op + user_annotation), as overlapping
    # spans. Two disjoint spans of one number, or numbers out of time order, make the steps ambiguous: refused.
    longest: dict[int, tuple[float, float]] = {}
    for ev in idx:
        n = numbers[int(trace.name_id[ev])]
        start, end = float(trace.ts[ev]), float(trace.ts[ev] + trace.dur[ev])
        if n in longest and (start >= longest[n][1] or end <= longest[n][0]):
            raise TraceError(
                f"{trace.path}: ProfilerStep#{n} appears twice, at {longest[n][0]:.0f} and {start:.0f} us "
                "(a duplicate step id): the steps are ambiguous"
            )
        if n not in longest or end - start > longest[n][1] - longest[n][0]:
            longest[n] = (start, end)
    ordered = sorted(longest.items(), key=lambda kv: kv[1][0])
    for (n_before, _), (n_after, (start, _)) in zip(ordered, ordered[1:], strict=False):
        if n_after < n_before:
            raise TraceError(
                f"{trace.path}: ProfilerStep#{n_after} at {start:.0f} us starts after ProfilerStep#"
                f"{n_before} (step ids out of time order): the steps are ambiguous"
            )
    return Steps(
        number=np.array([n for n, _ in ordered], dtype=np.int64),
        start=np.array([s for _, (s, _) in ordered]),
        end=np.array([e for _, (_, e) in ordered]),
    )


def host_category_times(
    trace: RankTrace, host: np.ndarray, steps: Steps, category_by_name: list[str | None]
) -> dict[str, np.ndarray]:
    """Per category, an array with the category's time in each step (us) and one with event counts."""
    categories = sorted({c for c in category_by_name if c is not None})
    result: dict[str, np.ndarray] = {}
    if steps.count == 0:
        return result
    code_by_name = np.array([categories.index(c) if c is not None else -1 for c in category_by_name], dtype=np.int32)
    event_code = code_by_name[trace.name_id] if trace.name_id.size else np.zeros(0, np.int32)
    candidates = np.flatnonzero(host & (event_code >= 0))
    step_idx = steps.index_of(trace.ts[candidates])
    candidates, step_idx = candidates[step_idx >= 0], step_idx[step_idx >= 0]
    for code, category in enumerate(categories):
        in_cat = event_code[candidates] == code
        ev, st = candidates[in_cat], step_idx[in_cat]
        times = np.zeros(steps.count)
        counts = np.zeros(steps.count, dtype=np.int64)
        for s in np.unique(st):
            sel = ev[st == s]
            start = trace.ts[sel]
            end = np.minimum(start + trace.dur[sel], steps.end[s])
            ms, me = merge_intervals(start, end)
            times[s] = float((me - ms).sum())
            counts[s] = sel.size
        result[category] = np.stack([times, counts.astype(np.float64)])
    return result


def top_host_ops(trace: RankTrace, host: np.ndarray, limit: int = TOP_HOST_OPS) -> list[tuple[str, float, int]]:
    """Host operators (cpu_op) by total inclusive duration: (name, time_us, count)."""
    ops = host & trace.category_mask(frozenset({"cpu_op", "operator"}))
    if not ops.any():
        return []
    # each operator's durations added in trace order, as np.bincount(ids, weights=dur) adds them, a chunk of
    # the trace at a time: no intp copy of the ids and float copy of the durations of every operator at once
    totals = np.zeros(len(trace.names))
    counts = np.zeros(len(trace.names), dtype=np.int64)
    for at in range(0, ops.size, CHUNK_ELEMENTS):
        chunk = ops[at : at + CHUNK_ELEMENTS]
        ids = trace.name_id[at : at + CHUNK_ELEMENTS][chunk]
        np.add.at(totals, ids, trace.dur[at : at + CHUNK_ELEMENTS][chunk])
        counts += np.bincount(ids, minlength=len(trace.names))
    ranked = np.argsort(-totals, kind="stable")[:limit]
    return [(trace.names[i], float(totals[i]), int(counts[i])) for i in ranked if counts[i] > 0]
