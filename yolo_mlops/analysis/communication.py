"""Collective communication of a data-parallel job: per rank, and across ranks (who waits for whom).

A collective is an NCCL kernel (GPU ranks), a `gloo:<collective>` span (CPU ranks), or, where a one-rank NCCL job
launches no kernel, the host's record of the call: then its time, exposed time and waits stay None (not measured),
never 0. Across ranks the k-th collective of every rank is the same one; each step's straggler and stalls are
judged by `judge_steps`. What counts as exposed, collectives by kind and the straggler rule: docs/ddp.md
("Communication, per rank", "Who waits for whom").
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
from yolo_mlops.analysis.step_activity import ACTIVITY_TEXT, EPOCH_END, StepActivity, step_activities
from yolo_mlops.analysis.trace_loader import RankTrace
from yolo_mlops.labels import PHASE_LABEL_PREFIX

_GLOO_SPAN_RE = re.compile(r"^gloo:")
_NCCL_ANNOTATION_RE = re.compile(r"^nccl:")
_C10D_OP_RE = re.compile(r"^c10d::")
_PROFILER_STEP_RE = re.compile(r"^ProfilerStep#\d+$")
OPTIMIZER_STEP_LABEL = PHASE_LABEL_PREFIX + "optimizer_step"
BACKWARD_LABEL = PHASE_LABEL_PREFIX + "backward"
# a lead below this share of the median step is never a straggler's or a stall's, however quiet the ranks are
STRAGGLER_MIN_LEAD_PCT = 5.0
# a stall's lead is at least this many standard deviations of a lead's noise (the ranks' own step-to-step jitter,
# see judge_steps): a one-sided normal tail this far out, so the jitter of two ranks' work alone rarely makes one
STRAGGLER_NOISE_SDS = 3.0
STRAGGLER_ALPHA = 0.05  # a straggler's median lead: the one-sided level of its test, shared over the ranks
MIN_STEADY_STEPS = 2  # fewer steady steps than this: no straggler is named (stalls are still reported)
GRADIENT_ALL_REDUCE = "gradient_all_reduce"  # calls_by_kind: all-reduces issued in the backward phase
_NCCL_KERNEL_KIND_RE = re.compile(r"^nccl(?:Dev)?Kernel_([A-Za-z]+)")
# collective kinds by their name in lower case without underscores (gloo spans, NCCL kernels, c10d records)
_KINDS = {
    "allreduce": "all_reduce",
    "broadcast": "broadcast",
    "allgather": "all_gather",
    "allgatherbase": "all_gather",
    "allgatherintocoalesced": "all_gather",
    "reducescatter": "reduce_scatter",
    "reducescatterbase": "reduce_scatter",
    "alltoall": "all_to_all",
    "alltoallbase": "all_to_all",
    "barrier": "barrier",
    "sendrecv": "send_recv",
    "send": "send",
    "recv": "recv",
    "reduce": "reduce",
    "gather": "gather",
    "scatter": "scatter",
}
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


# a rank's collectives: end, duration, step index, and whether each is a gradient all-reduce
_Spans = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]


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
    calls_per_optimizer_step: float | None  # gradient all-reduces per optimizer step
    synced_steps: int = 0  # steps (micro-batches) whose backward all-reduced gradients
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
    # the window's collectives by kind: GRADIENT_ALL_REDUCE (issued in the backward phase), and the others by
    # their kind (all_reduce, broadcast, ...)
    calls_by_kind: dict[str, int] = field(default_factory=dict)
    gradient_calls: int = 0
    other_calls_per_step: float | None = None  # collectives other than gradient all-reduces, per step
    boundary_steps: list[int] = field(default_factory=list)  # the window's steps that held an epoch boundary
    step_ms_by_step: list[float] = field(default_factory=list)  # each window step's duration
    wait_ms_by_step: list[float] = field(default_factory=list)  # cross-rank: the longest wait of each window step


@dataclass
class Straggler:
    """The rank the others wait for step after step (judge_steps)."""

    rank: int
    steps_held: int  # steady steps in which the others waited for it by at least lead_threshold_ms
    steady_steps: int
    median_lead_ms: float  # over the steady steps: how much longer the others waited than it did, per step
    # what it did more than its peers, median over the steady steps it held: activity (step_activity) -> ms
    extra_ms: dict[str, float] = field(default_factory=dict)


@dataclass
class Stall:
    """One step in which the others waited for one rank once (or at an epoch boundary): not a straggler's."""

    step: int  # ProfilerStep number
    rank: int  # the rank the others waited for
    lead_ms: float
    boundary: bool  # the step held an epoch boundary
    activity: str  # what that rank did more than its peers in the step (step_activity), "" when nothing stood out
    activity_ms: float = 0.0  # by how much

    @property
    def doing(self) -> str:
        return ACTIVITY_TEXT.get(self.activity, self.activity) if self.activity else "nothing its peers did not"


