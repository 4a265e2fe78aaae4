"""One rank's collectives over its profiled steps: found from NCCL kernels (GPU ranks), `gloo:<collective>` spans
(CPU ranks) or, where a one-rank NCCL job launches no kernel, the host's record of the call (then its time and
exposed time stay None: not measured, never 0). Per rank: collective and exposed time, calls by kind (the
gradient all-reduces of the backward phase apart), message bytes, and the spans `communication` matches across
ranks. What counts as exposed, and collectives by kind: docs/ddp.md ("Communication, per rank").
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
from yolo_mlops.analysis.step_activity import StepActivity, step_activities
from yolo_mlops.analysis.trace_loader import RankTrace
from yolo_mlops.labels import PHASE_LABEL_PREFIX

_GLOO_SPAN_RE = re.compile(r"^gloo:")
_NCCL_ANNOTATION_RE = re.compile(r"^nccl:")
_C10D_OP_RE = re.compile(r"^c10d::")
_PROFILER_STEP_RE = re.compile(r"^ProfilerStep#\d+$")
OPTIMIZER_STEP_LABEL = PHASE_LABEL_PREFIX + "optimizer_step"
BACKWARD_LABEL = PHASE_LABEL_PREFIX + "backward"
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
Spans = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]


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
    # time its steps were held back waiting for other ranks inside collectives (cross-rank: communication.py)
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


def rank_communication(
    trace: RankTrace,
) -> tuple[RankCommunication, Spans | None, list[StepActivity]] | None:
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
        collective_pct=share_pct(comm_us, step_us),
        exposed_pct=share_pct(exposed_us, step_us),
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


def share_pct(part: float, whole: float) -> float:
    """`part` as a percentage of `whole`; 0 when `whole` is not positive."""
    return 100.0 * part / whole if whole > 0 else 0.0
