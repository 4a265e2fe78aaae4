"""Detection power per series: the smallest step in a metric that the detector confirms within one night.

The detector reports a new level when the merge step's Student's t test of the segment before against
tonight's runs, corrected for the choice of the split (p x (m + k - 1) for m runs before and k tonight),
reaches `max_pvalue`. For a step of delta in noise of standard deviation sigma that statistic follows a
noncentral t distribution (m + k - 2 degrees of freedom, noncentrality delta / (sigma sqrt(1/m + 1/k))), so
the step it finds with probability `power` (0.9) is solved for directly (`min_detectable_shift`). sigma is
robust: 1.4826 x the median absolute deviation of the recent segment (the runs since the last level change,
drift removed), so one outlier does not blind the estimate. `simulate` checks the figure against the
detector itself (benchmarks/bench_verdicts.py, tests/trends/test_verdicts.py).

A night of k runs cannot show a step at all when k < 2 (a one-run segment is never a level).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
from scipy import optimize, stats

from yolo_mlops.trends import changepoint

DEFAULT_POWER = 0.9
MAX_RECENT = 200  # runs of the recent segment that set the noise and the history length m


@dataclass(frozen=True)
class MinDetectable:
    metric: str
    shift_pct: float  # smallest relative step found with probability `power` within one night; inf if none
    noise_pct: float  # robust run-to-run noise, % of the level
    history_runs: int  # m: runs of the recent segment
    repeats: int  # k: runs a night
    power: float = DEFAULT_POWER


def robust_noise(values) -> tuple[float, float]:
    """(level, sigma): the median and 1.4826 x the median absolute deviation."""
    z = np.asarray(values, dtype=float)
    level = float(np.median(z))
    return level, float(1.4826 * np.median(np.abs(z - level)))


def min_detectable_shift(
    noise_pct: float,
    history_runs: int,
    repeats: int,
    max_pvalue: float = changepoint.DEFAULT_MAX_PVALUE,
    power: float = DEFAULT_POWER,
) -> float:
    """Smallest step (same unit as noise_pct) the corrected t test finds with probability `power`."""
    m, k = int(history_runs), int(repeats)
    if m < 2 or k < 2:
        return float("inf")
    if noise_pct <= 0:
        return 0.0
    return float(_noncentrality(m, k, float(max_pvalue), float(power)) * noise_pct * np.sqrt(1.0 / m + 1.0 / k))


@functools.lru_cache(maxsize=4096)
def _noncentrality(m: int, k: int, max_pvalue: float, power: float) -> float:
    """The noncentrality the corrected t test (m runs before, k tonight) reaches `power` at: the same for every
    metric and operator series of one history length, so it is solved once."""
    df = m + k - 2
    alpha = min(1.0, max_pvalue / (m + k - 1))
    crit = stats.t.isf(alpha / 2, df)

    # the noncentral t's tails, averaged over the chi-square of the noise estimate (scipy's nct returns nan
    # this far in the tail): P(|Z + ncp| > crit sqrt(V / df)), V ~ chi2(df), on 2,000 quantiles of V
    scale = crit * np.sqrt(stats.chi2.ppf((np.arange(2000) + 0.5) / 2000, df) / df)

    def miss(ncp: float) -> float:
        return float(np.mean(stats.norm.sf(scale - ncp) + stats.norm.cdf(-scale - ncp))) - power

    upper = 2.0 * crit + 10.0
    while miss(upper) < 0:
        upper *= 2
    return float(optimize.brentq(miss, 0.0, upper, xtol=1e-6))


def for_values(
    metric: str, recent, repeats: int, max_pvalue: float = changepoint.DEFAULT_MAX_PVALUE, power: float = DEFAULT_POWER
) -> MinDetectable:
    """The minimum detectable shift of a metric whose recent segment is `recent` (drift removed)."""
    z = np.asarray(recent, dtype=float)[-MAX_RECENT:]
    level, sigma = robust_noise(z) if len(z) else (float("nan"), float("nan"))
    noise_pct = 100.0 * sigma / abs(level) if level else float("nan")
    shift = (
        min_detectable_shift(noise_pct, len(z), repeats, max_pvalue, power) if np.isfinite(noise_pct) else float("inf")
    )
    return MinDetectable(metric, shift, noise_pct, len(z), int(repeats), power)


def for_trend(trend, repeats: int, max_pvalue: float | None = None) -> list[MinDetectable]:
    """Per watched metric of a SeriesTrend: its minimum detectable shift with `repeats` runs a night."""
    p = trend.settings.max_pvalue if max_pvalue is None else max_pvalue
    return [for_values(m.metric, recent_segment(m), repeats, p) for m in trend.metrics]


def for_operators(trend, repeats: int, max_pvalue: float | None = None) -> list[MinDetectable]:
    """Per operator series of a SeriesTrend: its minimum detectable shift with `repeats` runs a night."""
    p = trend.settings.max_pvalue if max_pvalue is None else max_pvalue
    return [for_values(m.metric, recent_segment(m), repeats, p) for m in trend.operators]


def recent_segment(m) -> np.ndarray:
    """The metric's runs since its last level change, with the fitted drift removed."""
    z = np.asarray(m.values, dtype=float)
    lo = m.segments[-1].start if m.segments else 0
    recent = z[lo:].copy()
    if m.drift is not None and m.drift.fit.start <= lo:
        recent -= m.drift.fit.slope * np.arange(len(recent))
    return recent


AUTO_POWER = 0.95  # repeats='auto': the share of nights the target step is opened in, above the goal for alerts
# so that the confirmation runs (which miss a few) still leave it met (docs/trends.md, "Detection power")


def repeats_needed(
    noise_pct: float,
    history_runs: int,
    target_pct: float,
    max_repeats: int,
    max_pvalue: float = changepoint.DEFAULT_MAX_PVALUE,
    power: float = AUTO_POWER,
) -> tuple[int, bool]:
    """(repeats, reachable): the fewest runs a night (2 .. max_repeats) that find a step of target_pct with
    probability `power`; (max_repeats, False) when even the cap cannot reach it."""
    for k in range(2, max(int(max_repeats), 2) + 1):
        if min_detectable_shift(noise_pct, history_runs, k, max_pvalue, power) <= target_pct:
            return k, True
    return max(int(max_repeats), 2), False


def simulate(
    noise_pct: float,
    history_runs: int,
    repeats: int,
    shift_pct: float,
    seeds: int,
    max_pvalue: float = changepoint.DEFAULT_MAX_PVALUE,
    heavy_tails: bool = False,
) -> float:
    """Share of generated histories (level 100, Gaussian or t(3) noise) whose step of shift_pct at the start of
    the night's `repeats` runs the detector reports (a change point within one run of it)."""
    hits = 0
    for seed in range(seeds):
        rng = np.random.default_rng(seed)
        n = history_runs + repeats
        noise = rng.standard_t(3, n) / np.sqrt(3.0) if heavy_tails else rng.standard_normal(n)
        z = 100.0 + noise_pct * noise
        z[history_runs:] += shift_pct
        cps = changepoint.detect(z, max_pvalue=max_pvalue)
        hits += any(abs(cp.index - history_runs) <= 1 for cp in cps)
    return hits / seeds
