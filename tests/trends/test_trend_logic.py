"""Trend logic over hand-made histories: verdicts, directions, what changed, attribution ranking, pagination,
and the commands' bad-input messages. Histories here are plain MLflow runs (or typed records) written by the
test; the detection, queries and commands are real."""

from __future__ import annotations

import dataclasses
import io
import time
from contextlib import redirect_stderr, redirect_stdout

import numpy as np
import pytest
from mlflow.entities import Metric

from yolo_mlops import names
from yolo_mlops.tracking import queries
from yolo_mlops.trends import attribution, history, trend
from yolo_mlops.trends.attribution import Key, RunProfile
from yolo_mlops.trends.history import HistoryRun

VERSIONS = {
    "commit": "c" * 40,
    "torch": "2.14.1",
    "cuda": "13.0",
    "cudnn": "92400",
    "ultralytics": "8.4.190",
    "driver": "580.65",
    "python": "3.11.7",
}


def record(i: int, metrics: dict[str, float], night: str | None = None, **versions) -> HistoryRun:
    return HistoryRun(
        run_id=f"run{i:03d}",
        experiment_id="1",
        start_time_ms=1_700_000_000_000 + i * 3_600_000,
        series="s1",
        label="yolo11n.yaml 640px b16",
        metrics=metrics,
        versions={**VERSIONS, **versions},
        night=night,
        profiled_steps=5,
        step_time_ms=metrics.get(names.STEP_TIME_P50),
    )


def shifted_history(seed: int = 0, n_before: int = 12, n_after: int = 9, shift: float = 1.12) -> list[HistoryRun]:
    rng = np.random.default_rng(seed)
    runs = []
    for i in range(n_before + n_after):
        after = i >= n_before
        step = 100.0 * (shift if after else 1.0) * (1 + 0.01 * rng.standard_normal())
        runs.append(
            record(
                i,
                {names.STEP_TIME_P50: step, names.IMAGES_PER_S: 16_000.0 / step},
                night=f"n{i // 3}",
                **({"torch": "2.15.0", "commit": "d" * 40} if after else {}),
            )
        )
    return runs


def test_change_point_is_a_regression_once_with_what_changed():
    runs = shifted_history()
    t = trend.series_trend(runs)
    step_time, throughput = t.metric(names.STEP_TIME_P50), t.metric(names.IMAGES_PER_S)
    assert step_time is not None and throughput is not None
    (change,) = step_time.changes
    assert change.index == 12 and change.run_id == "run012" and change.direction == "regression"
    assert change.what_changed_text() == "commit cccccccc..dddddddd, torch 2.14.1 -> 2.15.0"
    (tput,) = throughput.changes
    assert tput.direction == "regression" and tput.change_pct < 0  # throughput fell: higher is better
    night_of_shift = {r.run_id for r in runs if r.night == "n4"}  # runs 12..14
    v = trend.verdict(t, night_of_shift)
    assert v.status == "regression" and [c.run_id for c in v.new_changes] == ["run012", "run012"]
    for later_night in ("n5", "n6"):  # the same shift is not reported again on later nights
        assert trend.verdict(t, {r.run_id for r in runs if r.night == later_night}).status == "stable"
    assert trend.latest_status(t) == "stable"


def test_speed_up_is_an_improvement():
    runs = shifted_history(seed=1, shift=0.85)
    t = trend.series_trend(runs)
    assert trend.verdict(t, {r.run_id for r in runs if r.night == "n4"}).status == "improvement"


def test_a_night_with_two_change_points_is_judged_by_the_worst():
    """Step times (ms) of a real two-night history from the CPU test suite, 4 runs a night, every run of the
    second night 1 s slower: the machine's load moved between its 2nd and 3rd runs, a second change point.
    The newest alone (-9%) would have called the night an improvement."""
    values = [468.0, 326.7, 138.8, 119.6, 1245.4, 1246.4, 1135.1, 1137.2]
    runs = [record(i, {names.STEP_TIME_P50: v}, night=f"n{i // 4}") for i, v in enumerate(values)]
    t = trend.series_trend(runs, trend.DetectionSettings(max_pvalue=0.01))
    v = trend.verdict(t, {r.run_id for r in runs[4:]})
    assert [(c.index, c.direction) for c in v.new_changes] == [(4, "regression"), (6, "improvement")]
    assert v.status == "regression" and v.per_metric[names.STEP_TIME_P50] == "regression"
    assert trend.verdict(t, {runs[-1].run_id}).status == "stable"  # both change points were another night's