@dataclass
class CommunicationAnalysis:
    backend: str
    world_size: int
    ranks: list[RankCommunication]
    matched_collectives: int  # collectives matched across every rank (0 when the ranks' counts differ)
    # the straggler's rank (judge_steps), None when there is none
    waited_for_rank: int | None = None
    # largest minus smallest rank wait over the steady steps, % of the mean step time
    wait_spread_pct: float | None = None
    note: str = ""
    steady_steps: int = 0  # window steps that held no epoch boundary on any rank
    boundary_steps: list[int] = field(default_factory=list)  # window steps that held one on some rank
    lead_threshold_ms: float | None = None  # a rank's lead a step needs to count as held back (judge_steps)
    straggler: Straggler | None = None
    stalls: list[Stall] = field(default_factory=list)


@dataclass
class RankCollectives:
    """One rank's part of the analysis, computed where its trace is loaded (a worker process, for many ranks)."""

    rank: RankCommunication
    spans: _Spans | None  # None: collectives found from host calls, with no duration to match across ranks
    world_size: int | None  # distributedInfo.world_size
    activities: list[StepActivity] = field(default_factory=list)  # the window's steps, from the phase labels


def rank_collectives(trace: RankTrace) -> RankCollectives | None:
    found = _rank_communication(trace)
    return None if found is None else RankCollectives(found[0], found[1], trace.world_size, found[2])


def combine(parts: list[RankCollectives | None]) -> CommunicationAnalysis | None:
    """The ranks' collectives matched across ranks, in rank order; None when no rank has any."""
    present = [p for p in parts if p is not None]
    if not present:
        return None
    ranks = [p.rank for p in present]
    world = max([p.world_size or 0 for p in present] + [len(ranks)])
    analysis = CommunicationAnalysis(backend=ranks[0].backend, world_size=world, ranks=ranks, matched_collectives=0)
    analysis.boundary_steps = sorted({step for r in ranks for step in r.boundary_steps})
    analysis.steady_steps = min(r.steps for r in ranks) - len(analysis.boundary_steps)
    timed = [p.spans for p in present if p.spans is not None]
    if len(timed) == len(present):
        _cross_rank_waits(analysis, timed, [p.activities for p in present])
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


def collective_kind(name: str) -> str:
    """all_reduce, broadcast, all_gather, ... of a gloo span (`gloo:all_reduce`), an NCCL kernel
    (`ncclDevKernel_AllReduce_Sum_f32_RING_LL`), an annotation (`nccl:broadcast`) or a c10d record's collective
    name (`allreduce`); a name of none of these shapes is its own kind, in lower case."""
    token = name
    kernel = _NCCL_KERNEL_KIND_RE.match(name)
    if kernel is not None:
        token = kernel.group(1)
    elif ":" in name:
        token = name.split(":", 1)[1]
    return _KINDS.get(token.lower().replace("_", ""), token.lower())


