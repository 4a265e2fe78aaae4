"""The nightly `benchmark` flow end to end with repeats='auto' and auto_bisect: real CPU training into a real
SQLite MLflow store, Prefect's test server with a real work pool and `bisect` deployment (no worker runs the
bisection: what is checked is where it is sent and with what).

Night 1 (commit a...): no history, so repeats='auto' runs the cap. Night 2 (commit b...): every run 2 s a step
slower (a sleep in a forward hook: far above this shared machine's noise); repeats='auto' picks the runs from
night 1's noise, the regression is confirmed, and the flow hands the commit range to the bisect deployment on
this machine's work queue before it fails."""

from __future__ import annotations

import re
import time

import pytest
import workloads

from yolo_mlops import names

EXPERIMENT = f"nightly-auto-{time.time_ns()}"
GOOD, BAD = "a" * 40, "b" * 40
POOL, DEPLOYMENT = "nightly-bisect-pool", "bisect-nightly"


def _suite():
    from yolo_mlops.config import BenchmarkSuite, build_run_spec

    tiny = build_run_spec(workloads.tiny(epochs=2, max_steps=6, synthetic_images=8, experiment=EXPERIMENT))
    return BenchmarkSuite(
        runs=[tiny],
        repeats="auto",
        target_shift_pct=50,
        max_repeats=3,
        max_pvalue=0.01,
        confirm_repeats=2,
        auto_bisect=True,
        bisect_deployment=f"bisect/{DEPLOYMENT}",
    )


def _slow_runs(monkeypatch, seconds: float) -> None:
    from yolo_mlops.run import training

    original = training._Instrumentation.on_train_start

    def on_train_start(self, trainer):
        original(self, trainer)
        trainer.model.model[0].register_forward_hook(lambda *_: time.sleep(seconds))

    monkeypatch.setattr(training._Instrumentation, "on_train_start", on_train_start)


@pytest.fixture(scope="module")
def two_nights(prefect_server):
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import WorkPoolCreate

    from yolo_mlops.flows.benchmark import RegressionDetected, benchmark
    from yolo_mlops.flows.bisection import bisect

    with get_client(sync_client=True) as client:
        client.create_work_pool(WorkPoolCreate(name=POOL, type="process"))
    deployment_id = bisect.to_deployment(name=DEPLOYMENT, work_pool_name=POOL).apply()
    mp = pytest.MonkeyPatch()
    try:
        mp.setenv("YOLO_MLOPS_GIT_COMMIT", GOOD)
        first = benchmark(_suite())
        mp.setenv("YOLO_MLOPS_GIT_COMMIT", BAD)
        _slow_runs(mp, 2.0)
        with pytest.raises(RegressionDetected) as failed:
            benchmark(_suite())
    finally:
        mp.undo()
    return first, failed.value, deployment_id


@pytest.mark.slow
def test_repeats_auto_and_auto_bisect_through_the_flow(two_nights, mlflow_client):
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import DeploymentFilter, DeploymentFilterId

    from yolo_mlops.run.environment import machine_name
    from yolo_mlops.tracking import queries

    first, failure, deployment_id = two_nights
    ((_, night1),) = first.items()
    assert len(night1.runs_tonight) == 3  # no history: the cap
    assert night1.notes == ["repeats auto: no step-time history yet, 3 runs (the cap)"]

    experiment_id = queries.find_experiment_id(mlflow_client, EXPERIMENT)
    assert experiment_id is not None
    runs = queries.search_records(mlflow_client, [experiment_id])  # oldest first
    night2 = [r for r in runs[3:] if names.BENCHMARK_CONFIRMATION not in r.tags]
    confirmation = [r for r in runs[3:] if names.BENCHMARK_CONFIRMATION in r.tags]
    message = str(failure)
    picked = re.search(r"repeats auto: (?:(\d) runs detect|the cap of (\d) runs)", message)
    assert picked is not None, message  # the night's note is in the failure message
    assert len(night2) == int(picked.group(1) or picked.group(2)) and 2 <= len(night2) <= 3
    # repeats='auto' re-measures with as many runs as the night ran (confirm_repeats=2 at the least)
    assert len(confirmation) == max(2, len(night2)) and f"confirmed by {len(confirmation)} confirmation runs" in message
    assert all(r.tags[names.TREND] == "regression" for r in night2 + confirmation)

    assert f"auto-bisect: started bisect/{DEPLOYMENT} run" in message
    assert f"on work queue '{machine_name()}' of pool '{POOL}'" in message
    with get_client(sync_client=True) as client:
        (flow_run,) = client.read_flow_runs(
            deployment_filter=DeploymentFilter(id=DeploymentFilterId(any_=[deployment_id]))
        )
    assert flow_run.parameters["good"] == GOOD and flow_run.parameters["bad"] == BAD
    assert flow_run.parameters["run_id"] in {r.run_id for r in night2}
    assert flow_run.work_queue_name == machine_name()
    assert flow_run.job_variables == {"env": {"YOLO_MLOPS_MACHINE": machine_name()}}


@pytest.mark.parametrize(
    ("regressions", "failures", "fail_on_regression", "raised"),
    [
        ([], [], True, None),
        (["s1"], [], True, "RegressionDetected"),
        (["s1"], ["cfg 1: OOM"], True, "RegressionDetected"),
        ([], ["cfg 1: OOM"], True, "BenchmarkRunsFailed"),
        (["s1"], [], False, None),
        (["s1"], ["cfg 1: OOM"], False, "BenchmarkRunsFailed"),
    ],
)
def test_the_night_fails_with_what_happened(regressions, failures, fail_on_regression, raised):
    """A regression fails the night as RegressionDetected (failed runs in its message too); runs that failed
    without a regression that fails the night, as BenchmarkRunsFailed; both are NightlyBenchmarkFailed."""
    from yolo_mlops.flows.benchmark import NightlyBenchmarkFailed, night_failure
    from yolo_mlops.trends.nightly import JudgedSeries

    judged = [JudgedSeries(s, f"workload {s}", "regression", ["r1"], 10, ["step time +20%"], "r1") for s in regressions]
    failed = night_failure(judged, failures, fail_on_regression)
    if raised is None:
        assert failed is None
        return
    assert type(failed).__name__ == raised and isinstance(failed, NightlyBenchmarkFailed)
    assert all(f"failed run: {f}" in str(failed) for f in failures)
    assert all(f"new regression in workload {s} [{s}]" in str(failed) for s in regressions)
