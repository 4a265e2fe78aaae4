"""Operator series: what a run logs (op/*), how a series judges its operators, and what it reports.

Histories are generated (tests/histories.py: `operator_history`, operators with their own noise, a shared load
factor, a new commit every night); the real-run counterpart is test_operator_planted.py. The rates are simulated
with `operator_nights`, the nightly judging night by night with confirmation runs (docs/trends.md has the larger
simulation of benchmarks/bench_operator_series.py).
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest
from histories import operator_history, operator_levels, operator_nights

from yolo_mlops import names
from yolo_mlops.analysis import operators as run_operators
from yolo_mlops.trends import confirm, op_series, operators, power, trend, trend_report
from yolo_mlops.trends.attribution import Key, RunProfile

LEVELS = operator_levels(30)
OPS = list(LEVELS)
SMALL = OPS[12]  # about 2% of the step


def _frame(rows: list[tuple[str, int, float]], step_us: float, steps: int) -> pd.DataFrame:
    """A key_averages frame as the profiler writes it (`_frame`): name, calls, self CPU time, CPU time."""
    data = [{"name": "ProfilerStep*", "calls": steps, "self_cpu_time_us": 100.0, "cpu_time_us": step_us}]
    data += [{"name": n, "calls": c, "self_cpu_time_us": us, "cpu_time_us": us} for n, c, us in rows]
    return pd.DataFrame(data).assign(self_device_time_us=0.0)


# ---- what a run logs ----------------------------------------------------------------------------------------


def test_a_run_logs_its_operators_per_step_above_the_floor_and_at_least_the_top_20():
    rows = [(f"aten::op{i:02d}", 3, 3000.0 * 0.7**i) for i in range(60)]
    rows += [("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", 3, 1500.0), ("aten::op00", 3, 300.0)]
    frame = _frame(rows, step_us=30_000.0, steps=3)
    metrics = run_operators.operator_metrics(frame, None)
    assert metrics[names.OP_STEP_MS] == pytest.approx(10.0)  # 30 ms over 3 profiled steps
    ops = {m: v for m, v in metrics.items() if m.startswith(names.OP_HOST_PREFIX)}
    assert metrics[names.operator_metric("operator", "aten::op00")] == pytest.approx(1.1)  # rows of a name summed
    assert names.OP_HOST_PREFIX + "enumerate_DataLoader___SingleProcessDataLoaderIter.__next__" in ops
    assert len(ops) == 20  # only 15 are at 0.1% of the step: the top 20 are logged anyway
    per_step = run_operators.per_step(frame, "self_cpu_time_us", 3)
    left_out = [ms for op, ms in per_step.items() if names.operator_metric("operator", op) not in ops]
    assert metrics[names.OP_FLOOR_MS] == pytest.approx(max(left_out))  # what the largest operator left out took
    assert run_operators.operator_metrics(None, None) == {}  # no tables: nothing, so a gap, never a zero


def test_a_gpu_run_logs_its_kernels_self_device_time_beside_the_host_operators():
    host = _frame([("aten::conv2d", 1, 4000.0), ("cudaLaunchKernel", 50, 2000.0)], step_us=10_000.0, steps=1)
    device = host.copy()
    device["self_device_time_us"] = [0.0, 3000.0, 0.0]  # the step row, a kernel, the launches (no device time)
    device.loc[1, "name"] = "void cutlass::Kernel<cutlass_80_tensorop_s1688gemm>(Params)"
    metrics = run_operators.operator_metrics(host, device)
    kernel = names.operator_metric("device", "void cutlass::Kernel<cutlass_80_tensorop_s1688gemm>(Params)")
    assert metrics[kernel] == pytest.approx(3.0) and kernel.startswith(names.OP_DEVICE_PREFIX)
    assert metrics[names.operator_metric("operator", "cudaLaunchKernel")] == pytest.approx(2.0)
    assert not [m for m in metrics if m.startswith(names.OP_DEVICE_PREFIX + "aten")]  # no device time: not logged


def test_at_most_30_operators_a_table_and_every_name_one_mlflow_takes():
    from mlflow.utils.validation import _validate_metric_name

    rows = [(f"void at::native::kernel<{i}, float>(" + "x" * 300 + ")", 1, 1000.0) for i in range(80)]
    metrics = run_operators.operator_metrics(_frame(rows, step_us=50_000.0, steps=1), None)
    ops = [m for m in metrics if m.startswith(names.OP_HOST_PREFIX)]
    assert len(ops) == run_operators.MAX_LOGGED
    for name in [*ops, names.operator_metric("device", "/a//b/../c"), names.operator_metric("operator", "x" * 400)]:
        _validate_metric_name(name)
        assert len(name) <= names.METRIC_NAME_MAX
    assert names.operator_of_metric(names.operator_metric("device", "aten::mm")) == ("device", "aten::mm")


# ---- a series' operators judged -------------------------------------------------------------------------------


def _night(runs, night: int) -> set[str]:
    return {r.run_id for r in runs if r.night == f"n{night:03d}"}


def test_a_small_operator_made_slower_is_found_at_its_night_with_its_version_boundary():
    runs = operator_history(11, slowed=(SMALL, 10, 3.0), torch_from=10, load_noise=0.025, op_noise=0.05, seed=3)
    t = trend.series_trend(runs)
    assert SMALL in {m.metric for m in t.operators} and len(t.operators) >= 20
    v = trend.verdict(t, _night(runs, 10))
    assert v.per_metric[SMALL] == "regression" and v.status == "regression"
    assert v.per_metric[names.STEP_TIME_P50] == "stable"  # +4% of the step: within the step time's noise
    assert [m for m, s in v.per_metric.items() if s != "stable"] == [SMALL]
    step_power = operators.step_power(t, 3)
    (found,) = operators.night_findings(t, v, step_power)
    assert found.factor == pytest.approx(3.0, rel=0.15) and found.severity == "moderate"
    assert found.below_step_power and 2 < (found.share_pct or 0) < step_power  # type: ignore[operator]
    line = operators.finding_line(found)
    assert line.startswith("aten::sim_op_12 self time x3") and "torch 2.14.1 -> 2.15.0" in line, line
    assert "of step, moderate (below the step time's detection power of" in line and "[regression; " in line
    assert f"--metric {SMALL}" in trend_report.bisect_command(v.new_changes[0])  # type: ignore[operator]
    # judged again the next night: reported once
    assert trend.verdict(t, _night(runs, 10) | {runs[-1].run_id}).per_metric[SMALL] == "regression"


def test_runs_without_tables_are_gaps_in_every_operator_series():
    runs = operator_history(8, without_tables=(3, 4, 5, 6), seed=4)
    t = trend.series_trend(runs)
    for m in t.operators:
        assert m.runs_without_metric == 4 and len(m.values) == len(runs) - 4
        assert all(v > 0 for v in m.values)  # never a zero standing in for a missing table
        assert not {"run0003", "run0004", "run0005", "run0006"} & set(m.run_ids)
    assert trend.verdict(t, _night(runs, 7)).status == "stable"


def test_an_operator_a_run_did_not_log_reads_zero_far_above_its_floor_and_a_gap_near_it():
    from histories import history_run

    big, edge = names.operator_metric("operator", "aten::big"), names.operator_metric("operator", "aten::edge")
    runs = []
    for i in range(6):  # the floor (the largest operator left out) is 0.3 ms
        ops = {big: 5.0} if i < 3 else {}  # vanished from run 3 on: far above the floor
        ops |= {edge: 0.35} if i % 2 else {}  # at the 20th place, in and out of the runs' cut
        metrics = {names.STEP_TIME_P50: 100.0, names.OP_STEP_MS: 100.0, names.OP_FLOOR_MS: 0.3, **ops}
        runs.append(history_run(i, metrics, {"commit": "c"}, "n0"))
    filled = op_series.with_values(runs, [big, edge])
    assert [r.metrics.get(big) for r in filled] == [5.0, 5.0, 5.0, 0.0, 0.0, 0.0]
    assert [r.metrics.get(edge) for r in filled] == [None, 0.35, None, 0.35, None, 0.35]  # gaps, never a false 0


def test_a_renamed_operator_is_a_rename_candidate_not_a_vanish_and_a_new_regression():
    new = names.operator_metric("operator", "aten::sim_op_04_renamed")
    runs = operator_history(10, renamed=(OPS[4], new, 8), torch_from=8, seed=6)
    t = trend.series_trend(runs)
    (rename,) = t.renames
    assert (rename.old, rename.new, rename.run_id) == (OPS[4], new, runs[24].run_id)
    assert rename.after_ms == pytest.approx(rename.before_ms, rel=0.1)
    joined = t.metric(new)
    assert joined is not None and joined.renamed_from == OPS[4] and t.metric(OPS[4]) is None
    assert not joined.changes  # one series across the rename: no step at it
    v = trend.verdict(t, _night(runs, 8))
    assert v.status == "stable" and v.new_renames == (rename,)
    line = operators.rename_line(rename)
    assert line.startswith("rename candidate: aten::sim_op_04 -> aten::sim_op_04_renamed") and "torch 2.14.1" in line


def test_a_renamed_operator_that_also_got_slower_is_judged_at_its_real_size():
    new = names.operator_metric("operator", "aten::sim_op_04_renamed")
    runs = operator_history(10, renamed=(OPS[4], new, 8), slowed=(OPS[4], 8, 1.5), torch_from=8, seed=7)
    t = trend.series_trend(runs)
    v = trend.verdict(t, _night(runs, 8))
    assert v.per_metric[new] == "regression"
    (found,) = operators.night_findings(t, v, None)
    assert found.factor == pytest.approx(1.5, rel=0.1) and found.renamed_from == OPS[4]  # x1.5, not "new"
    assert "aten::sim_op_04 -> aten::sim_op_04_renamed (renamed) self time x1.5" in operators.finding_line(found)


def test_an_operator_regression_is_confirmed_or_dismissed_like_step_time():
    runs = operator_history(11, slowed=(SMALL, 10, 3.0), seed=8)
    tonight = _night(runs, 10)
    kept = operator_history(1, levels=LEVELS, slowed=(SMALL, 0, 3.0), seed=80, first=500, night_offset=10)
    back = operator_history(1, levels=LEVELS, seed=81, first=500, night_offset=10)
    for extra, expected in ((kept, "regression"), (back, "suspected")):
        v, outcome = confirm.judge(trend.series_trend(runs + extra), tonight, {r.run_id for r in extra}, (SMALL,))
        assert v.status == expected and outcome.confirmed == (expected == "regression"), outcome.summary()
        assert v.per_metric[SMALL] == expected


# ---- a preempted run: an outlier of its night, set aside -----------------------------------------------------


def _series(t: trend.SeriesTrend, metric: str) -> trend.MetricTrend:
    found = t.metric(metric)
    assert found is not None, metric
    return found


def _preempted(runs, index: int, metric: str, factor: float):
    """The runs with run `index`'s `metric` x factor: the run lost time inside that operator (a preemption)."""
    r = runs[index]
    out = list(runs)
    out[index] = replace(r, metrics={**r.metrics, metric: r.metrics[metric] * factor})
    return out


