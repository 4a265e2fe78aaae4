"""Where step time goes, exclusively: GPU idle time by its host cause, and host step time by phase.

GPU idle time is the gaps in the union of a rank's GPU activities over HTA's window (they sum to HTA's idle
time), each gap split by what kept the GPU waiting: itself (`other`) or the host, instant by instant by what the
host was doing. Host step time goes to the phase labels, else the built-in categories, else `between_phases`.
The causes and their order: docs/analysis.md ("GPU idle by host cause", "Steps and host time").
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from yolo_mlops.analysis.gpu import CHUNK_ELEMENTS, GpuActivities, merge_intervals, selected
from yolo_mlops.analysis.host import (
    CUDA_SYNC_CATEGORY,
    DATA_LOADER_CATEGORY,
    OPTIMIZER_CATEGORY,
    Steps,
)
from yolo_mlops.analysis.trace_loader import RankTrace
from yolo_mlops.labels import PHASE_LABEL_PREFIX, PHASE_ORDER

DATA_LOADER, PREPROCESS, OPTIMIZER, CUDA_SYNC, LAUNCH_OVERHEAD, OTHER = (
    "data_loader",
    "preprocess",
    "optimizer",
    "cuda_sync",
    "launch_overhead",
    "other",
)
# Every cause, in the order the host layers are matched (other last); the JSON/metrics list all of them.
IDLE_CAUSES = (DATA_LOADER, CUDA_SYNC, OPTIMIZER, PREPROCESS, LAUNCH_OVERHEAD, OTHER)
BETWEEN_PHASES = "between_phases"
# Host events that are the work of launching: operators and runtime/driver calls. Not python_function
# (with_stack traces): the outermost Python frames span whole steps, whatever the host does in them.
LAUNCH_EVENT_CATEGORIES = frozenset({"cpu_op", "operator", "cuda_runtime", "cuda_driver", "runtime", "driver"})
_CAUSE_LABELS = {
    PHASE_LABEL_PREFIX + "data_wait": DATA_LOADER,
    PHASE_LABEL_PREFIX + "preprocess": PREPROCESS,
    PHASE_LABEL_PREFIX + "optimizer_step": OPTIMIZER,
    PHASE_LABEL_PREFIX + "forward_loss": LAUNCH_OVERHEAD,
    PHASE_LABEL_PREFIX + "backward": LAUNCH_OVERHEAD,
}
_CAUSE_CATEGORIES = {DATA_LOADER_CATEGORY: DATA_LOADER, OPTIMIZER_CATEGORY: OPTIMIZER, CUDA_SYNC_CATEGORY: CUDA_SYNC}


@dataclass
class CauseTime:
    """Time attributed to one cause (or phase) over the analyzed steps."""

    cause: str
    time_us: float
    pct: float  # GPU idle: of the GPU's kernel-time span (rows sum to gpu.idle_pct); phases: of step time
    step_pct: float | None  # of the step time of the steps it was measured over; None: the trace has no steps
    ms_per_step: float | None  # None: the trace has no ProfilerStep ranges, so there is no "per step"


Intervals = tuple[np.ndarray, np.ndarray]


def _covered(intervals: Intervals, points: np.ndarray) -> np.ndarray:
    """For sorted disjoint intervals, whether each point lies inside one (start <= p < end)."""
    start, end = intervals
    idx = np.searchsorted(start, points, side="right") - 1
    inside = idx >= 0
    inside[inside] = points[inside] < end[idx[inside]]
    return inside


def exclusive_split(target: Intervals, layers: list[tuple[str, Intervals]], fallback: str) -> dict[str, float]:
    """Split the target intervals' time among layers, first matching layer wins; the rest is `fallback`.

    Elementary segments between every boundary are classified by their midpoint, so the result is
    exact for interval inputs (no sampling)."""
    out = {name: 0.0 for name, _ in layers}
    out.setdefault(fallback, 0.0)
    if target[0].size == 0:
        return out
    # Work relative to the first target start: Kineto timestamps are epoch microseconds (~1e15), where
    # float64 cannot hold the midpoint of two boundaries a fraction of a microsecond apart.
    origin = float(target[0][0])
    target = (target[0] - origin, target[1] - origin)
    layers = [(name, (s - origin, e - origin)) for name, (s, e) in layers]
    cuts = np.unique(np.concatenate([target[0], target[1]] + [a for _, (s, e) in layers for a in (s, e)]))
    mids, lengths = (cuts[:-1] + cuts[1:]) / 2, np.diff(cuts)
    keep = _covered(target, mids)
    mids, lengths = mids[keep], lengths[keep]
    free = np.ones(mids.size, dtype=bool)
    for name, intervals in layers:
        hit = free & _covered(intervals, mids)
        out[name] += float(lengths[hit].sum())
        free &= ~hit
    out[fallback] += float(lengths[free].sum())
    return out


def _merged(start: np.ndarray, end: np.ndarray) -> Intervals:
    return merge_intervals(start.astype(np.float64), end.astype(np.float64))


def _union(*sets: Intervals) -> Intervals:
    return _merged(np.concatenate([s for s, _ in sets]), np.concatenate([e for _, e in sets]))


def _host_layers(
    trace: RankTrace, host: np.ndarray, category_by_name: list[str | None]
) -> tuple[dict[str, Intervals], Intervals]:
    """Merged host intervals per cause, and those of every launching host event."""
    cause_by_name = [
        _CAUSE_LABELS.get(category) or _CAUSE_CATEGORIES.get(category) if category is not None else None
        for category in category_by_name
    ]
    causes = sorted({c for c in cause_by_name if c is not None})
    # one small code per event (a handful of causes), and each layer's ends computed for its own events only:
    # arrays over every event of a big trace are what the analysis' peak memory is made of
    code_by_name = np.array([causes.index(c) if c is not None else -1 for c in cause_by_name], dtype=np.int16)
    code = code_by_name[trace.name_id] if trace.name_id.size else np.zeros(0, np.int16)
    layers = {}
    for i, cause in enumerate(causes):
        sel = host & (code == i)
        layers[cause] = _merged(trace.ts[sel], trace.ts[sel] + trace.dur[sel])
    del code
    # older traces record ProfilerStep#N as a cpu_op too: a step span is not launch work
    steps = [i for i, name in enumerate(trace.names) if name.startswith("ProfilerStep#")]
    launching = host & trace.category_mask(LAUNCH_EVENT_CATEGORIES) & ~trace.name_mask(steps)
    return layers, _merged(trace.ts[launching], trace.ts[launching] + trace.dur[launching])


def _empty() -> Intervals:
    return np.zeros(0), np.zeros(0)


def gpu_idle_by_cause(
    trace: RankTrace,
    host: np.ndarray,
    steps: Steps,
    acts: GpuActivities,
    window_steps: int,
    window_step_us: float,
    category_by_name: list[str | None],
) -> list[CauseTime]:
    """GPU idle time of the window's activities by host cause (rows for every cause, in IDLE_CAUSES order)."""
    if acts.count == 0:
        return []
    busy_s, busy_e = merge_intervals(acts.start, acts.end)
    span = float(busy_e[-1] - busy_s[0])
    gap_s, gap_e = busy_e[:-1], busy_s[1:]
    real = gap_e > gap_s
    gap_s, gap_e = selected(gap_s, real), selected(gap_e, real)
    del busy_s, busy_e, real
    host_caused = _launched_within(acts, gap_s, gap_e)
    totals = dict.fromkeys(IDLE_CAUSES, 0.0)
    totals[OTHER] += float(selected(gap_e - gap_s, ~host_caused).sum())
    hs, he = selected(gap_s, host_caused), selected(gap_e, host_caused)
    if hs.size:
        layers, launching = _host_layers(trace, host, category_by_name)
        sync = layers.get(CUDA_SYNC, _empty())
        began_in_sync = _covered(sync, hs) if sync[0].size else np.zeros(hs.size, dtype=bool)
        sync = _union(sync, (hs[began_in_sync], he[began_in_sync]))
        in_steps = _merged(steps.start, steps.end) if steps.count else _empty()
        step_launch = _intersect(_union(layers.get(LAUNCH_OVERHEAD, _empty()), launching), in_steps)
        ordered = [
            (DATA_LOADER, layers.get(DATA_LOADER, _empty())),
            (CUDA_SYNC, sync),
            (OPTIMIZER, layers.get(OPTIMIZER, _empty())),
            (PREPROCESS, layers.get(PREPROCESS, _empty())),
            (LAUNCH_OVERHEAD, step_launch),
        ]
        for cause, t in exclusive_split((hs, he), ordered, OTHER).items():
            totals[cause] += t
    return [_cause_time(c, t, span, window_steps, window_step_us) for c, t in totals.items()]


