"""Statistics on known samples: identical -> no difference, shifted -> faster/slower with CI excluding 1."""

from __future__ import annotations

import numpy as np
import pytest

from yolo_mlops.sweeps import stats
from yolo_mlops.sweeps.stats import Repeat


def _group(rng, mean_ms, repeats=3, steps=40, sd=4.0, images=8):
    return [Repeat(rng.normal(mean_ms, sd, steps).clip(1.0), images) for _ in range(repeats)]


def test_identical_samples_show_no_measurable_difference():
    rng = np.random.default_rng(0)
    group = _group(rng, 100.0)
    cmp = stats.compare(group, group)
    assert cmp.speedup == 1.0 and cmp.step_time_ratio == 1.0
    assert cmp.ci_low < 1.0 < cmp.ci_high
    assert cmp.verdict == stats.SAME


def test_clearly_faster_variant_has_a_ci_above_one():
    rng = np.random.default_rng(1)
    cmp = stats.compare(_group(rng, 100.0), _group(rng, 80.0))
    assert cmp.speedup == pytest.approx(1.25, rel=0.03)
    assert 1.0 < cmp.ci_low <= cmp.speedup <= cmp.ci_high
    assert cmp.verdict == stats.FASTER
    assert cmp.step_time_ratio == pytest.approx(0.8, rel=0.03)


def test_clearly_slower_variant_has_a_ci_below_one():
    rng = np.random.default_rng(2)
    cmp = stats.compare(_group(rng, 100.0), _group(rng, 130.0))
    assert cmp.ci_high < 1.0 and cmp.verdict == stats.SLOWER


def test_noise_larger_than_the_shift_is_no_measurable_difference():
    rng = np.random.default_rng(3)
    cmp = stats.compare(_group(rng, 100.0, sd=40.0, steps=5), _group(rng, 97.0, sd=40.0, steps=5))
    assert cmp.verdict == stats.SAME and cmp.ci_low < 1.0 < cmp.ci_high


def test_run_to_run_spread_widens_the_interval():
    """Repeats that disagree (one slow run) must give a wider CI than steps pooled as if independent."""
    rng = np.random.default_rng(4)
    base = [Repeat(rng.normal(m, 2.0, 40).clip(1.0), np.asarray(8)) for m in (100.0, 100.0, 100.0)]
    tight = [Repeat(rng.normal(90.0, 2.0, 40).clip(1.0), np.asarray(8)) for _ in range(3)]
    spread = [Repeat(rng.normal(m, 2.0, 40).clip(1.0), np.asarray(8)) for m in (80.0, 90.0, 100.0)]
    c_tight, c_spread = stats.compare(base, tight), stats.compare(base, spread)
    assert (c_spread.ci_high - c_spread.ci_low) > 3 * (c_tight.ci_high - c_tight.ci_low)
    # pooling the 120 steps as if independent would have called the spread group "faster" with a tight CI
    assert c_spread.verdict == stats.SAME and c_tight.verdict == stats.FASTER


def test_throughput_counts_images_so_batch_variants_compare_fairly():
    # twice the images per step at 1.5x the step time = 1.333x the throughput, although steps are slower
    base = [Repeat(np.full(10, 100.0), np.asarray(8))] * 2
    big = [Repeat(np.full(10, 150.0), np.asarray(16))] * 2
    cmp = stats.compare(base, big)
    assert cmp.speedup == pytest.approx(16 / 150 / (8 / 100))
    assert cmp.step_time_ratio == pytest.approx(1.5)
    assert cmp.verdict == stats.FASTER


def test_seeded_bootstrap_is_reproducible_and_one_repeat_is_labelled():
    rng = np.random.default_rng(5)
    a, b = _group(rng, 100.0, repeats=1), _group(rng, 95.0, repeats=1)
    assert stats.compare(a, b) == stats.compare(a, b)
    assert "one repeat" in stats.compare(a, b).method


def test_repeat_rejects_empty_or_nonpositive_steps():
    with pytest.raises(ValueError, match="at least one steady step"):
        Repeat(np.array([]), np.asarray(4))
    with pytest.raises(ValueError, match="must be positive"):
        Repeat(np.array([10.0, 0.0]), np.asarray(4))


def test_accuracy_check_flags_values_outside_the_baseline_spread():
    ok = stats.accuracy_check("train/loss_total", [5.0, 5.2, 5.1], [5.25])
    assert ok is not None and not ok.flagged and ok.delta == pytest.approx(0.15)
    bad = stats.accuracy_check("train/loss_total", [5.0, 5.2, 5.1], [6.0])
    assert bad is not None and bad.flagged and bad.delta == pytest.approx(0.9)
    # identical baseline repeats: a 2% floor keeps last-digit changes from being flagged
    last_digit = stats.accuracy_check("m", [1.0, 1.0], [1.01])
    assert last_digit is not None and not last_digit.flagged
    moved = stats.accuracy_check("m", [1.0, 1.0], [1.05])
    assert moved is not None and moved.flagged
    assert stats.accuracy_check("m", [], [1.0]) is None