def _rank_communication(
    trace: RankTrace,
) -> tuple[RankCommunication, _Spans | None, list[StepActivity]] | None:
    """The rank's collectives, their (end, duration, step) in issue order for the cross-rank match, and what
    its training thread did in each step of the window."""
    host = host_event_mask(trace)
    steps = find_steps(trace, host)
    if steps.count == 0:
        return None
    if _name_mask(trace, lambda n: kernel_type(n) == COMMUNICATION).any():
        spans, found_from = _nccl_spans(trace, steps), FROM_NCCL_KERNELS
    else:
        spans, found_from = _gloo_spans(trace, host, steps), FROM_GLOO_SPANS
    if spans is None:
        found = _host_calls(trace, host, steps)
        return None if found is None else (*found, step_activities(trace, host, steps))
    backend, comm_start, comm_end, cover_start, cover_end, step_of_comm, step_of_cover, window_steps, kinds, issued = (
        spans
    )
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
    activities = step_activities(trace, host, steps)[:window_steps]
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
        calls_per_optimizer_step=None,
        collective_ms_by_step=[v / 1000 for v in comm_by_step],
        exposed_ms_by_step=[v / 1000 for v in exposed_by_step],
        found_from=found_from,
        calls_per_step=calls / window_steps,
        boundary_steps=[a.step for a in activities if a.boundary],
        step_ms_by_step=[float(d) / 1000 for d in steps.duration[:window_steps]],
    )
    gradient = _add_kinds(result, trace, host, kinds, issued, step_of_comm)
    _add_messages(result, trace, steps, window_steps)
    counted = step_of_comm >= 0
    spans_out = (comm_end[counted], (comm_end - comm_start)[counted], step_of_comm[counted], gradient[counted])
    return result, spans_out, activities


def _host_calls(trace: RankTrace, host: np.ndarray, steps) -> tuple[RankCommunication, None] | None:
    """A rank whose collectives left no kernel and no span (a one-rank NCCL job: NCCL launches no kernel for a
    collective over one rank): the host's records of its calls over every profiled step, as the gloo path
    counts them. Calls per step and per optimizer step, and message bytes where the records give them; no
    collective or exposed time (None, not 0: nothing was measured)."""
    records = [r for r in trace.collective_records if r.collective != WAIT_RECORD]
    if records:
        ts = np.array([r.ts for r in records], dtype=np.float64)
        kinds = np.array([collective_kind(r.collective) for r in records], dtype=object)
    else:  # a trace whose record_param_comms carry no args: the nccl:<collective> annotations torch records
        mask = _name_mask(trace, _NCCL_ANNOTATION_RE.match) & host
        ts = trace.ts[mask]
        kinds = np.array([collective_kind(trace.names[int(i)]) for i in trace.name_id[mask]], dtype=object)
    if not ts.size:
        return None
    step_of = steps.index_of(ts)
    calls = int((step_of >= 0).sum())
    if calls == 0:
        return None
    window_start, window_end = float(steps.start[0]), float(steps.end[steps.count - 1])
    optimizer_steps = _count_in_window(trace, host, OPTIMIZER_STEP_LABEL, window_start, window_end)
    activities = step_activities(trace, host, steps)
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
        calls_per_optimizer_step=None,
        found_from=FROM_HOST_CALLS,
        calls_per_step=calls / steps.count,
        boundary_steps=[a.step for a in activities if a.boundary],
        step_ms_by_step=[float(d) / 1000 for d in steps.duration],
    )
    _add_kinds(result, trace, host, kinds, ts, step_of)
    _add_messages(result, trace, steps, steps.count)
    return result, None


def _add_kinds(
    result: RankCommunication,
    trace: RankTrace,
    host: np.ndarray,
    kinds: np.ndarray,
    issued: np.ndarray,
    step_of: np.ndarray,
) -> np.ndarray:
    """The window's collectives by kind, the gradient all-reduces among them (issued in a backward phase: DDP's
    buckets), the steps that synchronised gradients and the gradient all-reduces per optimizer step."""
    counted = step_of >= 0
    backward_start, backward_end = merge_intervals(*_intervals(trace, _name_mask(trace, BACKWARD_LABEL.__eq__) & host))
    all_reduce = kinds == "all_reduce"
    if backward_start.size:  # in a backward phase: the issue time inside one of the merged backward spans
        at = np.searchsorted(backward_start, issued, side="right") - 1
        inside = (at >= 0) & (issued < backward_end[np.maximum(at, 0)])
        gradient = all_reduce & inside
    else:  # no phase labels (not this project's trace): every all-reduce
        gradient = all_reduce
    gradient &= counted
    by_kind: dict[str, int] = {}
    if gradient.any():
        by_kind[GRADIENT_ALL_REDUCE] = int(gradient.sum())
    for kind in kinds[counted & ~gradient].tolist():
        by_kind[kind] = by_kind.get(kind, 0) + 1
    result.calls_by_kind = by_kind
    result.gradient_calls = int(gradient.sum())
    result.synced_steps = int(np.unique(step_of[gradient]).size)
    result.other_calls_per_step = (result.collective_calls - result.gradient_calls) / result.steps
    if result.optimizer_steps:
        result.calls_per_optimizer_step = result.gradient_calls / result.optimizer_steps
    return gradient


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
    kinds = np.array([collective_kind(trace.names[int(i)]) for i in acts.name_id[comm]], dtype=object)
    return (
        "nccl",
        start[comm],
        end[comm],
        start[compute],
        end[compute],
        step_of[comm],
        step_of[compute],
        window_steps,
        kinds,
        launch[comm],
    )


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
        np.array([collective_kind(trace.names[int(i)]) for i in trace.name_id[order]], dtype=object),
        trace.ts[order],
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