def test_a_preempted_run_is_set_aside_from_the_operator_series_and_opens_no_event():
    runs = _preempted(operator_history(9, seed=21), 8 * 3 + 1, SMALL, 3.0)  # no change; tonight's second run
    t = trend.series_trend(runs)
    assert _series(t, SMALL).set_aside == (runs[25].run_id,)
    assert sum(len(m.set_aside) for m in t.operators) == 1  # the other operators and runs kept
    assert _series(t, SMALL).runs_without_metric == 0  # a gap of its own, not a run without tables
    v = trend.verdict(t, _night(runs, 8))
    assert not [m for m in confirm.needs_confirmation(v) if trend.is_operator(m)], v
    (row,) = [line for line in operators.operator_table(t).splitlines() if line.startswith("| aten::sim_op_12 |")]
    assert row.endswith("| 0 | 1 |")  # no run without tables, one set aside


def test_a_regression_with_a_preempted_run_in_its_night_is_found_with_the_outlier_set_aside():
    """Two quiet nights (1% noise) before; tonight the operator is x1.3 and one of its three runs also lost time
    inside it (x2.6): the night's mean t test, its variance swollen by that run, sees nothing; the screen sets the
    run aside and the two runs left show the step."""
    runs = operator_history(3, slowed=(SMALL, 2, 1.3), op_noise=0.01, load_noise=0.005, seed=8)
    runs = _preempted(runs, 8, SMALL, 2.6)
    t = trend.series_trend(runs)
    assert _series(t, SMALL).set_aside == (runs[8].run_id,)
    assert trend.verdict(t, _night(runs, 2)).per_metric[SMALL] == "regression"
    unscreened = trend.series_trend(runs, trend.DetectionSettings(outlier_sds=0.0))
    assert _series(unscreened, SMALL).set_aside == ()
    assert trend.verdict(unscreened, _night(runs, 2)).per_metric[SMALL] == "stable"  # the screen is why


