"""Prefect flow `benchmark`: a fixed suite of profiled runs, each judged against its series' history.

Meant for a scheduled deployment (deploy/prefect.yaml runs it nightly). Each run is a full
`profile-training` subflow tagged `run_kind=benchmark`; afterwards every run gets a `yolo_mlops.trend`
verdict from `yolo_mlops.trends`. The flow fails when a series regressed (so Prefect automations can
notify), after all runs have been tracked and judged; a run that crashes does not stop the others.
"""

from __future__ import annotations

from prefect import flow, task
from prefect.artifacts import create_markdown_artifact
from prefect.cache_policies import NO_CACHE
from pydantic import BaseModel, Field

from yolo_mlops.flows.profile_training import profile_training
from yolo_mlops import tracking, trends
from yolo_mlops.run.config import ProfilerSettings, RunSpec


def default_suite() -> list[RunSpec]:
    return [RunSpec(model="yolo11n.yaml", imgsz=640, batch=16, epochs=100, max_steps=60,
                    synthetic_images=256, experiment="yolo-mlops-benchmark", run_kind="benchmark",
                    profiler=ProfilerSettings(skip_first=10, wait=5, warmup=2, active=5))]


class BenchmarkSuite(BaseModel):
    runs: list[RunSpec] = Field(default_factory=default_suite)
    threshold_pct: float = Field(default=trends.DEFAULT_THRESHOLD_PCT, gt=0)
    window: int = Field(default=trends.DEFAULT_WINDOW, ge=trends.MIN_HISTORY)
    fail_on_regression: bool = True


class RegressionDetected(RuntimeError):
    pass


@task(cache_policy=NO_CACHE, persist_result=False)
def judge_run(run_id: str, threshold_pct: float, window: int) -> list[trends.TrendVerdict]:
    mlflow = tracking.client()
    verdicts = trends.check_run(mlflow, run_id, threshold_pct, window)
    tags, metrics = trends.verdict_tags_and_metrics(verdicts)
    tracking.log_values(mlflow, run_id, tags=tags, metrics=metrics)
    return verdicts


@flow(name="benchmark", log_prints=True)
def benchmark(suite: BenchmarkSuite = BenchmarkSuite()) -> dict[str, list[dict]]:
    outcome: dict[str, list[dict]] = {}
    failures: list[str] = []
    for spec in suite.runs:
        spec = spec.model_copy(update={"run_kind": "benchmark"})
        label = f"{spec.model} {spec.imgsz}px b{spec.batch} {spec.variant}"
        try:
            result = profile_training(spec)
        except Exception as exc:  # one broken configuration must not hide the others' trends
            failures.append(f"{label}: {type(exc).__name__}: {exc}")
            continue
        verdicts = judge_run(result.run_id, suite.threshold_pct, suite.window)
        outcome[result.run_id] = [v.as_dict() for v in verdicts]
        for v in verdicts:
            print(f"{label} {v.metric}: {v.status} (latest {_num(v.latest)}, baseline {_num(v.baseline_median)}, "
                  f"worse by {_num(v.change_pct)}%)")
    create_markdown_artifact(_markdown(outcome, failures), key="benchmark-trends")
    regressions = [run for run, vs in outcome.items() if any(v["status"] == "regression" for v in vs)]
    if failures or (regressions and suite.fail_on_regression):
        raise RegressionDetected(f"regressions in runs {regressions}; failed runs: {failures}")
    return outcome


def _markdown(outcome: dict[str, list[dict]], failures: list[str]) -> str:
    lines = ["# Benchmark trends", "", "| run | metric | status | latest | baseline median | worse by % | noise % |",
             "|---|---|---|---|---|---|---|"]
    for run_id, verdicts in outcome.items():
        for v in verdicts:
            lines.append(f"| `{run_id}` | `{v['metric']}` | **{v['status']}** | {_num(v['latest'])} | "
                         f"{_num(v['baseline_median'])} | {_num(v['change_pct'])} | {_num(v['noise_pct'])} |")
    lines += ["", *[f"- FAILED: {f}" for f in failures]]
    return "\n".join(lines)


def _num(value: float | None) -> str:
    return "" if value is None else f"{value:.4g}"