def _cross_rank_waits(
    analysis: CommunicationAnalysis, spans: list[_Spans], activities: list[list[StepActivity]]
) -> None:
    """Each matched collective ends together on every rank, after its latency (the shortest of the ranks'
    durations); the rest of a rank's duration it waited for a peer. A rank's step is held back by its longest
    wait in the step: DDP's buckets of one backward all wait for the same late peer, concurrently and staggered
    beside the rank's compute, so a sum (or a union) over buckets would count one delay once per bucket, and
    the last collective to end can be a small one issued after the buckets, when every rank has arrived.
    Then each step is judged on its own (judge_steps)."""
    durations = [d for _, d, _, _ in spans]
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
    analysis.matched_collectives = int(table.shape[1])
    steps = min(r.steps for r in analysis.ranks)
    waits = np.zeros((len(spans), steps))  # rank x step: the longest wait of the step
    in_backward = np.zeros_like(waits)  # ... of its gradient all-reduces (inside the backward phase)
    elsewhere = np.zeros_like(waits)  # ... of its other collectives
    for i, (_, duration, step, gradient) in enumerate(spans):
        wait = duration - latency
        for target, chosen in ((waits, slice(None)), (in_backward, gradient), (elsewhere, ~gradient)):
            np.maximum.at(target[i], step[chosen][step[chosen] < steps], wait[chosen][step[chosen] < steps])
    for rank, row in zip(analysis.ranks, waits, strict=True):
        rank.wait_time_us = float(row.sum())
        rank.wait_pct = _pct(rank.wait_time_us, rank.step_time_us)
        rank.wait_ms_by_step = (row / 1000).tolist()
    step_us = np.array([r.step_ms_by_step[:steps] for r in analysis.ranks]) * 1000
    boundary = np.array([any(a[j].boundary for a in activities if j < len(a)) for j in range(steps)], dtype=bool)
    judged = judge_steps(waits, step_us, boundary)
    analysis.lead_threshold_ms = judged.threshold_us / 1000
    steady = ~boundary
    if steady.any():
        totals = waits[:, steady].sum(axis=1)
        spread_per_step = float(totals.max() - totals.min()) / int(steady.sum())
        analysis.wait_spread_pct = _pct(spread_per_step, float(step_us[:, steady].mean()))
    gloo = analysis.ranks[0].found_from == FROM_GLOO_SPANS  # the training thread blocks in its collectives
    comparable = [
        [_comparable(a[j].ms if j < len(a) else {}, in_backward[i, j], elsewhere[i, j], gloo) for j in range(steps)]
        for i, a in enumerate(activities)
    ]
    numbers = [a.step for a in activities[0][:steps]] if activities and activities[0] else list(range(steps))
    if judged.straggler is not None:
        held = [j for j in range(steps) if steady[j] and judged.holder[j] == judged.straggler]
        extras = [_extra(comparable, judged.straggler, j) for j in held]
        names_done = sorted({name for extra in extras for name in extra})
        analysis.straggler = Straggler(
            rank=analysis.ranks[judged.straggler].rank,
            steps_held=len(held),
            steady_steps=int(steady.sum()),
            median_lead_ms=float(judged.median_lead_us or 0.0) / 1000,
            extra_ms={name: float(np.median([e.get(name, 0.0) for e in extras])) for name in names_done},
        )
        analysis.waited_for_rank = analysis.straggler.rank
    for j in range(steps):
        holder = int(judged.holder[j])
        if holder < 0 or (steady[j] and holder == judged.straggler):
            continue
        extra = _extra(comparable, holder, j)
        top = max(extra, key=extra.__getitem__, default="")
        analysis.stalls.append(
            Stall(
                step=numbers[j],
                rank=analysis.ranks[holder].rank,
                lead_ms=float(judged.lead_us[j]) / 1000,
                boundary=bool(boundary[j]),
                activity=top if top and extra[top] > 0 else "",
                activity_ms=float(max(extra[top], 0.0)) if top else 0.0,
            )
        )


