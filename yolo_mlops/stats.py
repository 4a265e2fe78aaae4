"""The project's statistics, one implementation each: t tests (Student's, Welch's, against a pooled noise, the
nights' random effect), pooled noise, Holm's step-down, the bootstraps, Mann-Kendall and Theil-Sen.

Pure functions over numpy arrays; scipy is imported inside the functions that need it (its distributions), so
importing this module costs numpy alone. Every layer may use it: it imports nothing of the project.

One rule for the edges, the same in every test:

- **Too few points.** A test without a degree of freedom (a side with no point; Student's t: fewer than 3
  points in all; Welch's: a side with fewer than 2) has no p: nan, which no level accepts (`nan <= alpha` is
  False). A pooled sd without a degree of freedom is nan.
- **Equal means.** Two means that agree within 1e-12 of their size differ by rounding only: the difference is 0.
- **Zero noise.** A standard error of 0 (every group constant) makes the difference certain: p = 0 when it
  lies the tested way (two-sided: any difference), else 1; so a zero difference has p = 1.

Student's t comes from `scipy.special.stdtr` on the statistic computed here (scipy.stats' `ttest_ind` gives the
same p; tests/test_stats.py checks it, and the edges above): the change-point merge runs thousands of these per
series, where `ttest_ind`'s own overhead would dominate.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import pairwise
from statistics import NormalDist
from typing import Literal

import numpy as np

Alternative = Literal["two-sided", "greater", "less"]  # greater: the difference is tested for being > 0
EQUAL_MEANS = 1e-12  # relative difference of two means taken as rounding (the rule above)


# ---------------------------------------------------------------------------------------------------------------
# Student's t
# ---------------------------------------------------------------------------------------------------------------


def t_value(diff: float, se: float) -> float:
    """diff / se; with zero noise (se not > 0) +-inf by the sign of diff, 0 for no difference."""
    if not se > 0:
        return math.copysign(math.inf, diff) if diff else 0.0
    return diff / se


def t_pvalue(diff: float, se: float, df: float, alternative: Alternative = "two-sided", scale: float = 0.0) -> float:
    """p of a difference `diff` with standard error `se` on Student's t with `df` degrees of freedom, by the
    module's rule: nan without a degree of freedom, a difference within EQUAL_MEANS x `scale` (the size of the
    means compared) is 0, zero noise decides by the sign."""
    from scipy.special import stdtr

    if not df > 0:
        return float("nan")
    if abs(diff) <= EQUAL_MEANS * scale:
        diff = 0.0
    if not se > 0:
        right_way = diff > 0 if alternative == "greater" else diff < 0 if alternative == "less" else diff != 0
        return 0.0 if right_way else 1.0
    t = diff / se
    if alternative == "greater":
        return float(stdtr(df, -t))
    if alternative == "less":
        return float(stdtr(df, t))
    return float(2.0 * stdtr(df, -abs(t)))


def t_quantile(p: float, df: float) -> float:
    """Student's t quantile: t with P(T <= t) = p."""
    from scipy.special import stdtrit

    if not 0.0 < p < 1.0 or not df > 0:
        raise ValueError(f"t_quantile needs 0 < p < 1 and df > 0, got p={p}, df={df}")
    return float(stdtrit(df, p))


def _scale(x: np.ndarray, y: np.ndarray) -> float:
    return max(abs(float(x.mean())), abs(float(y.mean())))


@dataclass(frozen=True)
class Noise:
    sd: float  # pooled within-group standard deviation (nan without a degree of freedom)
    df: int


def pooled_noise(groups: Sequence[Sequence[float] | np.ndarray]) -> Noise:
    """The standard deviation within groups (each centred on its own mean), pooled: sqrt(sum of squares /
    sum(n_i - 1)), with its degrees of freedom; groups of fewer than 2 points add nothing."""
    ss, df = 0.0, 0
    for g in groups:
        x = np.asarray(g, dtype=float)
        if len(x) > 1:
            ss += float(((x - x.mean()) ** 2).sum())
            df += len(x) - 1
    return Noise(math.sqrt(ss / df) if df else float("nan"), df)


