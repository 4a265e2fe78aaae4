"""Collective communication of a data-parallel job: per rank, and across ranks (who waits for whom).

What a collective is, by backend (the trace's `distributedInfo.backend`):
- NCCL (GPU ranks): an NCCL kernel (`ncclKernel_*`, and `ncclDevKernel_*` as newer NCCL names them),
  measured against the rank's compute kernels: exposed time is NCCL kernel time during which no compute
  kernel runs, as HTA's comm/compute overlap counts it.
- gloo (CPU ranks): a `gloo:<collective>` span, which torch records on gloo's own worker thread while the
  collective runs, measured against the training thread (the thread of the ProfilerStep spans): exposed time
  is collective time during which that thread runs no operator of its own. Time inside a `c10d::*` call
  (enqueueing a collective, or blocked on it) is waiting, not compute.
- neither (a one-rank NCCL job: NCCL launches no kernel for a collective over one rank): the host's record of
  each call, torch's `record_param_comms` (else the `nccl:<collective>` annotations). Calls and message sizes
  are known, collective time is not: it, the exposed time and the waits stay None (not measured), never 0,
  and the analysis' note says why.

Wherever `record_param_comms` names its collective and message (torch 2.x traces), the window's collectives
also get their bytes: "In msg nelems" x the size of its "dtype", summed per collective.

Across ranks, the k-th collective of every rank is the same collective (DDP issues the same buckets in the same
order on every rank). As TraceLens does, its latency is the shortest of the ranks' durations, and the rest of
each rank's duration is time that rank waited for the others to arrive. The rank the others wait for is the one
that waits least: a straggler, whose cause the pipeline then reads from that rank's own evidence.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np

from yolo_mlops.analysis.gpu import (
    COMMUNICATION,
    COMPUTATION,
    kernel_type,
    launched_before,
    merge_intervals,
    select_gpu_activities,
    union_length,
)
from yolo_mlops.analysis.host import find_steps, host_event_mask
from yolo_mlops.analysis.trace_loader import RankTrace
from yolo_mlops.labels import PHASE_LABEL_PREFIX

_GLOO_SPAN_RE = re.compile(r"^gloo:")
_NCCL_ANNOTATION_RE = re.compile(r"^nccl:")
_C10D_OP_RE = re.compile(r"^c10d::")
_PROFILER_STEP_RE = re.compile(r"^ProfilerStep#\d+$")
OPTIMIZER_STEP_LABEL = PHASE_LABEL_PREFIX + "optimizer_step"
# a spread of waits below this share of the mean step is noise, not a straggler
STRAGGLER_MIN_WAIT_SPREAD_PCT = 5.0
WAIT_RECORD = "wait"  # record_param_comms of a wait on a collective's work: not a collective of its own
# bytes of an element of each c10 scalar type, by the name record_param_comms gives it ("dtype")
DTYPE_BYTES = {
    "Bool": 1,
    "Byte": 1,
    "Char": 1,
    "Float8_e5m2": 1,
    "Float8_e4m3fn": 1,
    "Float8_e5m2fnuz": 1,
    "Float8_e4m3fnuz": 1,
    "Short": 2,
    "UInt16": 2,
    "Half": 2,
    "BFloat16": 2,
    "Int": 4,
    "UInt32": 4,
    "Float": 4,
    "ComplexHalf": 4,
    "Long": 8,
    "UInt64": 8,
    "Double": 8,
    "ComplexFloat": 8,
    "ComplexDouble": 16,
}
# how a rank's collectives were found (RankCommunication.found_from)
FROM_NCCL_KERNELS, FROM_GLOO_SPANS, FROM_HOST_CALLS = "nccl_kernels", "gloo_spans", "host_calls"


_Spans = tuple[np.ndarray, np.ndarray, np.ndarray]  # a rank's collectives: end, duration, step index


@dataclass
class RankCommunication:
    """One rank's collectives over its profiled steps."""

    rank: int
    backend: str  # "nccl" or "gloo"
    steps: int
    step_time_us: float  # summed duration of the profiled steps
    collective_calls: int
    # None below: not measured (collectives found from host calls only: no kernel or span to time)
    collective_time_us: float | None  # union of the collectives' intervals inside the steps
    exposed_time_us: float | None  # the part during which the rank computed nothing (see module docstring)
    optimizer_steps: int  # optimizer_step phase spans in the window (0 when the run had no phase labels)
    collective_pct: float | None  # of step time
    exposed_pct: float | None  # of step time
    calls_per_optimizer_step: float | None
    synced_steps: int = 0  # steps (micro-batches) whose backward all-reduced: any collective in the step
    # time its steps were held back waiting for other ranks inside collectives (cross-rank; see _cross_rank_waits)
    wait_time_us: float | None = None
    wait_pct: float | None = None  # of step time
    collective_ms_by_step: list[float] = field(default_factory=list)
    exposed_ms_by_step: list[float] = field(default_factory=list)
    found_from: str = ""  # FROM_NCCL_KERNELS, FROM_GLOO_SPANS or FROM_HOST_CALLS
    calls_per_step: float | None = None  # collective_calls / steps
    # the window's record_param_comms by collective (allreduce, broadcast, ...): calls, and the bytes of their
    # input messages; collective_bytes is their sum, None when a record lacks its size (or the trace has none)
    calls_by_collective: dict[str, int] = field(default_factory=dict)
    bytes_by_collective: dict[str, float] = field(default_factory=dict)
    collective_bytes: float | None = None