def _launched_within(acts: GpuActivities, gap_s: np.ndarray, gap_e: np.ndarray) -> np.ndarray:
    """Whether the activity that ends each gap was launched after the gap began (the host kept the GPU
    waiting); an unknown launch (NaN) compares False. Activities in start order without two starting together
    (a single stream's) are searched where they lie, a chunk of gaps at a time; others in (start, launch)
    order (see _next_launch)."""
    start = acts.start
    if gap_e.size == 0 or not bool(np.all(start[1:] > start[:-1])):
        return _next_launch(acts, gap_e) > gap_s
    within = np.empty(gap_e.size, dtype=bool)
    for at in range(0, gap_e.size, CHUNK_ELEMENTS):
        ends = gap_e[at : at + CHUNK_ELEMENTS]
        np.greater(
            acts.launch_ts[np.searchsorted(start, ends, side="left")],
            gap_s[at : at + ends.size],
            out=within[at : at + ends.size],
        )
    return within


def _next_launch(acts: GpuActivities, gap_e: np.ndarray) -> np.ndarray:
    """The launch time of the activity that ends each gap: the first one starting at the gap's end (ties: the
    earliest launch, an unknown one last)."""
    if gap_e.size == 0:
        return np.zeros(0)
    order = np.lexsort((acts.launch_ts, acts.start))
    first = np.searchsorted(acts.start[order], gap_e, side="left")
    return acts.launch_ts[order[first]]