def student_t(x: np.ndarray, y: np.ndarray, alternative: Alternative = "two-sided", ddof: int = 1) -> float:
    """p of Student's t test (variance pooled over both samples, n_x + n_y - 2 degrees of freedom) of
    mean(y) - mean(x). `ddof=0` takes each side's population variance before pooling them with weights n - 1
    (Apache Otava's arithmetic, for the change-point detector's compatibility mode)."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    n1, n2 = len(x), len(y)
    if not n1 or not n2:
        return float("nan")
    v1 = float(x.var(ddof=ddof)) if n1 > ddof else 0.0
    v2 = float(y.var(ddof=ddof)) if n2 > ddof else 0.0
    return student_t_of(float(x.mean()), v1, n1, float(y.mean()), v2, n2, alternative)


def student_t_of(
    mean_x: float, var_x: float, n_x: int, mean_y: float, var_y: float, n_y: int, alternative: Alternative = "two-sided"
) -> float:
    """`student_t` from the samples' means, variances and sizes (for a caller that reports them too): the
    variances pooled with weights n - 1."""
    df = n_x + n_y - 2
    pooled = ((n_x - 1) * var_x + (n_y - 1) * var_y) / df if df > 0 else 0.0
    se = float(np.sqrt(pooled * (1.0 / n_x + 1.0 / n_y))) if pooled > 0 else 0.0
    return t_pvalue(mean_y - mean_x, se, df, alternative, max(abs(mean_x), abs(mean_y)))


def welch_t(x: np.ndarray, y: np.ndarray, alternative: Alternative = "two-sided") -> float:
    """p of Welch's t test (unequal variances, Satterthwaite's degrees of freedom) of mean(y) - mean(x); nan when
    a side has fewer than 2 points."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    n1, n2 = len(x), len(y)
    if n1 < 2 or n2 < 2:
        return float("nan")
    a, b = float(x.var(ddof=1)) / n1, float(y.var(ddof=1)) / n2
    if a + b <= 0:
        return t_pvalue(float(y.mean() - x.mean()), 0.0, n1 + n2 - 2, alternative, _scale(x, y))
    df = (a + b) ** 2 / ((a * a / (n1 - 1) if a else 0.0) + (b * b / (n2 - 1) if b else 0.0))
    return t_pvalue(float(y.mean() - x.mean()), float(np.sqrt(a + b)), df, alternative, _scale(x, y))