@dataclass
class CommunicationAnalysis:
    backend: str
    world_size: int
    ranks: list[RankCommunication]
    matched_collectives: int  # collectives matched across every rank (0 when the ranks' counts differ)
    # the rank the others wait for, when the waits differ by more than STRAGGLER_MIN_WAIT_SPREAD_PCT of a step
    waited_for_rank: int | None = None
    wait_spread_pct: float | None = None  # largest minus smallest rank wait, % of the mean step time
    note: str = ""


@dataclass
class RankCollectives:
    """One rank's part of the analysis, computed where its trace is loaded (a worker process, for many ranks)."""

    rank: RankCommunication
    spans: _Spans | None  # None: collectives found from host calls, with no duration to match across ranks
    world_size: int | None  # distributedInfo.world_size


def rank_collectives(trace: RankTrace) -> RankCollectives | None:
    found = _rank_communication(trace)
    return None if found is None else RankCollectives(found[0], found[1], trace.world_size)


def combine(parts: list[RankCollectives | None]) -> CommunicationAnalysis | None:
    """The ranks' collectives matched across ranks, in rank order; None when no rank has any."""
    present = [p for p in parts if p is not None]
    if not present:
        return None
    ranks = [p.rank for p in present]
    world = max([p.world_size or 0 for p in present] + [len(ranks)])
    analysis = CommunicationAnalysis(backend=ranks[0].backend, world_size=world, ranks=ranks, matched_collectives=0)
    timed = [p.spans for p in present if p.spans is not None]
    if len(timed) == len(present):
        _cross_rank_waits(analysis, timed)
    else:
        analysis.note = _untimed_note(analysis, [p.rank.rank for p in present if p.spans is None])
    return analysis


def _untimed_note(analysis: CommunicationAnalysis, ranks: list[int]) -> str:
    """Why collectives found from host calls have no time, and no wait, to report."""
    if analysis.world_size <= 1:
        return (
            f"world size 1: {analysis.backend} ran no collective kernel (NCCL launches none for a collective over "
            "a single rank), so there is no collective time to measure and no other rank to wait for; calls and "
            "message sizes are the host's (record_param_comms), and collective, exposed and wait time are not "
            "reported"
        )
    return (
        f"rank(s) {', '.join(map(str, ranks))}: no {analysis.backend} kernels in the trace (were CUDA activities "
        "recorded?): collectives counted from the host's calls (record_param_comms), without collective, exposed "
        "or wait time, and no cross-rank waits"
    )


