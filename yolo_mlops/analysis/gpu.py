"""GPU-side analyses over one rank's columns, with HolisticTraceAnalysis' (HTA 0.5.0) definitions.

- Kernel types: HTA's name rules (`hta/utils/utils.py`): NCCL kernels are COMMUNICATION,
  `Memcpy*`/`Memset*`/`dma*` are MEMORY, names matching HTA's non-compute pattern (e.g. "...Sync")
  are OTHER, everything else is COMPUTATION.
- Window: when the trace has >= 2 ProfilerStep spans, HTA drops the last (usually incomplete)
  step: host events from the last ProfilerStep's start on, and GPU activities whose launching
  runtime call (same `correlation`) is not among the kept host events.
- Times: HTA rounds ns-resolution timestamps to whole microseconds (start up, end down) so that
  back-to-back kernels do not appear to overlap; we do the same for GPU intervals, so per-kernel
  totals are HTA's too (short kernels lose up to a microsecond each; by how much totals differ:
  docs/analysis.md).
- Temporal breakdown: kernel_time = last kernel end - first kernel start; idle = kernel_time -
  union of all GPU activities; compute = union of COMPUTATION kernels; non-compute = the rest.
- Kernel-type breakdown: sweep over the merged intervals of each type; time where several types
  run at once is its own row, "A overlapping B".
- Idle breakdown per stream: the gap before each kernel is host_wait when its launch call started
  after the previous kernel on the stream ended, kernel_wait when the gap is shorter than
  KERNEL_WAIT_THRESHOLD_US, other otherwise.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from yolo_mlops.analysis.trace_loader import RankTrace, id_mask

COMPUTATION = "COMPUTATION"
COMMUNICATION = "COMMUNICATION"
MEMORY = "MEMORY"
OTHER = "OTHER"
# Order matters: it fixes the bit of each type in the overlap sweep and the row labels
# ("COMPUTATION overlapping COMMUNICATION"), as in HTA's get_gpu_kernel_breakdown.
BREAKDOWN_KERNEL_TYPES = (COMPUTATION, COMMUNICATION, MEMORY)
KERNEL_TYPES = (*BREAKDOWN_KERNEL_TYPES, OTHER)  # GpuActivities.type_code indexes this

_COMM_KERNEL_RE = re.compile(r"^nccl.*Kernel")
_MEMORY_KERNEL_RE = re.compile(r"(^Memcpy)|(^Memset)|(^dma)")
_NON_COMPUTE_RE = re.compile(r"(^nccl.*Kernel)|(.*(Memcpy)|(Memset))|(.*Sync)")

# Kernels computing in 16-bit floats (cuBLAS/cutlass/cuDNN/ATen naming), and NCHW<->NHWC layout
# conversions (cuDNN inserts them when tensors are not channels_last). Matched against the lower-cased
# name: re.IGNORECASE is much slower on long templated kernel names (docs/benchmarks.md, "Figures behind code
# choices").
_REDUCED_PRECISION_RE = re.compile(r"fp16|f16|bf16|half|bfloat16|hgemm|h884|h1688|h16816")
_LAYOUT_CONVERSION_RE = re.compile(r"nchwtonhwc|nhwctonchw")

# HTA's default `consecutive_kernel_delay` (trace time unit: microseconds).
KERNEL_WAIT_THRESHOLD_US = 30.0
IDLE_CATEGORIES = ("host_wait", "kernel_wait", "other")
TOP_KERNELS = 10
# Elements a chunked loop handles at once: searches over a million activities, a chunk at a time, make int64
# positions of one chunk, not of the whole trace
CHUNK_ELEMENTS = 1 << 16


def kernel_type(name: str) -> str:
    if _COMM_KERNEL_RE.match(name):
        return COMMUNICATION
    if _MEMORY_KERNEL_RE.match(name):
        return MEMORY
    if not _NON_COMPUTE_RE.match(name):
        return COMPUTATION
    return OTHER


@dataclass
class GpuActivities:
    """GPU activities as integer-microsecond intervals (all of a rank's, or a window's subset)."""

    start: np.ndarray  # float64, whole microseconds
    end: np.ndarray
    stream: np.ndarray
    name_id: np.ndarray
    type_code: np.ndarray  # int8 index into KERNEL_TYPES (a byte an activity, compared in C)
    launch_ts: np.ndarray  # float64 start of the launching runtime call (NaN when unknown)

    @property
    def count(self) -> int:
        return int(self.start.size)

    def subset(self, mask: np.ndarray | slice) -> GpuActivities:
        return GpuActivities(*(getattr(self, f)[mask] for f in self.__dataclass_fields__))

    def keep(self, mask: np.ndarray) -> GpuActivities:
        """subset, made of these activities in place, a field at a time: a big trace's activities are held
        once and one field more, not twice."""
        for f in self.__dataclass_fields__:
            setattr(self, f, getattr(self, f)[mask])
        return self

    def of_type(self, ktype: str) -> np.ndarray:
        """The mask of the activities whose kernel type is ktype."""
        return self.type_code == KERNEL_TYPES.index(ktype)


@dataclass
class TemporalBreakdown:
    idle_time_us: float
    compute_time_us: float
    non_compute_time_us: float
    kernel_time_us: float

    def pct(self, value: float) -> float:
        return 100.0 * value / self.kernel_time_us if self.kernel_time_us > 0 else 0.0

    @property
    def idle_pct(self) -> float:
        return self.pct(self.idle_time_us)

    @property
    def compute_pct(self) -> float:
        return self.pct(self.compute_time_us)

    @property
    def non_compute_pct(self) -> float:
        return self.pct(self.non_compute_time_us)


@dataclass
class KernelTypeShare:
    kernel_type: str
    time_us: float
    pct: float


@dataclass
class StreamIdle:
    stream: int
    idle_category: str
    idle_time_us: float
    idle_ratio: float


@dataclass
class KernelTotal:
    name: str
    kernel_type: str
    time_us: float
    count: int


def hta_rounded_interval(ts: np.ndarray, dur: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Start rounded up, end rounded down to whole microseconds (HTA's ns-rounding).

    A sub-microsecond activity can round to end < start; HTA keeps that negative length, we clamp
    it to zero so that no activity subtracts from busy time."""
    return _hta_rounded_in_place(np.array(ts, dtype=np.float64), np.array(dur, dtype=np.float64))


