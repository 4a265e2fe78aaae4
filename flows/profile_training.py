"""Prefect flow `profile-training`: one profiled YOLO11 training run, tracked in MLflow.

Thin on purpose: each task calls one function of `yolo_mlops.run.pipeline`; the flow only wires them and
guarantees the MLflow run ends FINISHED, or FAILED/KILLED with what was captured.
"""

from __future__ import annotations

from prefect import flow, task
from prefect.artifacts import create_markdown_artifact
from prefect.cache_policies import NO_CACHE

from yolo_mlops.config import RunSpec
from yolo_mlops.run import gpu_lock, pipeline
from yolo_mlops.run.pipeline import PreparedRun, RunAnalysis, RunResult
from yolo_mlops.run.training import TrainingOutcome
from yolo_mlops.tracking import connection, run_end

# Inputs are live objects (profiler tables, data frames): hashing them for Prefect's cache would be waste.
_task = task(cache_policy=NO_CACHE, persist_result=False)


@_task
def prepare(spec: RunSpec) -> PreparedRun:
    return pipeline.prepare(spec)


@_task
def train(prepared: PreparedRun) -> TrainingOutcome:
    return pipeline.train(prepared)


@_task
def analyze(prepared: PreparedRun, outcome: TrainingOutcome) -> RunAnalysis:
    return pipeline.analyze(prepared, outcome)


@_task
def track(prepared: PreparedRun, outcome: TrainingOutcome, analysis: RunAnalysis) -> RunResult:
    return pipeline.track(prepared, outcome, analysis)


@flow(name="profile-training", log_prints=True)
def profile_training(spec: RunSpec = RunSpec(), gpu_limit: str | None = gpu_lock.AUTO) -> RunResult:
    """`gpu_limit`: Prefect concurrency limit held while training ("auto" = gpu-<index> on a GPU with a
    shared Prefect server; None when the caller, e.g. a sweep, already holds it)."""
    prepared = prepare(spec)
    mlflow = connection.client()
    with run_end.run_guard(mlflow, prepared.run_id, salvage=pipeline.RunSalvage(mlflow, prepared)):
        with gpu_lock.hold(gpu_lock.limit_names(prepared.plan.device, gpu_limit)):
            outcome = train(prepared)
        analysis = analyze(prepared, outcome)
        result = track(prepared, outcome, analysis)
    create_markdown_artifact(
        pipeline.summary_markdown(result, spec), key="profile-run-summary", description=f"MLflow run {result.run_id}"
    )
    if result.report_markdown:
        create_markdown_artifact(
            result.report_markdown,
            key="profile-run-report",
            description=f"Trace analysis and findings of MLflow run {result.run_id}",
        )
    return result