def shift_t(x: np.ndarray, y: np.ndarray, noise: Noise, alternative: Alternative = "two-sided") -> float:
    """p of mean(y) - mean(x) against a noise estimated elsewhere (pooled over more groups than these two, or
    from a history): standard error noise.sd x sqrt(1/n_x + 1/n_y), noise.df degrees of freedom."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if not len(x) or not len(y):
        return float("nan")
    se = noise.sd * math.sqrt(1 / len(x) + 1 / len(y))
    return t_pvalue(float(y.mean() - x.mean()), se, noise.df, alternative, _scale(x, y))


@dataclass(frozen=True)
class NightsTest:
    pvalue: float  # one-sided: the confirmation night's mean above the baseline's
    night_sd: float  # the night-to-night sd estimated from the baseline (0 when its nights agree within noise)
    df: float


def nights_t_test(baseline_nights: list[np.ndarray], confirmation: np.ndarray) -> NightsTest:
    """Are the confirmation runs (one night's) above the baseline, whose runs come in nights?

    A night shares one offset among its runs (the machine's load, its clocks, the data's cache): the runs of one
    night are not independent draws, and a test that takes them as such calls a slow night a regression. The
    model is a one-way random effect, value = level + night offset (sd sb) + run noise (sd sw). sw comes from
    the spread within nights (the baseline's and the confirmation night's), sb from the spread of the baseline's
    night means beyond that (moments, truncated at 0). The difference of the means has variance
    sb^2 (1 + sum n_i^2 / N^2) + sw^2 (1 / n_c + 1 / N) (the confirmation night's offset, the baseline's
    nights' offsets, the runs' noise), tested with Satterthwaite's degrees of freedom; where no night offset
    shows (sb = 0) this is the pooled t test of the runs."""
    groups = [np.asarray(g, dtype=float) for g in baseline_nights if len(g)]
    again = np.asarray(confirmation, dtype=float)
    total, k, n_c = sum(len(g) for g in groups), len(groups), len(again)
    df_w = sum(len(g) - 1 for g in [*groups, again] if len(g))
    if not total or not n_c or df_w < 1:
        return NightsTest(float("nan"), 0.0, 0.0)
    msw = sum(float(((g - g.mean()) ** 2).sum()) for g in [*groups, again] if len(g)) / df_w
    base = np.concatenate(groups)
    diff = float(again.mean() - base.mean())
    squares = sum(len(g) ** 2 for g in groups)
    c_b, c_w = 1 + squares / total**2, 1 / n_c + 1 / total
    sb2, var, df = 0.0, c_w * msw, float(df_w)
    if k >= 2 and total > k:
        msb = sum(len(g) * (float(g.mean()) - float(base.mean())) ** 2 for g in groups) / (k - 1)
        n0 = (total - squares / total) / (k - 1)
        if msb > msw:
            sb2 = (msb - msw) / n0
            a, b = c_b / n0, c_w - c_b / n0
            var = a * msb + b * msw
            df = var**2 / ((a * msb) ** 2 / (k - 1) + (b * msw) ** 2 / df_w)
    se = math.sqrt(var) if var > 0 else 0.0
    return NightsTest(t_pvalue(diff, se, df, "greater", _scale(base, again)), math.sqrt(sb2), df)


# ---------------------------------------------------------------------------------------------------------------
# Multiple tests
# ---------------------------------------------------------------------------------------------------------------


def holm_adjusted(pvalues: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values: the k-th smallest p times (m - k + 1), made monotone; a test holds at
    family-wise rate alpha when its adjusted p is at most alpha (under any dependence between the tests). nan
    counts as 1. scipy has no Holm (`scipy.stats.false_discovery_control` bounds the false discovery rate, a
    weaker promise than the chance of any false alert)."""
    clean = [p if p == p else 1.0 for p in pvalues]
    order = sorted(range(len(clean)), key=lambda i: (clean[i], i))
    adjusted = [1.0] * len(clean)
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (len(clean) - rank) * clean[i]))
        adjusted[i] = running
    return adjusted


# ---------------------------------------------------------------------------------------------------------------
# Bootstraps (seeded by the caller's generator: the same draws give the same figures)
# ---------------------------------------------------------------------------------------------------------------


def bootstrap_medians(values: np.ndarray, rng: np.random.Generator, resamples: int) -> np.ndarray:
    """The medians of `resamples` bootstrap resamples of (finite) values: exactly
    `np.median(values[rng.integers(0, n, size=(resamples, n))], axis=1)`, the same draws, faster.

    A resample's k-th smallest value is the sorted values' entry at the k-th smallest rank drawn, so the
    draws are mapped to int32 ranks and only the middle rank of each row is selected (one partition of
    small integers instead of a float median per row): a year of nightly runs per machine makes this the
    fleet report's largest single cost.
    """
    n = len(values)
    order = np.argsort(values, kind="stable")
    ranks = np.empty(n, dtype=np.int32)
    ranks[order] = np.arange(n, dtype=np.int32)
    drawn = ranks[rng.integers(0, n, size=(resamples, n))]
    middle = n // 2
    drawn.partition(middle, axis=1)
    upper = values[order[drawn[:, middle]]]
    if n % 2:
        return upper
    lower = values[order[drawn[:, :middle].max(axis=1)]]
    return (lower + upper) / 2


