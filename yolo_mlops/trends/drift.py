"""A slow drift as one drift, not a staircase of change points: Theil-Sen slope with Mann-Kendall significance.

Pure functions over numpy arrays (the tests themselves are `yolo_mlops.stats`'); no I/O, no randomness.
`analyze` finds the steps first, then tests the runs from each possible start of a drift for a trend within the
segments the steps leave; a significant drift is kept when the detrended series needs fewer change points than
the raw one did. Mann-Kendall is not corrected for autocorrelation; its false-alarm rates are measured instead.
The steps of the method, and those rates: docs/trends.md ("Drift").
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import pairwise

import numpy as np

from yolo_mlops.stats import mann_kendall, mann_kendall_block, mann_kendall_pvalue, pair_slopes, theil_sen
from yolo_mlops.trends import changepoint
from yolo_mlops.trends.changepoint import ChangePoint

DEFAULT_DRIFT_PVALUE = 0.001  # as the change-point test's default
MIN_DRIFT_POINTS = 8  # fewer points than this in a drift region: no trend test
LOOKBACK_RUNS = (0, 3, 6, 12, 24, 48, 96)  # earlier histories a new drift is checked against (trend.verdict)
MS_PER_WEEK = 7 * 24 * 3600 * 1000
SCREEN_PVALUE = 0.1  # trend inside the raw segments a drift region must show before it is fitted
_MAX_ROUNDS = 3


@dataclass(frozen=True)
class Drift:
    start: int  # first index of the drift region (the run the drift is dated from)
    end: int  # exclusive (the series' length)
    slope: float  # units per run (Theil-Sen, pooled within segments)
    slope_low: float  # 95% confidence interval of the slope (Sen's, from the Mann-Kendall variance)
    slope_high: float
    pvalue: float  # two-sided Mann-Kendall test, summed over the segments of the region
    level: float  # level at the drift's start (median of the first segment, drift removed)
    slope_per_week: float | None  # units per week from the runs' start times; None without times
    lines: tuple[tuple[int, int, float, float], ...] = ()  # per segment of the region: (lo, hi, y at lo, y at hi-1)

    def _pct(self, units: float | None) -> float:
        if units is None or not self.level:
            return float("nan")
        return 100.0 * units / abs(self.level)

    @property
    def pct_per_100_runs(self) -> float:
        return self._pct(100.0 * self.slope)

    @property
    def pct_per_week(self) -> float:
        return self._pct(self.slope_per_week)

    @property
    def total_pct(self) -> float:
        """Change so far: the slope over the region's runs, % of the level at its start."""
        return self._pct(self.slope * (self.end - 1 - self.start))

    def slope_differs(self, other: Drift) -> bool:
        """Material change of slope: this slope's 95% interval excludes the other's slope."""
        return not self.slope_low <= other.slope <= self.slope_high


@dataclass(frozen=True)
class Analysis:
    steps: tuple[ChangePoint, ...]  # level changes (found on the detrended series when a drift was fitted)
    drift: Drift | None
    detrended: np.ndarray  # the values with the drift removed from its region (the values themselves without)
    raw_steps: int  # change points of the raw values (the staircase when a drift absorbed it)


def fit(z: np.ndarray, bounds: list[int], times_ms: np.ndarray | None = None) -> Drift:
    """The drift over z[bounds[0]:bounds[-1]], the slope shared by the blocks between bounds."""
    _, var_s, p = mann_kendall(z, bounds)
    slope, low, high = theil_sen(z, bounds, var_s)
    a, n = bounds[0], bounds[-1]
    detrended = z[a:n] - slope * np.arange(n - a)
    level = float(np.median(detrended[: bounds[1] - a]))
    per_week = None
    if times_ms is not None:
        weekly = pair_slopes(z, np.asarray(times_ms, dtype=float) / MS_PER_WEEK, bounds)
        per_week = float(np.median(weekly)) if weekly.size else None
    lines = []
    for lo, hi in pairwise(bounds):
        base = float(np.median(detrended[lo - a : hi - a]))
        lines.append((lo, hi, base + slope * (lo - a), base + slope * (hi - 1 - a)))
    return Drift(
        start=a,
        end=n,
        slope=slope,
        slope_low=low,
        slope_high=high,
        pvalue=p,
        level=level,
        slope_per_week=per_week,
        lines=tuple(lines),
    )


def _rss(values: np.ndarray, bounds: list[int]) -> float:
    """Residual sum of squares about each segment's mean."""
    return float(sum(((values[lo:hi] - values[lo:hi].mean()) ** 2).sum() for lo, hi in pairwise(bounds)))