def test_stationary_history_and_short_history():
    runs = shifted_history(seed=2, shift=1.0)
    t = trend.series_trend(runs)
    assert all(not m.changes for m in t.metrics)
    assert trend.verdict(t, {runs[-1].run_id}).status == "stable"
    short = runs[:4]
    assert (
        trend.verdict(trend.series_trend(short), {short[-1].run_id, short[-2].run_id}).status == "insufficient_history"
    )


def test_metric_missing_in_some_runs_is_counted_not_fatal():
    runs = shifted_history(seed=3)
    runs = [
        r if i % 4 else dataclasses.replace(r, metrics={names.STEP_TIME_P50: r.metrics[names.STEP_TIME_P50]})
        for i, r in enumerate(runs)
    ]
    t = trend.series_trend(runs)
    throughput = t.metric(names.IMAGES_PER_S)
    assert throughput is not None
    assert throughput.runs_without_metric == 6
    assert len(throughput.values) == len(runs) - 6
    assert t.metric("gpu/sm_util_pct_mean") is None  # no run logged it: not watched here


def profile(run_id: str, step: float, ops: dict[str, float], phases: dict[str, float]) -> RunProfile:
    entries: dict[Key, float] = {("operator", k): v for k, v in ops.items()}
    entries.update({("phase", k): v for k, v in phases.items()})
    return RunProfile(run_id, 5, step, entries)


def test_attribution_ranks_by_share_of_shift_with_consistency():
    def side(prefix: str, step: float, mm: float, add: float, forward_loss: float) -> list[RunProfile]:
        """4 runs; aten::conv and backward vary with the run but are the same on both sides."""
        return [
            profile(
                f"{prefix}{i}",
                step + i,
                {"aten::conv": 40 + i, "aten::mm": mm + 0.1 * i, "aten::add": add},
                {"forward_loss": forward_loss, "backward": 50.0 + i},
            )
            for i in range(4)
        ]

    before = side("b", 100, mm=10.0, add=5.0, forward_loss=40.0)
    after = side("a", 110, mm=19.0, add=5.5, forward_loss=49.0)
    a = attribution.attribute(before, after)
    assert a.shift_ms == pytest.approx(10.0)
    first_op = next(c for c in a.contributions if c.kind == "operator")
    assert first_op.name == "aten::mm" and first_op.delta_ms == pytest.approx(9.0)
    assert first_op.share_pct == pytest.approx(90.0) and first_op.consistency == 1.0
    assert first_op.pvalue == pytest.approx(0.0286, abs=1e-3)  # Mann-Whitney, 4 vs 4 fully separated
    phase = next(c for c in a.contributions if c.kind == "phase")
    assert phase.name == "forward_loss" and phase.share_pct == pytest.approx(90.0)
    assert all(c.name != "aten::conv" for c in a.contributions)  # did not move: not listed


def _run(mlflow, experiment_id: str, series: str, step_ms: float, **tags) -> str:
    created = mlflow.create_run(experiment_id, tags={names.SERIES: series, **tags})
    mlflow.log_batch(created.info.run_id, metrics=[Metric(names.STEP_TIME_P50, step_ms, int(time.time() * 1000), 0)])
    mlflow.set_terminated(created.info.run_id)
    time.sleep(0.005)
    return created.info.run_id


def test_history_reads_every_page(mlflow_client, monkeypatch):
    experiment_id = mlflow_client.create_experiment(f"pages-{time.time_ns()}")
    ids = [_run(mlflow_client, experiment_id, "paged", 100.0 + i) for i in range(7)]
    monkeypatch.setattr(queries, "SEARCH_PAGE_SIZE", 2)  # 7 runs = 4 pages
    records = history.load_history(mlflow_client, [experiment_id])
    assert [r.run_id for r in records] == ids


