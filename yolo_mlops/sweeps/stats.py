"""Sweep statistics: per-variant throughput, speed-up vs baseline with a bootstrap 95% CI, verdicts.

Input is the per-step timing of every repeat (steady steps only: warm-up and profiler-window steps already
removed by the caller). Pure numpy, seeded: the same samples always give the same interval.

Why a two-level (hierarchical) bootstrap
----------------------------------------
Steps inside one repeat are not independent: they share one process, one allocator state, one data-loader
pool, one thermal state, one set of background load. Pooling all steps of all repeats and resampling them
as if independent gives intervals that are far too narrow (it treats 3 x 50 correlated steps as 150
independent measurements). Resampling only the per-repeat summaries is honest about between-run variation,
but with the usual 2-3 repeats it has only a handful of distinct resamples. The two-level bootstrap does
both: each resample draws the repeats with replacement, then draws the steps *within* each drawn repeat
with replacement, and recomputes the repeat's throughput. With one repeat it degrades to the step-level
bootstrap (the report says so: the interval then covers only step-to-step noise, not run-to-run noise).

The statistic is throughput (images/s = images / time over the steady steps of a repeat); a group's value
is the median over its repeats; speed-up = median throughput(variant) / median throughput(baseline), so
batch-size variants (longer steps, more images) are compared fairly. The ratio of median step times is
reported next to it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from yolo_mlops.stats import two_level_bootstrap_medians

DEFAULT_RESAMPLES = 2000
DEFAULT_SEED = 20240601
CONFIDENCE = 0.95

Verdict = Literal["faster", "slower", "no measurable difference"]  # what a speed-up's confidence interval shows
FASTER: Verdict = "faster"
SLOWER: Verdict = "slower"
SAME: Verdict = "no measurable difference"


@dataclass
class Repeat:
    """The steady steps of one child run."""

    step_ms: np.ndarray
    images: np.ndarray
    metrics: dict[str, float] = field(default_factory=dict)  # the child's summary metrics (loss, mAP, gpu/*)

    def __post_init__(self) -> None:
        self.step_ms = np.asarray(self.step_ms, dtype=float)
        self.images = np.broadcast_to(np.asarray(self.images, dtype=float), self.step_ms.shape).copy()
        if len(self.step_ms) == 0:
            raise ValueError("a repeat needs at least one steady step")
        if (self.step_ms <= 0).any():
            raise ValueError("step times must be positive")

    @property
    def images_per_s(self) -> float:
        return float(self.images.sum() / (self.step_ms.sum() / 1e3))

    @property
    def median_step_ms(self) -> float:
        return float(np.median(self.step_ms))


@dataclass(frozen=True)
class GroupSummary:
    median_step_ms: float
    images_per_s: float


@dataclass(frozen=True)
class Comparison:
    speedup: float  # median throughput ratio variant / baseline
    ci_low: float
    ci_high: float
    step_time_ratio: float  # median step time variant / baseline (< 1 = shorter steps)
    verdict: Verdict
    method: str


def summarise(repeats: list[Repeat]) -> GroupSummary:
    return GroupSummary(
        median_step_ms=float(np.median([r.median_step_ms for r in repeats])),
        images_per_s=float(np.median([r.images_per_s for r in repeats])),
    )


def bootstrap_throughput(repeats: list[Repeat], resamples: int, rng: np.random.Generator) -> np.ndarray:
    """`resamples` draws of the group's median throughput under the two-level bootstrap (repeats, then steps)."""
    return two_level_bootstrap_medians([(r.images, r.step_ms) for r in repeats], _images_per_s, resamples, rng)


def _images_per_s(images: np.ndarray, step_ms: np.ndarray) -> np.ndarray:
    return images / (step_ms / 1e3)


def compare(
    baseline: list[Repeat],
    variant: list[Repeat],
    *,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
    confidence: float = CONFIDENCE,
) -> Comparison:
    if not baseline or not variant:
        raise ValueError("both groups need at least one repeat")
    rng = np.random.default_rng(seed)
    base, var = summarise(baseline), summarise(variant)
    ratios = bootstrap_throughput(variant, resamples, rng) / bootstrap_throughput(baseline, resamples, rng)
    alpha = (1.0 - confidence) / 2.0
    low, high = (float(x) for x in np.quantile(ratios, [alpha, 1.0 - alpha]))
    speedup = var.images_per_s / base.images_per_s
    # A point estimate outside its own percentile interval can happen with tiny samples; widen to include it.
    low, high = min(low, speedup), max(high, speedup)
    return Comparison(
        speedup=speedup,
        ci_low=low,
        ci_high=high,
        step_time_ratio=var.median_step_ms / base.median_step_ms,
        verdict=verdict(low, high),
        method=method_label(len(baseline), len(variant)),
    )


def verdict(ci_low: float, ci_high: float) -> Verdict:
    if ci_low > 1.0:
        return FASTER
    if ci_high < 1.0:
        return SLOWER
    return SAME


def method_label(base_repeats: int, var_repeats: int) -> str:
    if min(base_repeats, var_repeats) < 2:
        return "step-level bootstrap (one repeat: run-to-run noise not covered)"
    return "two-level bootstrap (repeats, then steps within repeats)"


# accuracy sanity check ------------------------------------------------------------------------------------------

ACCURACY_REL_FLOOR = 0.02  # the band is at least +- this share of the baseline median wide, so identical repeats do not
#                            flag every last-digit change


@dataclass(frozen=True)
class AccuracyCheck:
    metric: str
    baseline_median: float
    variant_median: float
    delta: float
    band_low: float
    band_high: float
    flagged: bool


def accuracy_check(
    metric: str, baseline_values: list[float], variant_values: list[float], rel_floor: float = ACCURACY_REL_FLOOR
) -> AccuracyCheck | None:
    """Flag a variant whose median `metric` lies outside the baseline repeats' spread (with a small floor).

    Band = [min, max] of the baseline repeats widened by max(half their range, rel_floor x |median|).
    Both runs train on the same fixed schedule (same seed, data, steps), so a variant outside the band
    changed what was learned, not only how fast.
    """
    base, var = _finite(baseline_values), _finite(variant_values)
    if not base or not var:
        return None
    b_med, v_med = float(np.median(base)), float(np.median(var))
    pad = max(0.5 * (max(base) - min(base)), rel_floor * abs(b_med))
    low, high = min(base) - pad, max(base) + pad
    return AccuracyCheck(
        metric=metric,
        baseline_median=b_med,
        variant_median=v_med,
        delta=v_med - b_med,
        band_low=low,
        band_high=high,
        flagged=not (low <= v_med <= high),
    )


def _finite(values: list[float]) -> list[float]:
    return [v for v in values if v is not None and math.isfinite(v)]


def median_delta(baseline_values: list[float], variant_values: list[float]) -> float | None:
    base, var = _finite(baseline_values), _finite(variant_values)
    if not base or not var:
        return None
    return float(np.median(var) - np.median(base))