def _line_fits_as_well(z: np.ndarray, a: int, raw: list[ChangePoint], drift: Drift, bounds: list[int]) -> bool:
    """Whether the drift (slope plus its steps) explains the region from `a` at least as well as the raw
    staircase of flat levels, by BIC (Schwarz): a few large steps between short flat stairs are steps, even
    when a line through them is significant and the detrended series is too short to show them again."""
    region = z[a:]
    m = len(region)
    stairs = [0, *[cp.index - a for cp in raw], m]
    detrended = region - drift.slope * np.arange(m)
    line = [b - a for b in bounds]
    floor = 1e-12 * max(float(np.var(region)), 1e-300) * m  # a noiseless series: compare by parameters only
    steps_bic = m * np.log(max(_rss(region, stairs), floor) / m) + (2 * len(raw) + 1) * np.log(m)
    drift_bic = m * np.log(max(_rss(detrended, line), floor) / m) + (2 * (len(line) - 2) + 2) * np.log(m)
    return bool(drift_bic <= steps_bic)


def analyze(
    values,
    times_ms=None,
    *,
    window: int = changepoint.DEFAULT_WINDOW,
    max_pvalue: float = changepoint.DEFAULT_MAX_PVALUE,
    min_magnitude: float = changepoint.DEFAULT_MIN_MAGNITUDE,
    min_segment: int = changepoint.DEFAULT_MIN_SEGMENT,
    drift_pvalue: float = DEFAULT_DRIFT_PVALUE,
) -> Analysis:
    """Level changes and the drift of a series (see the module doc). Raises ValueError on bad input."""
    if not 0.0 < drift_pvalue <= 1.0:
        raise ValueError(f"drift_pvalue must be in (0, 1], got {drift_pvalue!r}")
    z = np.asarray(values, dtype=float)
    times = None if times_ms is None else np.asarray(times_ms, dtype=float)

    def detect(series: np.ndarray) -> list[ChangePoint]:
        return changepoint.detect(
            series, window=window, max_pvalue=max_pvalue, min_magnitude=min_magnitude, min_segment=min_segment
        )

    raw = detect(z)
    n = len(z)
    idx = [cp.index for cp in raw]
    # S and Var S of each raw segment, once: a start's test inside the segments after it is a suffix sum
    blocks = [mann_kendall_block(z[lo:hi]) for lo, hi in pairwise([0, *idx, n])]
    for j, a in enumerate([0, *idx]):
        later = idx[j:]
        if not later or n - a < MIN_DRIFT_POINTS:
            continue
        # screens, cheapest first: a trend inside the raw segments at a loose level (a drift leaves one
        # inside every stair; steps on flat levels leave none), then over the whole region at drift_pvalue
        s_in = sum(b[0] for b in blocks[j:])
        if mann_kendall_pvalue(s_in, sum(b[1] for b in blocks[j:])) > SCREEN_PVALUE:
            continue
        # a staircase climbs the drift's way: most of its stairs go the way of the trend inside them
        if 2 * sum((cp.mean_after > cp.mean_before) == (s_in > 0) for cp in raw[j:]) <= len(later):
            continue
        if mann_kendall(z, [a, n])[2] > drift_pvalue:
            continue
        # the first slope over the whole region: a slope pooled inside the raw segments would be biased flat,
        # since the raw split lands where the noise helps a step; the refits below pool inside segments
        bounds = [a, n]
        drift, steps, settled = fit(z, bounds), raw, False
        for _ in range(_MAX_ROUNDS):
            r = z.copy()
            r[a:] -= drift.slope * np.arange(n - a)
            steps = detect(r)
            new_bounds = [a, *[cp.index for cp in steps if cp.index > a], n]
            if new_bounds == bounds:
                settled = True
                break
            bounds = new_bounds
            drift = fit(z, bounds)
        if (
            drift.pvalue <= drift_pvalue
            and len(bounds) - 2 < len(later)
            and _line_fits_as_well(z, a, raw[j:], drift, bounds)
        ):
            drift = fit(z, bounds, times)  # the same slope (same blocks), now with the slope per week
            r = z.copy()
            r[a:] -= drift.slope * np.arange(n - a)
            return Analysis(tuple(steps if settled else detect(r)), drift, r, len(raw))
    a = idx[-1] if idx else 0
    tail_drift: Drift | None = None  # a drift inside the last segment only, if any
    if n - a >= MIN_DRIFT_POINTS and mann_kendall(z, [a, n])[2] <= drift_pvalue:
        tail_drift = fit(z, [a, n], times)
    r = z.copy()
    if tail_drift is not None:
        r[a:] -= tail_drift.slope * np.arange(n - a)
    return Analysis(tuple(raw), tail_drift, r, len(raw))