def _rank_communication(trace: RankTrace) -> tuple[RankCommunication, _Spans | None] | None:
    """The rank's collectives, and their (end, duration, step) in issue order for the cross-rank match."""
    host = host_event_mask(trace)
    steps = find_steps(trace, host)
    if steps.count == 0:
        return None
    if _name_mask(trace, lambda n: kernel_type(n) == COMMUNICATION).any():
        spans, found_from = _nccl_spans(trace, steps), FROM_NCCL_KERNELS
    else:
        spans, found_from = _gloo_spans(trace, host, steps), FROM_GLOO_SPANS
    if spans is None:
        return _host_calls(trace, host, steps)
    backend, comm_start, comm_end, cover_start, cover_end, step_of_comm, step_of_cover, window_steps = spans
    comm_by_step, exposed_by_step = [], []
    for i in range(window_steps):
        in_step, covering = step_of_comm == i, step_of_cover == i
        merged_start, merged_end = merge_intervals(comm_start[in_step], comm_end[in_step])
        comm_by_step.append(float((merged_end - merged_start).sum()))
        exposed_by_step.append(_uncovered(merged_start, merged_end, cover_start[covering], cover_end[covering]))
    step_us = float(steps.duration[:window_steps].sum())
    window_start, window_end = float(steps.start[0]), float(steps.end[window_steps - 1])
    optimizer_steps = _count_in_window(trace, host, OPTIMIZER_STEP_LABEL, window_start, window_end)
    calls = int((step_of_comm >= 0).sum())
    comm_us, exposed_us = float(sum(comm_by_step)), float(sum(exposed_by_step))
    result = RankCommunication(
        rank=trace.rank,
        backend=backend,
        steps=window_steps,
        step_time_us=step_us,
        collective_calls=calls,
        collective_time_us=comm_us,
        exposed_time_us=exposed_us,
        optimizer_steps=optimizer_steps,
        collective_pct=_pct(comm_us, step_us),
        exposed_pct=_pct(exposed_us, step_us),
        calls_per_optimizer_step=calls / optimizer_steps if optimizer_steps else None,
        synced_steps=sum(1 for ms in comm_by_step if ms > 0),
        collective_ms_by_step=[v / 1000 for v in comm_by_step],
        exposed_ms_by_step=[v / 1000 for v in exposed_by_step],
        found_from=found_from,
        calls_per_step=calls / window_steps,
    )
    _add_messages(result, trace, steps, window_steps)
    counted = step_of_comm >= 0
    return result, (comm_end[counted], (comm_end - comm_start)[counted], step_of_comm[counted])


def _host_calls(trace: RankTrace, host: np.ndarray, steps) -> tuple[RankCommunication, None] | None:
    """A rank whose collectives left no kernel and no span (a one-rank NCCL job: NCCL launches no kernel for a
    collective over one rank): the host's records of its calls over every profiled step, as the gloo path
    counts them. Calls per step and per optimizer step, and message bytes where the records give them; no
    collective or exposed time (None, not 0: nothing was measured)."""
    records = [r for r in trace.collective_records if r.collective != WAIT_RECORD]
    if records:
        ts = np.array([r.ts for r in records], dtype=np.float64)
    else:  # a trace whose record_param_comms carry no args: the nccl:<collective> annotations torch records
        ts = trace.ts[_name_mask(trace, _NCCL_ANNOTATION_RE.match) & host]
    if not ts.size:
        return None
    step_of = steps.index_of(ts)
    calls = int((step_of >= 0).sum())
    if calls == 0:
        return None
    window_start, window_end = float(steps.start[0]), float(steps.end[steps.count - 1])
    optimizer_steps = _count_in_window(trace, host, OPTIMIZER_STEP_LABEL, window_start, window_end)
    result = RankCommunication(
        rank=trace.rank,
        backend=trace.backend or "unknown",
        steps=steps.count,
        step_time_us=float(steps.duration.sum()),
        collective_calls=calls,
        collective_time_us=None,
        exposed_time_us=None,
        optimizer_steps=optimizer_steps,
        collective_pct=None,
        exposed_pct=None,
        calls_per_optimizer_step=calls / optimizer_steps if optimizer_steps else None,
        synced_steps=int(np.unique(step_of[step_of >= 0]).size),
        found_from=FROM_HOST_CALLS,
        calls_per_step=calls / steps.count,
    )
    _add_messages(result, trace, steps, steps.count)
    return result, None


