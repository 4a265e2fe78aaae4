"""Paired (block) comparison of a variant with the baseline over several lanes (GPUs, machines).

A *lane* is one GPU of one machine ("0", "m1/0"); a *block* is one child of the baseline and one of every
variant, run whole on one lane. Lanes differ (a slower GPU, a busier host), and a pooled comparison would mix
that difference into the speed-up as soon as the groups are spread unevenly over lanes (a failed child is
enough). Within a block both children ran on the same lane at nearly the same time, so a lane's speed cancels
out of the block's ratio.

The speed-up is the geometric mean of the paired blocks' throughput ratios. Its interval is a bootstrap over
blocks stratified by lane, rescaled for the few blocks sweeps have and never narrower than Student's t interval
on the pooled within-lane spread. Each lane gets its own speed-up and interval, and the lanes whose speed-up
differs from the others' beyond noise are flagged, step-down at `LANE_ALPHA` per sweep (`lane_tests`). The
estimator, the interval, the special cases and their measured coverage and false flags: docs/sweeps.md
("Paired comparison over lanes").
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np

from yolo_mlops.stats import pooled_noise, shift_t, stratified_bootstrap_interval, t_quantile
from yolo_mlops.sweeps import stats


@dataclass(frozen=True)
class BlockRepeat:
    """One child that counted: its lane, its block and its steady steps."""

    lane: str  # "0", "1" (device of this machine) or "m1/0" (machine/device)
    block: int  # block index within the sweep; blocks are numbered globally and each runs on one lane
    variant: str
    repeat: stats.Repeat


@dataclass(frozen=True)
class LaneComparison:
    """The variant against the baseline on one lane only."""

    lane: str
    blocks: int  # paired blocks on this lane
    speedup: float  # geometric mean of the lane's block ratios
    ci_low: float
    ci_high: float
    verdict: stats.Verdict  # of the lane's own interval
    disagrees: bool  # differs from the other lanes beyond noise, corrected over lanes (module doc, Lanes)
    method: str
    pvalue: float | None = None  # the lane against the other lanes, adjusted over lanes; None: not testable


@dataclass(frozen=True)
class PairedComparison:
    """The variant against the baseline, paired by block and pooled over lanes."""

    speedup: float  # geometric mean over the paired blocks of throughput(variant) / throughput(baseline)
    ci_low: float
    ci_high: float
    step_time_ratio: float  # geometric mean over the paired blocks of the median-step-time ratio
    verdict: stats.Verdict
    method: str  # one line naming the estimator, the interval and what was dropped
    blocks: int  # paired blocks
    dropped: int  # blocks with a child of only one side
    lanes: list[LaneComparison]


@dataclass(frozen=True)
class PairedBlock:
    """One block with both sides: its log throughput ratio and log median-step-time ratio."""

    lane: str
    block: int
    baseline: list[stats.Repeat]
    variant: list[stats.Repeat]

    @property
    def log_ratio(self) -> float:
        return math.log(stats.summarise(self.variant).images_per_s / stats.summarise(self.baseline).images_per_s)

    @property
    def log_step_ratio(self) -> float:
        return math.log(stats.summarise(self.variant).median_step_ms / stats.summarise(self.baseline).median_step_ms)


def compare_paired(
    baseline: list[BlockRepeat],
    variant: list[BlockRepeat],
    *,
    resamples: int = stats.DEFAULT_RESAMPLES,
    seed: int = stats.DEFAULT_SEED,
    confidence: float = stats.CONFIDENCE,
) -> PairedComparison:
    """Speed-up of `variant` over `baseline` from their children paired by block, with a CI over blocks.

    Raises ValueError when no block has both a baseline and a variant child, or when the children say
    that one block ran on two lanes.
    """
    paired, dropped = pair_blocks(baseline, variant)
    if not paired:
        raise ValueError(f"no block has both a baseline and a variant child ({dropped} blocks with one side only)")
    speedup, low, high, how = _interval(paired, resamples, np.random.default_rng(seed), confidence)
    pooled = stats.verdict(low, high)
    lane_names = sorted({b.lane for b in paired}, key=_natural)
    by_lane = {name: np.array([b.log_ratio for b in paired if b.lane == name]) for name in lane_names}
    adjusted, flagged, tested = lane_tests(by_lane)
    noise = pooled_noise(list(by_lane.values()))
    df = noise.df
    lanes = []
    for i, name in enumerate(lane_names):
        own = [b for b in paired if b.lane == name]
        if df >= 1:
            mean = float(by_lane[name].mean())
            half = t_quantile(1.0 - (1.0 - confidence) / 2.0, df) * noise.sd / math.sqrt(len(own))
            l_speedup, l_low, l_high = math.exp(mean), math.exp(mean - half), math.exp(mean + half)
            l_how = f"t interval, run-to-run noise pooled within lanes ({df} df), {confidence:.0%}; {tested}"
        else:
            l_speedup, l_low, l_high, l_how = _interval(
                own, resamples, np.random.default_rng([seed, i + 1]), confidence
            )
            l_how = f"{l_how}; {tested}"
        lanes.append(
            LaneComparison(
                lane=name,
                blocks=len(own),
                speedup=l_speedup,
                ci_low=l_low,
                ci_high=l_high,
                verdict=stats.verdict(l_low, l_high),
                disagrees=name in flagged,
                method=l_how,
                pvalue=adjusted.get(name),
            )
        )
    n_lanes = len(lane_names)
    method = f"paired by block on {n_lanes} lane{'s' * (n_lanes != 1)}, {len(paired)} block{'s' * (len(paired) != 1)}"
    if dropped:
        method += f" ({dropped} unpaired dropped)"
    return PairedComparison(
        speedup=speedup,
        ci_low=low,
        ci_high=high,
        step_time_ratio=math.exp(float(np.mean([b.log_step_ratio for b in paired]))),
        verdict=pooled,
        method=f"{method}; {how}",
        blocks=len(paired),
        dropped=dropped,
        lanes=lanes,
    )


def pair_blocks(baseline: list[BlockRepeat], variant: list[BlockRepeat]) -> tuple[list[PairedBlock], int]:
    """The blocks with a child of both sides (ordered by block index), and how many blocks had one side only.

    Several children of one side in one block (a retried child that also counted) are summarised like the
    repeats of `stats.summarise` (median throughput).
    """
    lane_of: dict[int, str] = {}
    sides: dict[int, tuple[list[stats.Repeat], list[stats.Repeat]]] = {}
    for side, children in enumerate((baseline, variant)):
        for child in children:
            lane = lane_of.setdefault(child.block, child.lane)
            if lane != child.lane:
                raise ValueError(
                    f"block {child.block} has children on two lanes ({lane!r} and {child.lane!r}); "
                    "a block runs whole on one lane"
                )
            sides.setdefault(child.block, ([], []))[side].append(child.repeat)
    paired = [PairedBlock(lane_of[b], b, base, var) for b, (base, var) in sorted(sides.items()) if base and var]
    return paired, len(sides) - len(paired)


LANE_ALPHA = 0.05  # family-wise over a variant's lanes: the chance any lane is flagged without a lane effect


def lane_tests(by_lane: dict[str, np.ndarray], alpha: float = LANE_ALPHA) -> tuple[dict[str, float], set[str], str]:
    """(adjusted p per lane, the lanes flagged, a line saying how) for lanes differing from the other lanes.

    Step-down: each lane still in the test against the others still in it (Student's t, the noise pooled within
    all lanes); the smallest p times the lanes still in the test (the running maximum of those) is the lane's
    adjusted p, and the lane is flagged and leaves the reference when it is <= alpha; repeated while three or
    more lanes remain. Two lanes are one comparison (no factor), both flagged when they differ."""
    names = list(by_lane)
    noise = pooled_noise(list(by_lane.values()))
    df = noise.df
    if len(names) < 2:
        return {}, set(), "one lane: nothing to compare it with"
    if df < 1 or not noise.sd > 0:
        why = "every lane has one block" if df < 1 else "no spread within lanes"
        return {}, set(), f"lanes not compared: too few blocks ({why}: no run-to-run noise to test with)"
    active, adjusted, flagged, running = list(names), {}, set(), 0.0
    while len(active) >= 2:
        pvalues = {}
        for name in active:
            own = by_lane[name]
            rest = np.concatenate([by_lane[o] for o in active if o != name])
            pvalues[name] = shift_t(rest, own, noise)
        factor = len(active) if len(active) > 2 else 1
        if len(active) == 2:  # one comparison: both lanes or neither
            p = min(1.0, max(running, min(pvalues.values())))
            adjusted.update(dict.fromkeys(active, p))
            if p <= alpha:
                flagged.update(active)
            break
        worst = min(active, key=lambda n: (pvalues[n], names.index(n)))
        running = min(1.0, max(running, pvalues[worst] * factor))
        adjusted[worst] = running
        if running > alpha:
            adjusted.update({n: min(1.0, max(running, pvalues[n] * factor)) for n in active if n != worst})
            break
        flagged.add(worst)
        active.remove(worst)
    how = (
        f"lanes against the other lanes: t test, noise pooled within lanes ({df} df), step-down over "
        f"{len(names)} lanes at {alpha:g} family-wise"
    )
    return adjusted, flagged, how


def _interval(
    paired: list[PairedBlock], resamples: int, rng: np.random.Generator, confidence: float
) -> tuple[float, float, float, str]:
    """(speed-up, ci_low, ci_high, method) for these blocks; the point estimate always lies inside."""
    if len(paired) == 1:
        speedup, low, high, how = _one_block_interval(paired[0], resamples, rng, confidence)
    else:
        speedup, low, high, how = _blocks_interval(paired, resamples, rng, confidence)
    # A point estimate outside its own percentile interval can happen with tiny samples; widen to include it.
    return speedup, min(low, speedup), max(high, speedup), how


def _one_block_interval(
    block: PairedBlock, resamples: int, rng: np.random.Generator, confidence: float
) -> tuple[float, float, float, str]:
    """The step-level (two-level, with several children) bootstrap of the one pair, as `stats.compare` does."""
    alpha = (1.0 - confidence) / 2.0
    ratios = stats.bootstrap_throughput(block.variant, resamples, rng) / stats.bootstrap_throughput(
        block.baseline, resamples, rng
    )
    low, high = (float(x) for x in np.quantile(ratios, [alpha, 1.0 - alpha]))
    how = f"one block: step-level bootstrap within it, {confidence:.0%} (run-to-run noise not covered)"
    return math.exp(block.log_ratio), low, high, how


def _blocks_interval(
    paired: list[PairedBlock], resamples: int, rng: np.random.Generator, confidence: float
) -> tuple[float, float, float, str]:
    """Geometric mean of the block ratios, CI from the lane-stratified block bootstrap (module docstring)."""
    found = stratified_bootstrap_interval(
        np.array([b.log_ratio for b in paired]), _strata(paired), resamples, rng, confidence
    )
    if not found.stratified:
        over = "one block per lane: bootstrap over blocks, not stratified (lane differences count as noise)"
    else:
        over = "bootstrap over blocks stratified by lane" if found.strata > 1 else "bootstrap over blocks"
    how = f"{over}, percentile of log ratios scaled to t with {found.df} df (at least the t interval), {confidence:.0%}"
    return math.exp(found.mean), math.exp(found.low), math.exp(found.high), how


def _strata(paired: list[PairedBlock]) -> list[np.ndarray]:
    """Indices of the blocks of each lane."""
    lanes: dict[str, list[int]] = {}
    for i, block in enumerate(paired):
        lanes.setdefault(block.lane, []).append(i)
    return [np.array(idx) for idx in lanes.values()]


def _natural(name: str) -> list[str | int]:
    """Sort key putting lane "2" before "10" and "m1/2" before "m1/10"."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name)]
