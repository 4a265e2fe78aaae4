"""Who held each step of a data-parallel job back: the straggler (the rank the others wait for step after step)
and the stalls (a step held back once, or at an epoch boundary), judged step by step from each rank's waits inside
collectives, with what the holding rank did beyond its peers. The rule and its error rates: docs/ddp.md ("Who
waits for whom").
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from yolo_mlops.analysis.step_activity import ACTIVITY_TEXT

# a lead below this share of the median step is never a straggler's or a stall's, however quiet the ranks are
STRAGGLER_MIN_LEAD_PCT = 5.0
# a stall's lead is at least this many standard deviations of a lead's noise (the ranks' own step-to-step jitter,
# see judge_steps): a one-sided normal tail this far out, so the jitter of two ranks' work alone rarely makes one
STRAGGLER_NOISE_SDS = 3.0
STRAGGLER_ALPHA = 0.05  # a straggler's median lead: the one-sided level of its test, shared over the ranks
MIN_STEADY_STEPS = 2  # fewer steady steps than this: no straggler is named (stalls are still reported)


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


def extra_over_peers(comparable: list[list[dict[str, float]]], rank: int, step: int) -> dict[str, float]:
    """What rank `rank` did in step `step` beyond its peers: each activity's ms less the median of theirs."""
    own = comparable[rank][step]
    peers = [comparable[r][step] for r in range(len(comparable)) if r != rank]
    names_done = sorted(set(own).union(*peers))
    return {
        name: own.get(name, 0.0) - float(np.median([p.get(name, 0.0) for p in peers])) if peers else 0.0
        for name in names_done
    }


def straggler_of(
    judged: StepJudgement, comparable: list[list[dict[str, float]]], steady: np.ndarray, rank_ids: list[int]
) -> Straggler | None:
    """The straggler `judge_steps` named, with what it did beyond its peers (median over the steady steps it held
    back); `comparable` holds each rank's activities per step, `rank_ids` each rank index's rank number."""
    if judged.straggler is None:
        return None
    held = [j for j in range(steady.size) if steady[j] and judged.holder[j] == judged.straggler]
    extras = [extra_over_peers(comparable, judged.straggler, j) for j in held]
    names_done = sorted({name for extra in extras for name in extra})
    return Straggler(
        rank=rank_ids[judged.straggler],
        steps_held=len(held),
        steady_steps=int(steady.sum()),
        median_lead_ms=float(judged.median_lead_us or 0.0) / 1000,
        extra_ms={name: float(np.median([e.get(name, 0.0) for e in extras])) for name in names_done},
    )


def stalls_of(
    judged: StepJudgement,
    comparable: list[list[dict[str, float]]],
    boundary: np.ndarray,
    rank_ids: list[int],
    numbers: list[int],
) -> list[Stall]:
    """Every step held back by one rank that is not a steady step of the straggler's, with the ProfilerStep
    number of each step (`numbers`) and what the holding rank did beyond its peers in it."""
    steady = ~boundary
    stalls = []
    for j in range(boundary.size):
        holder = int(judged.holder[j])
        if holder < 0 or (steady[j] and holder == judged.straggler):
            continue
        extra = extra_over_peers(comparable, holder, j)
        top = max(extra, key=extra.__getitem__, default="")
        stalls.append(
            Stall(
                step=numbers[j],
                rank=rank_ids[holder],
                lead_ms=float(judged.lead_us[j]) / 1000,
                boundary=bool(boundary[j]),
                activity=top if top and extra[top] > 0 else "",
                activity_ms=float(max(extra[top], 0.0)) if top else 0.0,
            )
        )
    return stalls


def stall_text(stall: Stall) -> str:
    """`step <n> (epoch boundary): rank <r>, <lead> ms, <what the rank was doing> (+<its time> ms)`."""
    doing = stall.doing + (f" (+{stall.activity_ms:,.0f} ms)" if stall.activity else "")
    where = " (epoch boundary)" if stall.boundary else ""
    return f"step {stall.step}{where}: rank {stall.rank}, {stall.lead_ms:,.0f} ms, {doing}"