def stall_text(stall: Stall) -> str:
    """`step <n> (epoch boundary): rank <r>, <lead> ms, <what the rank was doing> (+<its time> ms)`."""
    doing = stall.doing + (f" (+{stall.activity_ms:,.0f} ms)" if stall.activity else "")
    where = " (epoch boundary)" if stall.boundary else ""
    return f"step {stall.step}{where}: rank {stall.rank}, {stall.lead_ms:,.0f} ms, {doing}"


def who_waits_text(comm: CommunicationAnalysis) -> str:
    """The step-by-step judgement in words: the steady steps, the threshold, the straggler or why there is none,
    and the stalls reported apart."""
    steps = comm.steady_steps + len(comm.boundary_steps)
    parts = [f"{comm.steady_steps} steady step(s) of {steps}"]
    if comm.boundary_steps:
        parts[0] += f" ({', '.join(f'ProfilerStep#{n}' for n in comm.boundary_steps)} held an epoch boundary)"
    text = (
        f"{parts[0]}; a step counts as held back by one rank when the others waited for it at least "
        f"{comm.lead_threshold_ms or 0.0:,.1f} ms longer than it waited."
    )
    straggler = comm.straggler
    if straggler is not None:
        done = {k: v for k, v in straggler.extra_ms.items() if v > 0}
        top = max(done, key=done.__getitem__, default=None)
        text += (
            f" Straggler: rank {straggler.rank}, the rank the others waited for in {straggler.steps_held} of "
            f"{straggler.steady_steps} steady steps, a median {straggler.median_lead_ms:,.1f} ms per step"
            + (f" (beyond its peers: {ACTIVITY_TEXT.get(top, top)} +{done[top]:,.0f} ms)" if top else "")
            + "."
        )
    elif comm.steady_steps < MIN_STEADY_STEPS:
        text += f" No straggler is judged on fewer than {MIN_STEADY_STEPS} steady steps."
    else:
        text += " No straggler: no rank held the others back in most steady steps by more than their noise."
    if comm.stalls:
        text += " Stalls, reported apart (never in a straggler's score): " + "; ".join(map(stall_text, comm.stalls))
        text += "."
    return text


def _comparable(ms: dict[str, float], backward_wait_us: float, other_wait_us: float, gloo: bool) -> dict[str, float]:
    """A step's activities with the rank's own waits for its peers taken out where its training thread sat in
    them (gloo: the backward phase holds its gradient all-reduces, an epoch's end its broadcasts), so that what
    a rank did more than its peers is its own work, not the time it waited for theirs."""
    out = dict(ms)
    if gloo:
        if "backward" in out:
            out["backward"] = max(out["backward"] - backward_wait_us / 1000, 0.0)
        if EPOCH_END in out:
            out[EPOCH_END] = max(out[EPOCH_END] - other_wait_us / 1000, 0.0)
    return out


def _extra(comparable: list[list[dict[str, float]]], rank: int, step: int) -> dict[str, float]:
    """What rank `rank` did in step `step` beyond its peers: each activity's ms less the median of theirs."""
    own = comparable[rank][step]
    peers = [comparable[r][step] for r in range(len(comparable)) if r != rank]
    names_done = sorted(set(own).union(*peers))
    return {
        name: own.get(name, 0.0) - float(np.median([p.get(name, 0.0) for p in peers])) if peers else 0.0
        for name in names_done
    }


