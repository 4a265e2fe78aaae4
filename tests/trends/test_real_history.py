"""Trends over a real history: two nights of the benchmark flow on Prefect's test server, 4 tiny CPU profiled
runs each (real ultralytics training, real torch.profiler traces, real SQLite MLflow store). Every run of the
second night has a slowed operator injected from this test's code: a forward hook on the model's first layer
that spends 1 s in an operator labelled `test_injected::slow_op` (a `record_function` around a sleep: a fixed
wall-clock cost, so the shift stands out of this shared machine's CPU-contention noise, which reaches +-30%
between runs) inside the forward pass. Nothing else differs. The history is 8 real runs; no number is copied
or edited. Significance: 0.01 instead of the default 0.001 (Otava's, meant for histories of dozens of runs):
with 4 runs a side and this machine's contention noise, a Welch t-test of even a 10x shift lands near 0.001."""

from __future__ import annotations

import io
import json
import time
from contextlib import redirect_stdout
from pathlib import Path

import pytest
import torch
import workloads

from yolo_mlops import names
from yolo_mlops.tracking import queries
from yolo_mlops.trends import history

pytestmark = pytest.mark.slow

EXPERIMENT = f"trends-real-{time.time_ns()}"
INJECTED = "test_injected::slow_op"
MAX_PVALUE = 0.01


def _settings():
    from yolo_mlops.trends.trend import DetectionSettings

    return DetectionSettings(max_pvalue=MAX_PVALUE)


SETTINGS = _settings()


def tiny_suite():
    from yolo_mlops.config import BenchmarkSuite, build_run_spec

    tiny = build_run_spec(workloads.tiny(epochs=2, max_steps=6, synthetic_images=8, experiment=EXPERIMENT))
    # One profiled step, without shapes or memory events: the attribution needs the operator, not the allocator,
    # and a small trace is quick to parse and write.
    # confirm_repeats=0: this history is about the verdict, the attribution and the artifacts of a night; the
    # confirmation runs are exercised by the flow test in test_verdicts.py
    return BenchmarkSuite(runs=[tiny], repeats=4, max_pvalue=MAX_PVALUE, confirm_repeats=0)


def inject_slow_operator(monkeypatch) -> None:
    """Every training run started while this is active spends 1 s in a labelled operator in its forward pass."""
    from yolo_mlops.run import training

    original = training._Instrumentation.on_train_start

    def on_train_start(self, trainer):
        original(self, trainer)

        def slow(module, args, output):
            with torch.profiler.record_function(INJECTED):
                time.sleep(1.0)

        trainer.model.model[0].register_forward_hook(slow)

    monkeypatch.setattr(training._Instrumentation, "on_train_start", on_train_start)


@pytest.fixture(scope="module")
def nights(prefect_server):
    """Night 1: baseline. Night 2: the slowed operator. Returns (night-1 outcome, night-2 exception)."""
    from yolo_mlops.flows.benchmark import RegressionDetected, benchmark

    first = benchmark(tiny_suite())
    mp = pytest.MonkeyPatch()
    inject_slow_operator(mp)
    try:
        with pytest.raises(RegressionDetected) as failed:
            benchmark(tiny_suite())
    finally:
        mp.undo()
    return first, failed.value


@pytest.fixture(scope="module")
def series(nights, mlflow_client):
    experiment_id = queries.find_experiment_id(mlflow_client, EXPERIMENT)
    assert experiment_id is not None
    grouped = history.group_series(history.load_history(mlflow_client, [experiment_id]))
    (runs,) = grouped.values()
    return runs


def test_first_night_has_no_verdict_and_second_night_fails_on_the_regression(nights, series):
    first, failure = nights
    ((key, judged),) = first.items()
    assert judged.status == "insufficient_history" and len(judged.runs_tonight) == 4
    assert key == series[0].series and len(series) == 8
    assert "new regression" in str(failure) and "perf/step_time_ms_p50" in str(failure)
    assert INJECTED in str(failure)  # the failure message names the operator that moved