def test_a_night_that_moves_as_a_whole_sets_nothing_aside():
    runs = operator_history(11, slowed=(SMALL, 10, 3.0), seed=8)
    t = trend.series_trend(runs)
    assert all(m.set_aside == () for m in t.operators)
    assert trend.verdict(t, _night(runs, 10)).per_metric[SMALL] == "regression"


def test_outliers_judged_by_night_size_as_arrays_match_a_plain_loop():
    rng = np.random.default_rng(5)
    nights = [list(np.exp(rng.normal(0, 0.05, int(k)))) for k in rng.integers(3, 7, op_series.NOISE_NIGHTS)]
    for g in rng.choice(len(nights), 12, replace=False):
        nights[g][0] *= 1.5  # outliers
    nights[3][1] = 0.0  # an operator not logged: its night neither judged nor read
    plain_pairs = [
        abs(np.log(a) - np.log(b))
        for values in nights
        if min(values) > 0
        for i, a in enumerate(values)
        for b in values[i + 1 :]
    ]
    sd = np.median(plain_pairs) / op_series.PAIR_MAD
    plain = {
        (g, k)
        for g, values in enumerate(nights)
        if min(values) > 0
        for k, x in enumerate(values)
        if abs(np.log(x) - np.median(np.log(values))) > 5 * sd
    }
    found = set(op_series._outliers(nights, 5.0))
    assert found == plain and len(found) >= 10