def two_level_bootstrap_medians(
    groups: Sequence[Sequence[np.ndarray]],
    statistic: Callable[..., np.ndarray],
    resamples: int,
    rng: np.random.Generator,
) -> np.ndarray:
    """`resamples` draws of the median over groups of a per-group statistic, under the two-level (hierarchical)
    bootstrap: each resample draws the groups with replacement, then the rows *within* each drawn group.

    A group is a few equally long columns (one row per item); its statistic is `statistic(*column sums)` over
    a resample of its rows (a ratio of sums, say: images / time)."""
    n = len(groups)
    # For every (resample, slot) pair and every group a fresh within-group resample of its rows ...
    per_group = np.empty((n, resamples, n))
    for j, columns in enumerate(groups):
        k = len(columns[0])
        idx = rng.integers(0, k, size=(resamples, n, k))
        per_group[j] = statistic(*(column[idx].sum(axis=2) for column in columns))
    # ... then each slot of each resample picks which group it is (groups drawn with replacement).
    chosen = rng.integers(0, n, size=(resamples, n))
    values = np.take_along_axis(per_group.transpose(1, 2, 0), chosen[:, :, None], axis=2)[:, :, 0]
    return np.median(values, axis=1)


def stratified_bootstrap_means(
    values: np.ndarray, strata: Sequence[np.ndarray], resamples: int, rng: np.random.Generator
) -> np.ndarray:
    """`resamples` bootstrap means of `values`, each stratum (indices into values) resampled with replacement to
    its own size."""
    total = np.zeros(resamples)
    for idx in strata:
        total += values[idx][rng.integers(0, len(idx), size=(resamples, len(idx)))].sum(axis=1)
    return total / len(values)


@dataclass(frozen=True)
class BootstrapInterval:
    mean: float
    low: float
    high: float
    stratified: bool  # False: every stratum had one value, so the values were resampled as one stratum
    strata: int  # strata resampled
    df: int  # values - strata


def stratified_bootstrap_interval(
    values: np.ndarray, strata: Sequence[np.ndarray], resamples: int, rng: np.random.Generator, confidence: float
) -> BootstrapInterval:
    """The mean of `values` with a stratified bootstrap interval scaled to Student's t, never narrower than the
    t interval (values > strata needed).

    The percentiles of the bootstrap deviations of the mean are scaled by sqrt(N / (N - L)) (N values, L strata:
    the bootstrap variance becomes the pooled within-stratum unbiased variance of the mean) and by t(N - L) / z;
    each side is then at least as far from the mean as Student's t interval on the same pooled within-stratum
    spread (a bootstrap of a few values has lighter tails than the mean it imitates). When every stratum has
    one value there is nothing to resample within one: the values are resampled as one stratum."""
    alpha = (1.0 - confidence) / 2.0
    n = len(values)
    stratified = len(strata) < n
    if not stratified:
        strata = [np.arange(n)]
    df = n - len(strata)
    mean = float(values.mean())
    t = t_quantile(1.0 - alpha, df)
    # bootstrap variance x N / (N - L) = unbiased pooled within-stratum variance of the mean; t / z for its df
    scale = math.sqrt(n / df) * t / NormalDist().inv_cdf(1.0 - alpha)
    deviations = (stratified_bootstrap_means(values, strata, resamples, rng) - mean) * scale
    low_dev, high_dev = (float(x) for x in np.quantile(deviations, [alpha, 1.0 - alpha]))
    within = sum(float(((values[idx] - values[idx].mean()) ** 2).sum()) for idx in strata)
    half = t * math.sqrt(within / df / n)
    return BootstrapInterval(mean, mean + min(low_dev, -half), mean + max(high_dev, half), stratified, len(strata), df)


# ---------------------------------------------------------------------------------------------------------------
# Trend: Mann-Kendall and Theil-Sen, summed (pooled) over blocks z[bounds[i]:bounds[i+1]]
# ---------------------------------------------------------------------------------------------------------------