@dataclass
class StepJudgement:
    threshold_us: float  # a rank's lead a step needs to count as held back by it (a stall's)
    holder: np.ndarray  # per step: index of the rank the others waited for, -1 when no rank led by the threshold
    lead_us: np.ndarray  # per step: the largest lead of any rank (the holder's, when there is one)
    straggler: int | None  # index of the straggler among the ranks, None when there is none
    median_lead_us: float | None  # the straggler's median lead over the steady steps


def judge_steps(waits_us: np.ndarray, step_us: np.ndarray, boundary: np.ndarray) -> StepJudgement:
    """Who held each step back, and the straggler, from each rank's wait in each step (ranks x steps, us), each
    rank's step times (ranks x steps, us) and which steps held an epoch boundary.

    - A rank's lead in a step is the median of the other ranks' waits in it less its own wait: how much longer
      the others waited than it did. In each step the rank with the largest positive lead is the one the others
      waited for.
    - Noise: sigma, the ranks' step-to-step jitter of their own work (step time less wait) over the steady steps
      (the steps without an epoch boundary), from the differences between a rank's consecutive steady steps:
      1.4826 x their median absolute value / sqrt(2), pooled over ranks (a rank's constant lead, or a slow
      rank's constant work, cancels out of them). A lead between two ranks has noise sqrt(2) x sigma.
    - The straggler is the rank with the largest median lead over the steady steps, when the others waited for
      it in more than half of them (at least MIN_STEADY_STEPS steady steps), and its median lead reaches
      max(STRAGGLER_MIN_LEAD_PCT % of the median steady step, t x 1.2533 x sqrt(2) x sigma / sqrt(steady
      steps)): t the one-sided STRAGGLER_ALPHA/ranks quantile of Student's t with as many degrees of freedom as
      differences (1.2533: a median's standard error over a mean's, normal noise). Boundary steps never count
      towards it.
    - A stall is a step the others waited for one rank by at least the step threshold, max(STRAGGLER_MIN_LEAD_PCT
      % of the median steady step, STRAGGLER_NOISE_SDS x sqrt(2) x sigma), and that is not a steady step of the
      straggler's: every boundary step so held, and a steady step held once by another rank.
    Error rates by simulation: tests/analysis/test_straggler_rule.py, benchmarks/bench_straggler_rule.py."""
    from scipy.special import stdtrit

    ranks, steps = waits_us.shape
    steady = ~np.asarray(boundary, dtype=bool)
    n_steady = int(steady.sum())
    lead = np.zeros((ranks, steps))
    for r in range(ranks):
        others = np.delete(waits_us, r, axis=0)
        if others.size:
            lead[r] = np.median(others, axis=0) - waits_us[r]
    basis = steady if n_steady else np.ones(steps, dtype=bool)
    floor = STRAGGLER_MIN_LEAD_PCT / 100 * float(np.median(step_us[:, basis])) if steps else 0.0
    differences = np.diff((step_us - waits_us)[:, steady], axis=1).ravel()
    sigma = 1.4826 * float(np.median(np.abs(differences))) / np.sqrt(2.0) if differences.size else 0.0
    step_threshold = max(floor, STRAGGLER_NOISE_SDS * np.sqrt(2.0) * sigma)
    best = np.argmax(lead, axis=0) if steps else np.zeros(0, dtype=int)
    best_lead = lead[best, np.arange(steps)]
    holder = np.where((best_lead >= step_threshold) & (best_lead > 0), best, -1)
    straggler, median_lead = None, None
    if ranks >= 2 and n_steady >= MIN_STEADY_STEPS:
        medians = np.median(lead[:, steady], axis=1)
        candidate = int(np.argmax(medians))
        led = int(((best == candidate) & (best_lead > 0) & steady).sum())
        t = float(stdtrit(differences.size, 1 - STRAGGLER_ALPHA / ranks)) if differences.size else np.inf
        needed = max(floor, t * 1.2533 * np.sqrt(2.0) * sigma / np.sqrt(n_steady))
        if 2 * led > n_steady and medians[candidate] >= needed:
            straggler, median_lead = candidate, float(medians[candidate])
    return StepJudgement(float(step_threshold), holder, best_lead, straggler, median_lead)


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