def test_preempted_runs_keep_the_operator_family_within_the_published_rate():
    """As below, with 15% of runs (confirmation runs included) preempted inside their window: 2 ms a profiled
    step lost inside one operator, drawn by its share of the step."""
    counts = operator_nights(15, 20, seed=11, night_noise=0.01, preempted=0.15)
    nights = counts["series_nights"]
    assert counts["opened"] <= 0.01 * nights + 3 * math.sqrt(0.01 * nights), counts
    assert counts["alerts"] == 0, counts


def test_the_operator_family_holds_a_night_of_many_operators_to_the_published_rate():
    """No change, 40 operators a series (the 20 or more judged), a new commit every night and torch every 5th,
    per-run load and a night effect: each operator tested at its own level, a night opens an operator event
    often (every boundary is a 1% test per operator); held to Holm over the operators it stays within the
    family's 1%, and no night alerts after its confirmation runs (the published rate: 1 in 1,000)."""
    counts = operator_nights(15, 20, seed=11, night_noise=0.01)
    nights = counts["series_nights"]
    assert nights == 300
    assert counts["raw_opened"] / nights >= 0.05, counts  # without the family: many nights open a false event
    assert counts["opened"] <= 0.01 * nights + 3 * math.sqrt(0.01 * nights), counts  # 1% + 3 binomial sd
    assert counts["alerts"] == 0, counts


def test_a_planted_operator_slowdown_is_found_where_step_time_is_blind():
    counts = operator_nights(40, 1, slowed=(12, 3.0), seed=12)
    assert counts["found"] / counts["series_nights"] >= 0.95, counts
    assert counts["alerts"] / counts["series_nights"] >= 0.9, counts  # confirmed by the confirmation runs
    assert counts["step_found"] / counts["series_nights"] <= 0.3, counts


def test_detection_power_per_operator_series():
    runs = operator_history(10, seed=13)
    t = trend.series_trend(runs)
    found = {d.metric: d for d in power.for_operators(t, 3)}
    assert set(found) == {m.metric for m in t.operators}
    assert all(d.repeats == 3 and math.isfinite(d.shift_pct) and 5 < d.shift_pct < 60 for d in found.values())
    table = trend_report.operator_section(t, power.for_trend(t, 3))
    assert "## Operator series" in table and "aten::sim_op_00" in table and "min. detectable step" in table