def test_detector_finds_the_shift_at_the_first_slowed_run(nights, series):
    from yolo_mlops.trends.trend import series_trend, verdict

    trend = series_trend(series, SETTINGS)
    # the shift at the first slowed run; any other change point lies inside a night, with 2 runs of that night on
    # each side of it: the shared machine's load moving between runs (seen: -9% between a night's 2nd and 3rd)
    inside_or_at_shift = {series[2].run_id, series[4].run_id, series[6].run_id}
    step = trend.metric(names.STEP_TIME_P50)
    assert step is not None
    change = next((c for c in step.changes if c.run_id == series[4].run_id), None)
    assert change is not None, [c.index for c in step.changes]
    assert change.direction == "regression" and change.change_pct > 20
    assert {c.run_id for c in step.changes} <= inside_or_at_shift, [c.index for c in step.changes]
    # images/s is images over the summed step times (a mean, where the step time above is a median): one step
    # slowed by the shared machine moves it, so with 4 runs a side its change at the shift may miss the
    # significance, and the machine's load moving between the runs of one night may show as a change of its own.
    # Where found at the shift, the throughput fell; any other change point lies inside a night, with 2 runs of
    # that night on each side of it, never between a baseline and a slowed run.
    throughput = trend.metric(names.IMAGES_PER_S)
    assert throughput is not None
    found = {c.run_id: c for c in throughput.changes}
    assert set(found) <= inside_or_at_shift, [c.index for c in throughput.changes]
    at_shift = found.get(series[4].run_id)
    assert at_shift is None or (at_shift.direction == "regression" and at_shift.change_pct < 0)
    # deterministic: the same history gives the same answer (compared as text: a version boundary with one run on
    # a side, as when a commit lands between two runs, has p = nan, and nan != nan)
    assert repr(series_trend(series, SETTINGS)) == repr(trend)
    # once per change point: judged as if only the newest run were tonight's, the shift is old news
    assert verdict(trend, {series[-1].run_id}).status == "stable"
    assert verdict(trend, {r.run_id for r in series[4:]}).status == "regression"


def test_attribution_names_the_injected_operator_and_phase(nights, series, mlflow_client):
    from yolo_mlops.trends.attribution import attribute_runs, change_point_attributions
    from yolo_mlops.trends.trend import series_trend

    # over the planted nights: the 4 baseline runs against the 4 slowed ones, whatever segments the detector drew
    a = attribute_runs(mlflow_client, series[:4], series[4:])
    assert a.runs_without_tables == () and len(a.before_runs) == 4 and len(a.after_runs) == 4
    operators = [c for c in a.contributions if c.kind == "operator"]
    assert operators[0].name == INJECTED, [c.name for c in operators[:5]]
    assert operators[0].delta_ms == pytest.approx(1000, rel=0.1)  # the injected 1 s per step
    assert operators[0].before_ms == 0 and operators[0].consistency == 1.0  # every slowed run has it
    phases = [c for c in a.contributions if c.kind == "phase"]
    assert phases[0].name == "forward_loss"
    share = phases[0].share_pct
    assert share is not None and share > 50  # most of the step-time shift is in forward+loss
    backward = [c for c in phases if c.name == "backward"]  # unrelated phase: moves far less, if at all
    assert all(abs(c.delta_ms) < phases[0].delta_ms / 2 for c in backward)

    # what the trends report shows: the attribution of the change point at the first slowed run, over the segments
    # the detector found on each side of it (4 runs, or 2 where the machine's load moved inside a night and the
    # detector put a change point there too, as test_detector_finds_the_shift_at_the_first_slowed_run allows):
    # every run on either side is a baseline run before it and a slowed run after it, so it names the same operator
    trend = series_trend(series, SETTINGS)
    step = trend.metric(names.STEP_TIME_P50)
    assert step is not None
    change = next((c for c in step.changes if c.run_id == series[4].run_id), None)
    assert change is not None
    at_change = change_point_attributions(mlflow_client, trend)[(names.STEP_TIME_P50, change.run_id)]
    assert set(at_change.before_runs) <= {r.run_id for r in series[:4]} and len(at_change.before_runs) >= 2
    assert set(at_change.after_runs) <= {r.run_id for r in series[4:]} and len(at_change.after_runs) >= 2
    top = next(c for c in at_change.contributions if c.kind == "operator")
    assert top.name == INJECTED and top.delta_ms == pytest.approx(1000, rel=0.1) and top.consistency == 1.0