def _add_messages(result: RankCommunication, trace: RankTrace, steps, window_steps: int) -> None:
    """The window's record_param_comms collectives by name: calls, and bytes of their input messages ("In msg
    nelems" x the size of "dtype"); the bytes stay unknown (None, empty) when any record lacks either."""
    records = [r for r in trace.collective_records if r.collective != WAIT_RECORD]
    if not records:
        return
    step_of = steps.index_of(np.array([r.ts for r in records], dtype=np.float64))
    in_window = [r for r, step in zip(records, step_of.tolist(), strict=True) if 0 <= step < window_steps]
    calls: dict[str, int] = {}
    sizes: dict[str, float] = {}
    known = True
    for record in in_window:
        calls[record.collective] = calls.get(record.collective, 0) + 1
        element = DTYPE_BYTES.get(record.dtype or "")
        if element is None or record.in_nelems is None:
            known = False
            continue
        sizes[record.collective] = sizes.get(record.collective, 0.0) + float(record.in_nelems * element)
    result.calls_by_collective = calls
    if known and in_window:
        result.bytes_by_collective = sizes
        result.collective_bytes = float(sum(sizes.values()))


def _nccl_spans(trace: RankTrace, steps):
    """NCCL kernels against compute kernels, in HTA's window (the kernels launched before the last ProfilerStep
    starts, when there are two or more) and each kernel in the step that launched it, as HTA counts them."""
    acts = select_gpu_activities(trace)
    window_steps = steps.count
    if steps.count >= 2:
        acts = launched_before(acts, float(np.ceil(steps.start[-1])))
        window_steps = steps.count - 1
    order = np.argsort(acts.start, kind="stable")
    acts = acts.subset(order)
    start, end, launch = acts.start, acts.end, acts.launch_ts
    step_of = steps.index_of(launch)
    step_of = np.where(step_of < window_steps, step_of, -1)
    comm, compute = acts.of_type(COMMUNICATION), acts.of_type(COMPUTATION)
    return ("nccl", start[comm], end[comm], start[compute], end[compute], step_of[comm], step_of[compute], window_steps)


def _gloo_spans(trace: RankTrace, host: np.ndarray, steps):
    """gloo's collective spans against the training thread's operators, both clipped to each step."""
    collective = _name_mask(trace, _GLOO_SPAN_RE.match) & host
    if not collective.any():
        return None
    order = np.flatnonzero(collective)
    order = order[np.argsort(trace.ts[order], kind="stable")]
    comm_start, comm_end = trace.ts[order], trace.ts[order] + trace.dur[order]
    ops_start, ops_end = _training_thread_compute(trace, host)
    # a collective belongs to the step it starts in; both sides are clipped to that step's span
    step_of_comm = steps.index_of(comm_start)
    comm_end = np.where(step_of_comm >= 0, np.minimum(comm_end, steps.end[step_of_comm]), comm_end)
    cover_start, cover_end, step_of_cover = [], [], []
    for i, (lo, hi) in enumerate(zip(steps.start, steps.end, strict=True)):
        s, e = _clip(ops_start, ops_end, lo, hi)
        cover_start.append(s)
        cover_end.append(e)
        step_of_cover.append(np.full(s.size, i))
    return (
        trace.backend or "gloo",
        comm_start,
        comm_end,
        np.concatenate(cover_start),
        np.concatenate(cover_end),
        step_of_comm,
        np.concatenate(step_of_cover).astype(int),
        steps.count,
    )