def _hta_rounded_in_place(ts: np.ndarray, dur: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """hta_rounded_interval written over its two float64 arguments (the start over ts, the end over dur):
    no third array the size of a big trace's activities."""
    dur += ts  # the end: ts + dur, the same sum
    np.ceil(ts, out=ts)
    np.floor(dur, out=dur)
    np.maximum(dur, ts, out=dur)
    return ts, dur


def selected(values: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """values[mask], or values themselves when the mask keeps them all (no copy of a big trace's column)."""
    return values if mask.all() else values[mask]


def in_order(values: np.ndarray) -> bool:
    """Whether values never decrease (NaN anywhere: False), so a stable sort would not move them."""
    return bool(np.all(values[1:] >= values[:-1]))


def merge_intervals(start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Union of intervals as sorted disjoint (start, end) arrays; touching intervals merge. The result is to
    be read, not written: when nothing merges, it is (`start`, `end`) themselves if those were in order."""
    if start.size == 0:
        return start.copy(), end.copy()
    # Big traces hold a million intervals and more: each temporary is dropped as soon as it is used, the
    # running end is accumulated in place, and input already in order (a trace's activities mostly are; a
    # stable sort would leave it as it is) is read where it lies instead of copied in sorted order.
    if in_order(start):
        # ends in order too (one stream's kernels): the running end is `end` as it is
        s, running_end = start, end if in_order(end) else np.maximum.accumulate(end)
    else:
        order = np.argsort(start, kind="stable")
        s, running_end = start[order], end[order]
        del order
        np.maximum.accumulate(running_end, out=running_end)
    is_new = np.empty(s.size, dtype=bool)  # an interval that starts a merged one
    is_new[0] = True
    np.greater(s[1:], running_end[:-1], out=is_new[1:])
    if is_new.all():  # nothing merges: every interval is its own (no copies of a million intervals)
        return s, running_end
    is_last = np.empty(s.size, dtype=bool)  # one that ends a merged one: the last before the next new one
    is_last[:-1] = is_new[1:]
    is_last[-1] = True
    return s[is_new], running_end[is_last]


def union_length(start: np.ndarray, end: np.ndarray) -> float:
    s, e = merge_intervals(start, end)
    return float((e - s).sum())


def select_gpu_activities(trace: RankTrace) -> GpuActivities:
    """Every GPU activity of the trace, with the start of its launching host call."""
    keep = trace.gpu_mask()
    launch_ts = np.ceil(_launch_ts_by_correlation(trace, keep))  # whole us, as HTA compares them
    start, end = _hta_rounded_in_place(trace.ts[keep], trace.dur[keep])  # both selections are copies
    name_id = trace.name_id[keep]
    code_by_name = np.full(len(trace.names), KERNEL_TYPES.index(OTHER), dtype=np.int8)
    for i in np.unique(name_id).tolist():  # GPU names only: a trace has far more host names
        code_by_name[i] = KERNEL_TYPES.index(kernel_type(trace.names[i]))
    return GpuActivities(
        start=start,
        end=end,
        stream=trace.stream[keep],
        name_id=name_id,
        type_code=code_by_name[name_id],
        launch_ts=launch_ts,
    )


def launched_before(acts: GpuActivities, host_window_end: float) -> GpuActivities:
    """The activities whose launching host call starts before host_window_end (unknown launch: dropped)."""
    return acts.subset(acts.launch_ts < host_window_end)  # NaN compares False


def keep_launched_before(acts: GpuActivities, host_window_end: float) -> GpuActivities:
    """launched_before, made of acts in place (GpuActivities.keep): the caller's activities become the window's."""
    return acts.keep(acts.launch_ts < host_window_end)


def _launch_ts_by_correlation(trace: RankTrace, gpu: np.ndarray) -> np.ndarray:
    """For each of the `gpu` events, in order, the start of the host event sharing its correlation id (NaN if
    none). Sized by the GPU activities, not the whole trace: on a big trace an array per event is the largest
    thing the activities' selection would make."""
    launch_ts = np.full(int(np.count_nonzero(gpu)), np.nan)
    host_with_corr = ~gpu & (trace.correlation >= 0)
    host_corr = trace.correlation[host_with_corr]
    host_ts = trace.ts[host_with_corr]
    del host_with_corr
    if host_corr.size == 0:
        return launch_ts
    if not in_order(host_corr):  # launches are recorded in correlation order: usually nothing to sort
        order = np.argsort(host_corr, kind="stable")
        host_corr, host_ts = host_corr[order], host_ts[order]
        del order
    wanted_all = trace.correlation[gpu]
    for at in range(0, wanted_all.size, CHUNK_ELEMENTS):  # a chunk at a time: the positions are int64
        wanted = wanted_all[at : at + CHUNK_ELEMENTS]
        pos = np.searchsorted(host_corr, wanted)
        found = (wanted >= 0) & (pos < host_corr.size)
        found[found] = host_corr[pos[found]] == wanted[found]
        launch_ts[at : at + wanted.size][found] = host_ts[pos[found]]
    return launch_ts


def temporal_breakdown(acts: GpuActivities) -> TemporalBreakdown | None:
    if acts.count == 0:
        return None
    all_s, all_e = merge_intervals(acts.start, acts.end)
    kernel_time = float(all_e[-1] - all_s[0])
    busy = float((all_e - all_s).sum())
    del all_s, all_e
    is_compute = acts.of_type(COMPUTATION)
    compute = union_length(selected(acts.start, is_compute), selected(acts.end, is_compute))
    idle = kernel_time - busy
    return TemporalBreakdown(
        idle_time_us=idle,
        compute_time_us=compute,
        non_compute_time_us=kernel_time - compute - idle,
        kernel_time_us=kernel_time,
    )


def kernel_type_breakdown(acts: GpuActivities) -> list[KernelTypeShare]:
    """Time per kernel type and per overlap of types, largest first (zero rows dropped).

    The boundaries of every type's busy intervals, in time order, cut time into segments; a type is busy over a
    segment when one of its merged intervals covers the segment's start (a search per type), which sets that
    type's bit in the segment's state, and each segment's length is added to its state's total in time order.
    Time is walked in windows cut at every CHUNK_ELEMENTS-th start of each type, so only a window's boundaries
    are sorted and held at once: on a trace of millions of kernels this was the analysis' largest moment."""
    merged = []
    for ktype in BREAKDOWN_KERNEL_TYPES:
        mask = acts.of_type(ktype)
        merged.append(merge_intervals(selected(acts.start, mask), selected(acts.end, mask)))
        del mask
    if not any(s.size for s, _ in merged):
        return []
    totals = np.zeros(1 << len(BREAKDOWN_KERNEL_TYPES))
    edges = np.unique(np.concatenate([s[CHUNK_ELEMENTS::CHUNK_ELEMENTS] for s, _ in merged])).tolist()
    taken = [(0, 0)] * len(merged)  # each type's starts and ends in the windows before
    previous = np.zeros(0)  # the last boundary of the windows before: its segment ends in this window
    for edge in [*edges, None]:
        pieces = [previous]
        for k, (s, e) in enumerate(merged):
            upto = (s.size, e.size) if edge is None else (int(s.searchsorted(edge)), int(e.searchsorted(edge)))
            pieces += [s[taken[k][0] : upto[0]], e[taken[k][1] : upto[1]]]
            taken[k] = upto
        time = np.concatenate(pieces)
        time.sort()
        if time.size >= 2:
            points = time[:-1]
            state = np.zeros(points.size, dtype=np.int8)  # the types busy from each boundary to the next
            for bit, (s, e) in enumerate(merged):
                # merged intervals are disjoint and never touch: at most one starts at or before a point and
                # ends after it, and then the point is inside it
                busy = np.searchsorted(s, points, side="right") > np.searchsorted(e, points, side="right")
                state |= busy.view(np.int8) << bit
            np.add.at(totals, state, np.diff(time))  # in time order, as np.bincount(state, weights=...) adds
        if time.size:
            previous = time[-1:]
    rows = [(_overlap_label(state_bits), float(t)) for state_bits, t in enumerate(totals) if state_bits > 0 and t > 0]
    grand_total = sum(t for _, t in rows)
    rows.sort(key=lambda r: -r[1])
    return [KernelTypeShare(label, t, 100.0 * t / grand_total) for label, t in rows]


def _overlap_label(state_bits: int) -> str:
    return " overlapping ".join(k for bit, k in enumerate(BREAKDOWN_KERNEL_TYPES) if state_bits & (1 << bit))


def idle_breakdown(acts: GpuActivities) -> list[StreamIdle]:
    rows: list[StreamIdle] = []
    for stream in np.unique(acts.stream):
        on_stream = acts.stream == stream
        start, end, launch = (selected(v, on_stream) for v in (acts.start, acts.end, acts.launch_ts))
        if not in_order(start):  # a stable sort leaves ordered starts as they are
            order = np.argsort(start, kind="stable")
            start, end, launch = start[order], end[order], launch[order]
        host_wait = launch[1:] > end[:-1]  # NaN launch (unknown) compares False
        kernel_wait = _short_gaps(start, end)
        kernel_wait &= ~host_wait
        other = ~(host_wait | kernel_wait)
        per_category = [_gaps_sum(start, end, m) for m in (host_wait, kernel_wait, other)]
        total = sum(per_category)
        for category, t in zip(IDLE_CATEGORIES, per_category, strict=True):
            rows.append(StreamIdle(int(stream), category, t, t / total if total > 0 else 0.0))
    return rows


def _selected_difference(a: np.ndarray, b: np.ndarray, mask: np.ndarray) -> float:
    """float((a - b)[mask].sum()): the selected differences are made a chunk at a time into one array of their
    own, the same values in the same order and so the same sum, without an array of every difference first."""
    picked = np.empty(int(np.count_nonzero(mask)))
    filled = 0
    for at in range(0, mask.size, CHUNK_ELEMENTS):
        keep = mask[at : at + CHUNK_ELEMENTS]
        n = int(np.count_nonzero(keep))
        np.subtract(
            a[at : at + CHUNK_ELEMENTS][keep], b[at : at + CHUNK_ELEMENTS][keep], out=picked[filled : filled + n]
        )
        filled += n
    return float(picked.sum())


def _gaps_sum(start: np.ndarray, end: np.ndarray, mask: np.ndarray) -> float:
    """The sum of the gaps between consecutive activities (start[i + 1] - end[i]) that mask selects."""
    return _selected_difference(start[1:], end[:-1], mask)


def _short_gaps(start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Which gaps between consecutive activities are shorter than KERNEL_WAIT_THRESHOLD_US (a chunk at a time)."""
    short = np.empty(max(start.size - 1, 0), dtype=bool)
    for at in range(0, short.size, CHUNK_ELEMENTS):
        stop = min(at + CHUNK_ELEMENTS, short.size)
        np.less(start[at + 1 : stop + 1] - end[at:stop], KERNEL_WAIT_THRESHOLD_US, out=short[at:stop])
    return short


def top_kernels(acts: GpuActivities, names: list[str], limit: int = TOP_KERNELS) -> list[KernelTotal]:
    """Kernels by total (unmerged) duration, largest first; durations rounded as HTA rounds them."""
    if acts.count == 0:
        return []
    # added in activity order, as np.bincount(name_id, weights=end - start) adds them, a chunk at a time: no
    # intp copy of the ids and float array of every duration at once
    totals = np.zeros(len(names))
    counts = np.zeros(len(names), dtype=np.int64)
    for at in range(0, acts.count, CHUNK_ELEMENTS):
        ids = acts.name_id[at : at + CHUNK_ELEMENTS]
        np.add.at(totals, ids, acts.end[at : at + CHUNK_ELEMENTS] - acts.start[at : at + CHUNK_ELEMENTS])
        counts += np.bincount(ids, minlength=len(names))
    ranked = np.argsort(-totals, kind="stable")[:limit]
    return [
        KernelTotal(names[i], kernel_type(names[i]), float(totals[i]), int(counts[i])) for i in ranked if counts[i] > 0
    ]


def is_reduced_precision_kernel(name: str) -> bool:
    return _REDUCED_PRECISION_RE.search(name.lower()) is not None


def is_layout_conversion_kernel(name: str) -> bool:
    return _LAYOUT_CONVERSION_RE.search(name.lower()) is not None


def kernel_time_share_pct(acts: GpuActivities, names: list[str], predicate) -> float | None:
    """Share (%) of summed kernel durations spent in kernels whose name satisfies predicate (None: no
    kernel time to share, e.g. only sub-microsecond activities)."""
    total = float((acts.end - acts.start).sum())
    if total <= 0:
        return None
    used = np.unique(acts.name_id)  # only the kernels' names: a trace has far more host names
    hit_ids = used[np.fromiter((bool(predicate(names[i])) for i in used), dtype=bool, count=used.size)]
    return 100.0 * _selected_difference(acts.end, acts.start, id_mask(acts.name_id, hit_ids, len(names))) / total