PAIRS_DIRECT = 256  # blocks up to this size: the sign of every pair (cheaper than scipy's Kendall tau below it)


def mann_kendall_block(block: np.ndarray, direct: bool | None = None) -> tuple[float, float]:
    """(S, Var S) of the Mann-Kendall statistic of one block (ties corrected); (0, 0) below 3 points or for a
    constant block. S is the sum of the signs of every pair (`direct`, default up to PAIRS_DIRECT points) or
    Kendall's tau-b against the index, rescaled (the same S)."""
    from scipy import stats

    n = len(block)
    if n < 3:
        return 0.0, 0.0
    _, counts = np.unique(block, return_counts=True)
    n0 = n * (n - 1) / 2
    ties = float(np.sum(counts * (counts - 1) / 2))
    if ties >= n0:
        return 0.0, 0.0  # a constant block
    var = (n * (n - 1) * (2 * n + 5) - float(np.sum(counts * (counts - 1) * (2 * counts + 5)))) / 18
    if direct if direct is not None else n <= PAIRS_DIRECT:
        i, j = np.triu_indices(n, 1)
        return float(np.sign(block[j] - block[i]).sum()), var
    tau = stats.kendalltau(np.arange(n), block).statistic  # tau-b; the index has no ties
    return float(tau) * float(np.sqrt(n0 * (n0 - ties))), var


def mann_kendall_pvalue(s: float, var: float) -> float:
    """Two-sided p of S under no trend (normal, continuity corrected); 1 without variance."""
    from scipy import stats

    if var <= 0:
        return 1.0
    zscore = (abs(s) - 1.0) / np.sqrt(var) if abs(s) > 1 else 0.0  # continuity corrected
    return float(2 * stats.norm.sf(zscore))


def mann_kendall(z: np.ndarray, bounds: list[int]) -> tuple[float, float, float]:
    """(S, Var S, two-sided p) of the Mann-Kendall test summed over the blocks z[bounds[i]:bounds[i+1]]
    (ties and continuity corrected; the blocked form of Hirsch et al. 1982). p = 1 when no block has two
    distinct values."""
    parts = [mann_kendall_block(z[lo:hi]) for lo, hi in pairwise(bounds)]
    s_total, var_total = sum(p[0] for p in parts), sum(p[1] for p in parts)
    return s_total, var_total, mann_kendall_pvalue(s_total, var_total)


def pair_slopes(y: np.ndarray, x: np.ndarray, bounds: list[int]) -> np.ndarray:
    """The slopes (y_j - y_i) / (x_j - x_i) of every pair inside each block (pairs with x_i = x_j left out)."""
    out = []
    for lo, hi in pairwise(bounds):
        if hi - lo < 2:
            continue
        yy, xx = y[lo:hi], x[lo:hi]
        i, j = np.triu_indices(hi - lo, 1)
        dx = xx[j] - xx[i]
        keep = dx != 0
        out.append((yy[j] - yy[i])[keep] / dx[keep])
    return np.concatenate(out) if out else np.empty(0)


def theil_sen(z: np.ndarray, bounds: list[int], var_s: float) -> tuple[float, float, float]:
    """Theil-Sen slope per index over the pairs inside each block, with Sen's 95% interval from the
    Mann-Kendall variance `var_s`; (0, 0, 0) without a pair. One block: `scipy.stats.theilslopes`."""
    from scipy import stats

    slopes = np.sort(pair_slopes(z, np.arange(len(z), dtype=float), bounds))
    if not slopes.size:
        return 0.0, 0.0, 0.0
    slope = float(np.median(slopes))
    c = stats.norm.ppf(0.975) * np.sqrt(max(var_s, 0.0))
    m1 = int(np.clip(np.round((slopes.size - c) / 2) - 1, 0, slopes.size - 1))
    m2 = int(np.clip(np.round((slopes.size + c) / 2), 0, slopes.size - 1))
    return slope, float(slopes[m1]), float(slopes[m2])