def test_benchmark_runs_carry_verdict_tags_plot_and_report(nights, series, mlflow_client):
    for r in series[4:]:
        run = mlflow_client.get_run(r.run_id)
        assert run.data.tags[names.TREND] == "regression"
        assert run.data.tags[names.TREND_PREFIX + "step_time_ms_p50"] == "regression"
        assert run.data.tags[names.TREND_CHANGE_RUN] == series[4].run_id
        assert (
            run.data.tags[names.BENCHMARK_NIGHT]
            == mlflow_client.get_run(series[4].run_id).data.tags[names.BENCHMARK_NIGHT]
        )
        logged = {f.path for f in mlflow_client.list_artifacts(r.run_id, names.TRENDS_DIR)}
        assert logged == {names.TRENDS_PLOT_PNG, names.TRENDS_REPORT_MD}
    local = mlflow_client.download_artifacts(series[-1].run_id, names.TRENDS_PLOT_PNG)
    assert Path(local).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    for r in series[:4]:
        assert mlflow_client.get_run(r.run_id).data.tags[names.TREND] == "insufficient_history"


def test_prefect_artifacts_of_the_nights(nights, series):
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

    with get_client(sync_client=True) as client:
        markdown = client.read_artifacts(
            artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=["benchmark-trends"]))
        )
        images = client.read_artifacts(
            artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=[f"benchmark-series-{series[0].series}"]))
        )
    texts = [str(a.data) for a in markdown]
    assert any("**regression**" in t and INJECTED in t for t in texts)
    assert any("**insufficient_history**" in t for t in texts)
    links = [str(a.data) for a in images]
    assert links and all(names.TRENDS_PLOT_PNG in t for t in links)  # links to the MLflow artifact
    assert any(series[-1].run_id in t for t in links)


def test_real_run_series_tag_equals_the_key_rebuilt_from_its_params(series, mlflow_client):
    from yolo_mlops.run.environment import series_identity_from_params

    run = mlflow_client.get_run(series[0].run_id)
    identity = series_identity_from_params(run.data.params, run.data.tags)
    assert identity is not None
    assert run.data.tags[names.SERIES] == identity.key
    assert run.data.params["env.nvidia_driver"] == "none"  # no driver on this CPU machine: said, not left out


def _cli(argv: list[str]) -> tuple[int, str]:
    from yolo_mlops.cli import main

    out = io.StringIO()
    with redirect_stdout(out):
        rc = main(argv)
    return rc, out.getvalue()


def test_trends_command_lists_and_shows_the_series_with_its_plot(series, tmp_path):
    rc, text = _cli(["trends", "--experiment", EXPERIMENT, "--max-pvalue", str(MAX_PVALUE)])
    assert rc == 0 and series[0].series in text and "regression" in text
    plot = tmp_path / "series.png"
    rc, text = _cli(
        [
            "trends",
            "--experiment",
            EXPERIMENT,
            "--series",
            series[0].series[:6],
            "--plot",
            str(plot),
            "--max-pvalue",
            str(MAX_PVALUE),
        ]
    )
    assert rc == 0 and f"regression from run {series[4].run_id}" in text and INJECTED in text
    assert plot.read_bytes()[:4] == b"\x89PNG"
    rc, text = _cli(
        [
            "trends",
            "--experiment",
            EXPERIMENT,
            "--series",
            series[0].series,
            "--format",
            "json",
            "--max-pvalue",
            str(MAX_PVALUE),
        ]
    )
    data = json.loads(text)
    step = next(m for m in data["metrics"] if m["metric"] == names.STEP_TIME_P50)
    assert [c["run_id"] for c in step["changes"]] == [series[4].run_id]


def test_compare_two_runs_names_the_operator_and_logs_the_diff(series, mlflow_client):
    a, b = series[0].run_id, series[-1].run_id
    rc, text = _cli(["compare", a, b, "--format", "json"])
    data = json.loads(text)
    assert rc == 0 and data["warning"] is None
    operators = [c for c in data["contributions"] if c["kind"] == "operator"]
    assert operators[0]["name"] == INJECTED and operators[0]["delta_ms"] == pytest.approx(1000, rel=0.1)
    table = queries.load_run_table(mlflow_client, b, names.COMPARE_TABLE)
    assert table is not None
    operators = table[table["kind"] == "operator"].sort_values("delta_ms_per_step", ascending=False)
    assert operators["name"].iloc[0] == INJECTED


def test_compare_two_traces(series, mlflow_client, tmp_path):
    traces = []
    for r in (series[0], series[-1]):
        folder = Path(mlflow_client.download_artifacts(r.run_id, names.PROFILER_DIR, str(tmp_path / r.run_id)))
        traces += sorted(folder.glob("*.pt.trace.json*"))[-1:]
    rc, text = _cli(["compare", str(traces[0]), str(traces[1])])
    assert rc == 0
    first_phase = next(line for line in text.splitlines() if line.startswith("| phase"))
    assert "forward_loss" in first_phase