def test_runs_without_tables_get_a_note_not_a_crash(mlflow_client):
    experiment_id = mlflow_client.create_experiment(f"no-tables-{time.time_ns()}")
    for ms in (100, 101, 99, 100, 130, 131, 129, 130):
        _run(mlflow_client, experiment_id, "old", float(ms))
    runs = history.load_history(mlflow_client, [experiment_id])

    t = trend.series_trend(runs)
    (a,) = attribution.change_point_attributions(mlflow_client, t).values()
    assert a.contributions == () and "no attribution" in a.note and "before" in a.note
    assert len(a.runs_without_tables) == 4  # the before side only: the after side is not read for nothing


def _cli(argv):
    from yolo_mlops.cli import main

    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        rc = main(argv)
    return rc, out.getvalue(), err.getvalue()


def test_commands_answer_bad_input_in_one_line(mlflow_client, tmp_path):
    rc, _, err = _cli(["trends", "--experiment", "no-such-experiment-xyz"])
    assert rc == 2 and err.count("\n") == 1 and "does not exist" in err
    name = f"empty-{time.time_ns()}"
    experiment_id = mlflow_client.create_experiment(name)
    rc, _, err = _cli(["trends", "--experiment", name])
    assert rc == 2 and err.count("\n") == 1 and "no finished runs" in err
    only = _run(mlflow_client, experiment_id, "single", 100.0)
    rc, _, err = _cli(["trends", "--experiment", name, "--series", "single"])
    assert rc == 2 and err.count("\n") == 1 and f"has one run ({only})" in err
    rc, _, err = _cli(["trends", "--experiment", name, "--series", "nope"])
    assert rc == 2 and "no series 'nope'" in err
    _run(mlflow_client, experiment_id, "single", 101.0)
    rc, _, err = _cli(["trends", "--experiment", name, "--series", "single", "--metric", "gpu/sm_util_pct_mean"])
    assert rc == 2 and err.count("\n") == 1 and "no run of series single logged gpu/sm_util_pct_mean" in err
    rc, _, err = _cli(["trends", "--experiment", name, "--series", "single", "--plot", str(tmp_path / "no" / "x.png")])
    assert rc == 2 and "does not exist" in err
    rc, out, _ = _cli(["trends", "--experiment", name, "--series", "single"])
    assert rc == 0 and "no change points" in out
    rc, _, err = _cli(["compare", "0123456789abcdef0123456789abcdef", only])
    assert rc == 2 and err.count("\n") == 1 and "no MLflow run '0123456789abcdef0123456789abcdef'" in err
    (tmp_path / "t.json").write_text("{}")
    rc, _, err = _cli(["compare", str(tmp_path / "t.json"), only])
    assert rc == 2 and err.count("\n") == 1 and "two trace files or two MLflow run ids" in err


def test_the_documented_automation_is_a_valid_prefect_automation():
    """docs/deploy.md's automation parses as Prefect's own automation model and reacts to a failed run of
    the nightly deployment (the block id placeholder is replaced by a well-formed id)."""
    import re
    from pathlib import Path

    import yaml
    from prefect.events.schemas.automations import AutomationCore, EventTrigger
    from prefect.events.schemas.events import ResourceSpecification

    text = (Path(__file__).parents[2] / "docs" / "deploy.md").read_text()
    found = re.search(r"```yaml\n# nightly-regression.yaml\n(.*?)```", text, re.S)
    assert found is not None
    automation = AutomationCore.model_validate(
        yaml.safe_load(re.sub(r'"<id of .*?>"', '"00000000-0000-0000-0000-000000000001"', found.group(1)))
    )
    trigger = automation.trigger
    assert isinstance(trigger, EventTrigger)  # one event trigger, related to one resource
    assert trigger.expect == {"prefect.flow-run.Failed"}
    related = trigger.match_related
    assert isinstance(related, ResourceSpecification)
    # every machine's nightly deployment runs the flow `benchmark`
    assert related.root["prefect.resource.name"] == "benchmark"
    assert related.root["prefect.resource.role"] == "flow"
    assert automation.actions[0].type == "send-notification"
