"""yolo_mlops.stats against scipy.stats where scipy has the routine, its rule for tiny samples and zero noise, and
each fast form against the plain one it replaces."""

from __future__ import annotations

import math
import warnings
from itertools import pairwise

import numpy as np
import pytest
from scipy import stats as sps

from yolo_mlops import stats

NAN = float("nan")


def _samples(seed: int, n1: int, n2: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.normal(0.0, 1.0, n1), rng.normal(0.8, 1.3, n2)


@pytest.mark.parametrize(("n1", "n2"), [(2, 2), (2, 3), (3, 40), (25, 25), (1, 10)])
@pytest.mark.parametrize("alternative", ["two-sided", "greater", "less"])
def test_student_t_is_scipys_pooled_t_test(n1, n2, alternative):
    x, y = _samples(n1 * 100 + n2, n1, n2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # old scipy: a one-point sample
        want = sps.ttest_ind(y, x, equal_var=True, alternative=alternative).pvalue
    if np.isnan(want):  # scipy 1.10 gives no p when a sample has one value; the pooled test has degrees of freedom
        return
    assert stats.student_t(x, y, alternative) == pytest.approx(want, rel=1e-9)


@pytest.mark.parametrize(("n1", "n2"), [(2, 2), (3, 40), (25, 25), (5, 3)])
@pytest.mark.parametrize("alternative", ["two-sided", "greater", "less"])
def test_welch_t_is_scipys_unequal_variance_t_test(n1, n2, alternative):
    x, y = _samples(n1 * 100 + n2 + 1, n1, n2)
    want = sps.ttest_ind(y, x, equal_var=False, alternative=alternative).pvalue
    assert stats.welch_t(x, y, alternative) == pytest.approx(want, rel=1e-9)


def test_welch_with_one_constant_side_is_scipys():
    x, y = np.array([5.0, 5.0, 5.0]), np.array([5.5, 6.0, 7.1, 6.4])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # scipy warns of the constant sample
        want = sps.ttest_ind(y, x, equal_var=False).pvalue
    assert stats.welch_t(x, y) == pytest.approx(want, rel=1e-9)


def test_shift_t_with_the_samples_own_noise_is_student_t():
    x, y = _samples(3, 6, 9)
    noise = stats.pooled_noise([x, y])
    for alternative in ("two-sided", "greater", "less"):
        assert stats.shift_t(x, y, noise, alternative) == pytest.approx(stats.student_t(x, y, alternative), rel=1e-12)


def test_pooled_noise_is_the_anova_within_group_sd():
    groups = [np.array([1.0, 2.0, 4.0]), np.array([10.0, 11.0]), np.array([7.0]), np.array([3.0, 3.5, 2.0, 9.0])]
    ss = sum(((g - g.mean()) ** 2).sum() for g in groups)
    df = sum(len(g) - 1 for g in groups)
    noise = stats.pooled_noise(groups)
    assert noise.sd == pytest.approx(math.sqrt(ss / df)) and noise.df == df
    # the pooled sd's square is the residual mean square of one-way ANOVA: F = between / within
    grand = np.concatenate(groups)
    between = sum(len(g) * (g.mean() - grand.mean()) ** 2 for g in groups) / (len(groups) - 1)
    f = sps.f_oneway(*groups).statistic
    assert between / stats.pooled_noise(groups).sd ** 2 == pytest.approx(f)


def test_t_quantile_matches_tables_and_inverts_the_p():
    table = {1: 12.7062, 2: 4.3027, 3: 3.1824, 4: 2.7764, 10: 2.2281, 30: 2.0423}
    for df, value in table.items():
        assert stats.t_quantile(0.975, df) == pytest.approx(value, abs=1e-4)
    assert stats.t_quantile(0.95, 7) == pytest.approx(1.8946, abs=1e-4)
    assert stats.t_quantile(0.95, 7) == pytest.approx(sps.t.ppf(0.95, 7), rel=1e-12)
    for bad in ((1.0, 3), (0.0, 3), (0.9, 0)):
        with pytest.raises(ValueError):
            stats.t_quantile(*bad)


# the rule for tiny samples and zero noise (module docstring) ------------------------------------------------------


def test_without_degrees_of_freedom_there_is_no_p():
    one, two = np.array([1.0]), np.array([1.0, 2.0])
    assert math.isnan(stats.student_t(one, np.array([3.0])))  # 2 points in all: no degree of freedom
    assert math.isnan(stats.student_t(np.array([]), two))
    assert not math.isnan(stats.student_t(one, two))  # 3 points: one degree of freedom
    assert math.isnan(stats.welch_t(one, np.array([5.0, 6.0, 7.0])))  # Welch needs each side's variance
    assert math.isnan(stats.shift_t(np.array([]), two, stats.Noise(1.0, 5)))
    assert math.isnan(stats.t_pvalue(1.0, 1.0, 0))
    assert math.isnan(stats.pooled_noise([one, np.array([4.0])]).sd)
    assert stats.pooled_noise([one, np.array([4.0])]).df == 0
    assert math.isnan(stats.nights_t_test([one, np.array([2.0])], np.array([3.0])).pvalue)
    assert not NAN <= 0.05  # nan is no level's: nan <= alpha is False


@pytest.mark.parametrize(
    ("x", "y", "two", "greater", "less"),
    [
        ([5.0, 5.0, 5.0], [6.0, 6.0], 0.0, 0.0, 1.0),  # y above, no noise: certain
        ([6.0, 6.0, 6.0], [5.0, 5.0], 0.0, 1.0, 0.0),
        ([5.0, 5.0, 5.0], [5.0, 5.0], 1.0, 1.0, 1.0),  # no difference, no noise
    ],
)
def test_zero_noise_decides_by_the_sign(x, y, two, greater, less):
    x, y = np.array(x), np.array(y)
    for name, want in (("two-sided", two), ("greater", greater), ("less", less)):
        assert stats.student_t(x, y, name) == want  # type: ignore[arg-type]
        assert stats.welch_t(x, y, name) == want  # type: ignore[arg-type]
        assert stats.shift_t(x, y, stats.Noise(0.0, 3), name) == want  # type: ignore[arg-type]
    assert stats.nights_t_test([x, x], y).pvalue == greater


def test_means_apart_by_rounding_are_no_difference():
    x, y = np.array([0.1, 0.1, 0.1]), np.array([0.1, 0.1])
    assert x.mean() != y.mean()  # 1 ulp apart
    for test in (stats.student_t, stats.welch_t):
        assert test(x, y) == 1.0 and test(x, y, "greater") >= 0.5


def test_equal_means_with_noise_are_no_difference():
    x, y = np.array([1.0, 2.0, 3.0]), np.array([3.0, 1.0, 2.0])
    assert stats.student_t(x, y) == 1.0
    assert stats.student_t(x, y, "greater") == 0.5
    assert stats.t_value(0.0, 0.0) == 0.0 and stats.t_value(-2.0, 0.0) == -math.inf and stats.t_value(3.0, 1.5) == 2.0


# nights, Holm -------------------------------------------------------------------------------------------------------


def test_nights_test_without_a_night_effect_is_the_pooled_t_test():
    # nights whose means agree within noise: sb = 0, so the test is Student's t of the runs, noise pooled within
    # every night (the confirmation night's too)
    nights = [np.array([10.0, 12.0, 11.0]), np.array([11.5, 10.5, 11.0]), np.array([12.0, 10.0, 11.0])]
    again = np.array([12.0, 13.0, 12.5])
    got = stats.nights_t_test(nights, again)
    assert got.night_sd == 0.0
    base = np.concatenate(nights)
    noise = stats.pooled_noise([*nights, again])
    assert got.pvalue == pytest.approx(stats.shift_t(base, again, noise, "greater"), rel=1e-12)
    assert got.df == noise.df


def test_nights_test_widens_with_a_night_effect():
    rng = np.random.default_rng(4)
    nights = [rng.normal(size=3) + 3 * rng.normal() for _ in range(10)]
    again = rng.normal(size=3) + 4.0
    by_nights = stats.nights_t_test(nights, again)
    assert by_nights.night_sd > 1.0
    assert by_nights.pvalue > stats.student_t(np.concatenate(nights), again, "greater")


def test_holm_against_a_hand_computed_example():
    # sorted 0.01, 0.03, 0.04 times 3, 2, 1: 0.03, 0.06, 0.04 -> monotone 0.03, 0.06, 0.06
    assert stats.holm_adjusted([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    assert stats.holm_adjusted([0.2, NAN]) == pytest.approx([0.4, 1.0])  # nan counts as 1
    assert stats.holm_adjusted([0.5, 0.6]) == [1.0, 1.0]  # capped at 1
    assert stats.holm_adjusted([]) == []


def test_holm_is_statsmodels_where_installed():
    multitest = pytest.importorskip("statsmodels.stats.multitest")
    p = np.random.default_rng(0).uniform(0, 0.1, 12)
    want = multitest.multipletests(p, method="holm")[1]
    assert stats.holm_adjusted(list(p)) == pytest.approx(list(want))


# bootstraps ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("n", [1, 2, 3, 4, 47, 374, 375])
def test_bootstrap_medians_are_the_plain_medians_of_the_same_draws(n):
    # the fast bootstrap selects ranks, not values: with ties, odd and even sizes it must give exactly what
    # the plain median of the same seeded resamples gives, so the fleet's confidence intervals do not move
    values = 100.0 + np.random.default_rng(n).standard_normal(n)
    values[: n // 3] = values[-1]  # ties
    plain = np.median(values[np.random.default_rng(7).integers(0, n, size=(500, n))], axis=1)
    fast = stats.bootstrap_medians(values, np.random.default_rng(7), 500)
    assert np.array_equal(fast, plain)


def test_two_level_bootstrap_is_the_plain_loop_of_the_same_draws():
    rng = np.random.default_rng(1)
    groups = [(rng.uniform(1, 2, k), rng.uniform(5, 9, k)) for k in (4, 7, 5)]
    resamples = 50
    got = stats.two_level_bootstrap_medians(groups, lambda a, b: a / b, resamples, np.random.default_rng(9))
    draws = np.random.default_rng(9)
    n = len(groups)
    within = [draws.integers(0, len(a), size=(resamples, n, len(a))) for a, _ in groups]
    chosen = draws.integers(0, n, size=(resamples, n))
    plain = []
    for r in range(resamples):
        idx = [within[g][r, slot] for slot, g in enumerate(chosen[r])]
        ratios = [groups[g][0][i].sum() / groups[g][1][i].sum() for g, i in zip(chosen[r], idx, strict=True)]
        plain.append(np.median(ratios))
    assert np.allclose(got, plain, rtol=1e-13)


def test_stratified_bootstrap_means_keep_each_stratum_its_size():
    values = np.array([1.0, 2.0, 3.0, 100.0, 101.0])
    strata = [np.array([0, 1, 2]), np.array([3, 4])]
    means = stats.stratified_bootstrap_means(values, strata, 2000, np.random.default_rng(0))
    # every resample holds 3 values of the first stratum and 2 of the second: the mean stays between
    assert means.min() >= (3 * 1.0 + 2 * 100.0) / 5 and means.max() <= (3 * 3.0 + 2 * 101.0) / 5
    assert means.mean() == pytest.approx(values.mean(), abs=0.1)


def test_stratified_interval_is_never_narrower_than_the_t_interval():
    rng = np.random.default_rng(2)
    values = rng.normal(0.1, 0.05, 8)
    strata = [np.arange(4), np.arange(4, 8)]
    got = stats.stratified_bootstrap_interval(values, strata, 400, np.random.default_rng(3), 0.95)
    within = sum(((values[s] - values[s].mean()) ** 2).sum() for s in strata)
    half = sps.t.ppf(0.975, 6) * math.sqrt(within / 6 / 8)
    assert (got.stratified, got.strata, got.df) == (True, 2, 6)
    assert got.mean == pytest.approx(values.mean())
    assert got.low <= got.mean - half * (1 - 1e-12) and got.high >= got.mean + half * (1 - 1e-12)
    single = stats.stratified_bootstrap_interval(values[:3], [np.array([i]) for i in range(3)], 100, rng, 0.95)
    assert (single.stratified, single.strata, single.df) == (False, 1, 2)  # one value a stratum: one stratum


# Mann-Kendall, Theil-Sen --------------------------------------------------------------------------------------------


def _s_by_pairs(z: np.ndarray) -> float:
    return float(sum(np.sign(z[j] - z[i]) for i in range(len(z)) for j in range(i + 1, len(z))))


@pytest.mark.parametrize("n", [3, 10, 60, 300])
def test_mann_kendall_s_both_forms_and_by_pairs(n):
    z = np.round(np.random.default_rng(n).normal(size=n) + 0.01 * np.arange(n), 1)  # rounding makes ties
    s_direct, var = stats.mann_kendall_block(z, direct=True)
    s_tau, var_tau = stats.mann_kendall_block(z, direct=False)
    assert s_direct == pytest.approx(_s_by_pairs(z)) and s_tau == pytest.approx(s_direct, abs=1e-6)
    assert var == var_tau
    _, counts = np.unique(z, return_counts=True)
    assert var == pytest.approx((n * (n - 1) * (2 * n + 5) - (counts * (counts - 1) * (2 * counts + 5)).sum()) / 18)


def test_mann_kendall_p_is_kendalls_tau_test_with_a_continuity_correction():
    z = np.random.default_rng(5).normal(size=40) + 0.03 * np.arange(40)
    s, var, p = stats.mann_kendall(z, [0, 40])
    assert p == pytest.approx(2 * sps.norm.sf((abs(s) - 1) / math.sqrt(var)))
    # without the correction, S / sqrt(Var S) is the z of scipy's asymptotic Kendall tau test against the index
    tau = sps.kendalltau(np.arange(40), z, method="asymptotic")
    assert 2 * sps.norm.sf(abs(s) / math.sqrt(var)) == pytest.approx(tau.pvalue, rel=1e-9)


def test_mann_kendall_sums_over_blocks_and_skips_tiny_and_constant_ones():
    z = np.r_[np.arange(5.0), [7.0, 7.0, 7.0], [1.0, 2.0], np.arange(6.0)[::-1]]
    bounds = [0, 5, 8, 10, 16]
    s, var, _ = stats.mann_kendall(z, bounds)
    parts = [stats.mann_kendall_block(z[lo:hi]) for lo, hi in pairwise(bounds)]
    assert parts[1] == (0.0, 0.0) and parts[2] == (0.0, 0.0)  # constant; fewer than 3 points
    assert s == 10 - 15 and var == parts[0][1] + parts[3][1]
    assert stats.mann_kendall(np.full(6, 2.0), [0, 6])[2] == 1.0  # no block with two values: p = 1


def test_theil_sen_of_one_block_is_scipys_theilslopes():
    z = np.random.default_rng(6).normal(size=30) + 0.2 * np.arange(30)
    _, var, _ = stats.mann_kendall(z, [0, 30])
    slope, low, high = stats.theil_sen(z, [0, 30], var)
    want = sps.theilslopes(z, np.arange(30.0), alpha=0.95)
    assert (slope, low, high) == pytest.approx((want.slope, want.low_slope, want.high_slope))


def test_theil_sen_pools_the_pairs_inside_blocks():
    # two blocks with the same slope and a step between them: the pooled slope is that slope, not the step's
    z = np.r_[2.0 * np.arange(6), 100 + 2.0 * np.arange(6, 12)]
    slope, _, _ = stats.theil_sen(z, [0, 6, 12], stats.mann_kendall(z, [0, 6, 12])[1])
    assert slope == 2.0
    assert stats.theil_sen(np.array([1.0]), [0, 1], 0.0) == (0.0, 0.0, 0.0)
    x = np.array([0.0, 1.0, 1.0, 3.0])
    assert list(stats.pair_slopes(np.array([0.0, 1.0, 5.0, 3.0]), x, [0, 4])) == [1.0, 5.0, 1.0, 1.0, -1.0]