# ---- compare: beyond each operator's own noise -----------------------------------------------------------------


def _profiles(n: int, seed: int, slowed: dict[str, float] | None = None) -> list[RunProfile]:
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        entries: dict[Key, float] = {
            ("operator", f"aten::op{k:02d}"): 5.0 * 0.85**k * math.exp(0.05 * rng.normal()) for k in range(25)
        }
        for name, factor in (slowed or {}).items():
            entries[("operator", name)] *= factor
        out.append(RunProfile(f"r{seed}-{i}", 3, 40.0, entries))
    return out


def test_compare_of_two_sets_names_the_operators_beyond_their_own_noise():
    tests = operators.compare_operators(_profiles(4, 1), _profiles(4, 2, {"aten::op10": 1.6}))
    beyond = [t.name for t in tests if t.beyond_noise]
    assert beyond == ["aten::op10"]
    assert tests[0].noise_from == "the runs" and tests[0].factor == pytest.approx(1.6, rel=0.1)


def test_compare_of_two_runs_judges_against_the_series_history_or_not_at_all():
    a, b = _profiles(1, 3), _profiles(1, 4, {"aten::op10": 2.0})
    assert not any(t.beyond_noise for t in operators.compare_operators(a, b))  # no noise to judge by
    assert all(t.pvalue is None for t in operators.compare_operators(a, b))
    noise = {names.operator_metric("operator", f"aten::op{k:02d}"): (0.05, 40) for k in range(25)}
    tests = operators.compare_operators(a, b, noise)
    assert [t.name for t in tests if t.beyond_noise] == ["aten::op10"] and tests[0].noise_from == "the series history"


def test_compare_with_nothing_changed_names_an_operator_at_most_alpha_of_the_time():
    false = sum(
        any(t.beyond_noise for t in operators.compare_operators(_profiles(3, 2 * s), _profiles(3, 2 * s + 1)))
        for s in range(300)
    )
    assert false / 300 <= operators.COMPARE_ALPHA + 3 * math.sqrt(operators.COMPARE_ALPHA / 300), false


# ---- bisect from an operator finding -------------------------------------------------------------------------


def test_bisect_from_an_operator_finding_decides_on_the_operators_series():
    """search.bisect over generated runs: the commit at 5 makes one operator (2% of the step) 3x slower, +4% of
    a step whose run-to-run noise is 5%; --metric names the operator's series, so every step decides on its own
    log time (its noise 6%), never on step time or a figure."""
    from pathlib import Path

    from yolo_mlops.bisect import search
    from yolo_mlops.bisect.bisection_report import report as bisect_report
    from yolo_mlops.bisect.commit_runs import CommitRunner
    from yolo_mlops.bisect.git import Commit
    from yolo_mlops.bisect.models import BisectPlan, BisectRequest, ProfiledRun
    from yolo_mlops.config import RunSpec

    rng = np.random.default_rng(21)
    chain = [Commit(f"{i:040x}", f"commit {i}") for i in range(9)]
    plan = BisectPlan(
        BisectRequest(good=chain[0].hash, bad=chain[-1].hash, run_id="r", metric=SMALL),
        Path("."),
        chain[0],
        chain[-1],
        tuple(chain[1:]),
        RunSpec(),
        "r",
        "workload",
        False,
        "not checked",
    )

    class Generated(CommitRunner):
        def __init__(self) -> None:
            self.plan, self.count = plan, 0

        def run(self, commit, step, role):
            self.count += 1
            op = 2.0 * (3.0 if chain.index(commit) >= 5 else 1.0) * math.exp(rng.normal(0.0, 0.06))
            step_ms = (98.0 + op) * math.exp(rng.normal(0.0, 0.05))
            entries: dict[Key, float] = {("operator", "aten::sim_op_12"): op, ("operator", "aten::other"): 50.0}
            return ProfiledRun(commit, step, role, f"run{self.count}", op, math.log(op), step_ms, entries)

    runner = Generated()
    result = search.bisect(plan, runner, "parent")
    result.runs = runner.count
    text = bisect_report(plan, result)
    assert result.result == "first_bad" and result.first_bad == chain[5], text
    assert result.figure is None and f"decided on: operator series {SMALL}" in text
    assert search.figure_label(None, SMALL) == f"operator series {SMALL}"
