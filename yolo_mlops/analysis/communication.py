"""Collective communication of a data-parallel job across its ranks: each rank's collectives (collectives.py)
matched across ranks, the k-th collective of every rank being the same one; the time a rank waited inside them for
a slower peer; and who waits for whom, each step judged by `stragglers.judge_steps`. The cross-rank match and the
straggler rule: docs/ddp.md ("Who waits for whom").
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from yolo_mlops.analysis.collectives import FROM_GLOO_SPANS, RankCommunication, Spans, rank_communication, share_pct
from yolo_mlops.analysis.step_activity import ACTIVITY_TEXT, EPOCH_END, StepActivity
from yolo_mlops.analysis.stragglers import (
    MIN_STEADY_STEPS,
    Stall,
    Straggler,
    judge_steps,
    stall_text,
    stalls_of,
    straggler_of,
)
from yolo_mlops.analysis.trace_loader import RankTrace


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
    spans: Spans | None  # None: collectives found from host calls, with no duration to match across ranks
    world_size: int | None  # distributedInfo.world_size
    activities: list[StepActivity] = field(default_factory=list)  # the window's steps, from the phase labels


def rank_collectives(trace: RankTrace) -> RankCollectives | None:
    found = rank_communication(trace)
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


def _cross_rank_waits(
    analysis: CommunicationAnalysis, spans: list[Spans], activities: list[list[StepActivity]]
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
    analysis.matched_collectives = int(table.shape[1])
    steps = min(r.steps for r in analysis.ranks)
    waits, in_backward, elsewhere = _step_waits(spans, table.min(axis=0), steps)
    for rank, row in zip(analysis.ranks, waits, strict=True):
        rank.wait_time_us = float(row.sum())
        rank.wait_pct = share_pct(rank.wait_time_us, rank.step_time_us)
        rank.wait_ms_by_step = (row / 1000).tolist()
    step_us = np.array([r.step_ms_by_step[:steps] for r in analysis.ranks]) * 1000
    boundary = np.array([any(a[j].boundary for a in activities if j < len(a)) for j in range(steps)], dtype=bool)
    judged = judge_steps(waits, step_us, boundary)
    analysis.lead_threshold_ms = judged.threshold_us / 1000
    steady = ~boundary
    if steady.any():
        totals = waits[:, steady].sum(axis=1)
        spread_per_step = float(totals.max() - totals.min()) / int(steady.sum())
        analysis.wait_spread_pct = share_pct(spread_per_step, float(step_us[:, steady].mean()))
    gloo = analysis.ranks[0].found_from == FROM_GLOO_SPANS  # the training thread blocks in its collectives
    comparable = [
        [_comparable(a[j].ms if j < len(a) else {}, in_backward[i, j], elsewhere[i, j], gloo) for j in range(steps)]
        for i, a in enumerate(activities)
    ]
    numbers = [a.step for a in activities[0][:steps]] if activities and activities[0] else list(range(steps))
    rank_ids = [r.rank for r in analysis.ranks]
    analysis.straggler = straggler_of(judged, comparable, steady, rank_ids)
    if analysis.straggler is not None:
        analysis.waited_for_rank = analysis.straggler.rank
    analysis.stalls = stalls_of(judged, comparable, boundary, rank_ids, numbers)


def _step_waits(spans: list[Spans], latency: np.ndarray, steps: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rank x step: the longest wait of each step, of its gradient all-reduces (inside the backward phase), and of
    its other collectives; a collective's wait is its duration less `latency`, the shortest of the ranks'."""
    waits = np.zeros((len(spans), steps))
    in_backward = np.zeros_like(waits)
    elsewhere = np.zeros_like(waits)
    for i, (_, duration, step, gradient) in enumerate(spans):
        wait = duration - latency
        for target, chosen in ((waits, slice(None)), (in_backward, gradient), (elsewhere, ~gradient)):
            np.maximum.at(target[i], step[chosen][step[chosen] < steps], wait[chosen][step[chosen] < steps])
    return waits, in_backward, elsewhere


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