def _training_thread_compute(trace: RankTrace, host: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The training thread's operator time, less the time inside c10d calls (enqueueing or blocked on a
    collective): what a gloo collective overlaps with when it is hidden."""
    step_events = _name_mask(trace, _PROFILER_STEP_RE.match) & host
    threads = trace.tid_id[step_events]
    if threads.size == 0:
        return np.zeros(0), np.zeros(0)
    training_thread = int(np.argmax(np.bincount(threads)))
    on_thread = host & (trace.tid_id == training_thread)
    cpu_op = trace.category_mask(frozenset({"cpu_op"}))
    c10d = _name_mask(trace, _C10D_OP_RE.match)
    ops_start, ops_end = merge_intervals(*_intervals(trace, on_thread & cpu_op & ~c10d))
    wait_start, wait_end = merge_intervals(*_intervals(trace, on_thread & c10d))
    return _subtract(ops_start, ops_end, wait_start, wait_end)


def _cross_rank_waits(analysis: CommunicationAnalysis, spans: list[_Spans]) -> None:
    """Each matched collective ends together on every rank, after its latency (the shortest of the ranks'
    durations); the rest of a rank's duration it waited for a peer. A rank's step is held back by its longest
    wait in the step: DDP's buckets of one backward all wait for the same late peer, concurrently and staggered
    beside the rank's compute, so a sum (or a union) over buckets would count one delay once per bucket, and
    the last collective to end can be a small one issued after the buckets, when every rank has arrived."""
    durations = [d for _, d, _ in spans]
    counts = {d.size for d in durations}
    if len(durations) < 2:
        analysis.note = "one rank's trace: no cross-rank waits"
        return
    if len(counts) != 1 or not durations[0].size:
        analysis.note = (
            f"the ranks recorded different numbers of collectives ({sorted(counts)}): not matched, no cross-rank waits"
        )
        return
    table = np.vstack(durations)  # rank x collective
    latency = table.min(axis=0)
    waits = np.array([_step_waits(end, duration - latency, step) for end, duration, step in spans])
    analysis.matched_collectives = int(table.shape[1])
    for rank, wait in zip(analysis.ranks, waits, strict=True):
        rank.wait_time_us = float(wait)
        rank.wait_pct = _pct(float(wait), rank.step_time_us)
    mean_step = float(np.mean([r.step_time_us / max(r.steps, 1) for r in analysis.ranks]))
    steps = max(min(r.steps for r in analysis.ranks), 1)
    spread_per_step = float(np.max(waits) - np.min(waits)) / steps
    analysis.wait_spread_pct = _pct(spread_per_step, mean_step)
    if analysis.wait_spread_pct >= STRAGGLER_MIN_WAIT_SPREAD_PCT:
        analysis.waited_for_rank = analysis.ranks[int(np.argmin(waits))].rank


def _step_waits(end: np.ndarray, wait: np.ndarray, step: np.ndarray) -> float:
    """Sum over steps of each step's longest wait."""
    return float(sum(np.max(wait[step == s]) for s in np.unique(step)))


def _name_mask(trace: RankTrace, predicate) -> np.ndarray:
    wanted = [i for i, name in enumerate(trace.names) if predicate(name)]
    return trace.name_mask(wanted)


def _count_in_window(trace: RankTrace, host: np.ndarray, name: str, start: float, end: float) -> int:
    mask = _name_mask(trace, lambda n: n == name) & host & (trace.ts >= start) & (trace.ts < end)
    return int(mask.sum())


def _intervals(trace: RankTrace, mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return trace.ts[mask], trace.ts[mask] + trace.dur[mask]


def _clip(start: np.ndarray, end: np.ndarray, lo: float, hi: float) -> tuple[np.ndarray, np.ndarray]:
    s, e = np.maximum(start, lo), np.minimum(end, hi)
    keep = e > s
    return s[keep], e[keep]


def _uncovered(start: np.ndarray, end: np.ndarray, cover_start: np.ndarray, cover_end: np.ndarray) -> float:
    """Length of the union of [start, end) not covered by the union of the cover intervals."""
    total = union_length(start, end)
    if not cover_start.size or not start.size:
        return total
    a_start, a_end = merge_intervals(start, end)
    b_start, b_end = merge_intervals(cover_start, cover_end)
    return total - _intersection_length(a_start, a_end, b_start, b_end)


def _intersection_length(a_start, a_end, b_start, b_end) -> float:
    """Overlap of two sorted lists of disjoint intervals (a two-pointer sweep)."""
    i = j = 0
    total = 0.0
    while i < a_start.size and j < b_start.size:
        lo, hi = max(a_start[i], b_start[j]), min(a_end[i], b_end[j])
        if hi > lo:
            total += hi - lo
        if a_end[i] < b_end[j]:
            i += 1
        else:
            j += 1
    return float(total)


def _subtract(a_start, a_end, b_start, b_end) -> tuple[np.ndarray, np.ndarray]:
    """Sorted disjoint intervals a minus sorted disjoint intervals b."""
    out_start, out_end = [], []
    j = 0
    for s, e in zip(a_start.tolist(), a_end.tolist(), strict=True):
        while j < b_start.size and b_end[j] <= s:
            j += 1
        k, cursor = j, s
        while k < b_start.size and b_start[k] < e:
            if b_start[k] > cursor:
                out_start.append(cursor)
                out_end.append(float(b_start[k]))
            cursor = max(cursor, float(b_end[k]))
            k += 1
        if cursor < e:
            out_start.append(cursor)
            out_end.append(e)
    return np.array(out_start), np.array(out_end)


def _pct(part: float, whole: float) -> float:
    return 100.0 * part / whole if whole > 0 else 0.0