def _intersect(a: Intervals, b: Intervals) -> Intervals:
    """Intersection of two sets of sorted disjoint intervals."""
    if a[0].size == 0 or b[0].size == 0:
        return _empty()
    origin = float(min(a[0][0], b[0][0]))  # see exclusive_split: midpoints need relative coordinates
    a, b = (a[0] - origin, a[1] - origin), (b[0] - origin, b[1] - origin)
    cuts = np.unique(np.concatenate([a[0], a[1], b[0], b[1]]))
    mids = (cuts[:-1] + cuts[1:]) / 2
    keep = _covered(a, mids) & _covered(b, mids)
    return _merged(cuts[:-1][keep] + origin, cuts[1:][keep] + origin)


def _cause_time(cause: str, time_us: float, whole_us: float, steps: int, step_us: float) -> CauseTime:
    return CauseTime(
        cause=cause,
        time_us=time_us,
        pct=100.0 * time_us / whole_us if whole_us > 0 else 0.0,
        step_pct=100.0 * time_us / step_us if step_us > 0 else None,
        ms_per_step=time_us / 1000 / steps if steps > 0 else None,
    )


def step_time_by_phase(
    trace: RankTrace, host: np.ndarray, steps: Steps, category_by_name: list[str | None]
) -> list[CauseTime]:
    """Each instant of every step assigned to one phase label (or built-in category), the rest to
    `between_phases`. Rows in step order; labels that never occur are left out."""
    if steps.count == 0:
        return []
    total = float(steps.duration.sum())
    code_by_name = dict(enumerate(category_by_name))
    present = {c for c in code_by_name.values() if c is not None}
    labels = [PHASE_LABEL_PREFIX + p for p in PHASE_ORDER if PHASE_LABEL_PREFIX + p in present]
    labels += sorted(c for c in present if c.startswith(PHASE_LABEL_PREFIX) and c not in labels)
    if not labels:  # a trace without our labels: the built-in categories are (nearly) disjoint too
        labels = [c for c in (DATA_LOADER_CATEGORY, OPTIMIZER_CATEGORY, CUDA_SYNC_CATEGORY) if c in present]
    layers = []
    for label in labels:
        ids = [i for i, c in code_by_name.items() if c == label]
        sel = host & trace.name_mask(ids)
        layers.append((label, _merged(trace.ts[sel], trace.ts[sel] + trace.dur[sel])))
    split = exclusive_split((steps.start, steps.end), layers, BETWEEN_PHASES)
    return [_cause_time(name, t, total, steps.count, total) for name, t in split.items()]
