import time

import pytest
from mlflow.entities import Metric, RunTag

from yolo_mlops import trends


@pytest.mark.parametrize("latest, status", [(100.5, "stable"), (112.0, "regression"), (88.0, "improvement")])
def test_judge_step_time_against_known_history(latest, status):
    history = [99.0, 100.0, 101.0, 100.0, 99.5, 100.5]
    v = trends.judge(history, latest, "perf/step_time_ms_p50", higher_is_better=False, threshold_pct=5)
    assert v.status == status
    assert v.baseline_median == pytest.approx(100.0)
    assert v.change_pct == pytest.approx(latest - 100.0)


def test_noisy_series_needs_a_bigger_change_than_its_noise():
    noisy = [80.0, 120.0, 95.0, 110.0, 85.0, 105.0, 90.0, 115.0]
    v = trends.judge(noisy, 112.0, "perf/step_time_ms_p50", higher_is_better=False, threshold_pct=5)
    assert v.change_pct > 5 and v.status == "stable"  # 12% worse, but within 3 robust sigmas of the series


def test_throughput_drop_is_a_regression_and_short_history_gives_no_verdict():
    v = trends.judge([500.0, 505.0, 498.0, 502.0], 440.0, "perf/images_per_s", higher_is_better=True)
    assert v.status == "regression" and v.change_pct == pytest.approx(100 * 61 / 501, rel=1e-3)
    assert trends.judge([500.0, 505.0], 100.0, "perf/images_per_s", True).status == "insufficient_history"


def test_check_run_reads_only_its_series_from_mlflow(mlflow_client):
    """History is written as plain MLflow runs here (test data); the query and the verdict are real."""
    experiment = mlflow_client.create_experiment(f"trend-{time.time_ns()}")

    def run(series: str, step_ms: float) -> str:
        created = mlflow_client.create_run(experiment, tags={"yolo_mlops.series_key": series})
        mlflow_client.log_batch(created.info.run_id, metrics=[
            Metric("perf/step_time_ms_p50", step_ms, int(time.time() * 1000), 0)])
        mlflow_client.set_terminated(created.info.run_id)
        time.sleep(0.01)  # distinct start times
        return created.info.run_id

    for value in (100, 101, 99, 100, 100):
        run("series-a", value)
    run("series-b", 500)  # another series: must not count
    newest = run("series-a", 120)
    verdicts = trends.check_run(mlflow_client, newest)
    assert [(v.metric, v.status, v.history_runs) for v in verdicts] == [("perf/step_time_ms_p50", "regression", 5)]
    tags, metrics = trends.verdict_tags_and_metrics(verdicts)
    assert tags["yolo_mlops.trend"] == "regression"
    assert metrics["trend/step_time_ms_p50_worse_pct"] == pytest.approx(20.0)
