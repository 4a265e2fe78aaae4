"""Prefect flow `benchmark`: one night of a fixed suite of profiled runs, each series judged on its history.

Meant for a scheduled deployment (deploy/prefect.yaml runs it nightly). Each configuration runs `repeats`
times (interleaved across configurations), every run a full `profile-training` subflow tagged
`run_kind=benchmark` and `yolo_mlops.benchmark.night=<this flow run>`, so the night has its own noise
estimate. Then each series touched tonight is analysed over its whole history (change points per watched
metric): its verdict is `regression` / `improvement` only when a change point starts among tonight's runs,
so one shift is reported once, on the night it appears. Each of tonight's runs gets the verdict tags, the
series' picture and report as MLflow artifacts; the flow publishes a Markdown and an image artifact and
fails on a new regression (after all runs were tracked and judged) so Prefect automations can notify.
"""

from __future__ import annotations

import tempfile
import uuid
from collections import defaultdict
from pathlib import Path

from prefect import flow, runtime, task
from prefect.artifacts import create_image_artifact, create_markdown_artifact
from prefect.cache_policies import NO_CACHE
from pydantic import BaseModel, Field

from yolo_mlops import trends
from yolo_mlops.flows.profile_training import profile_training
from yolo_mlops.render import markdown_table
from yolo_mlops.run.config import ProfilerSettings, RunSpec
from yolo_mlops.tracking import names, store
from yolo_mlops.trends import report


def default_suite() -> list[RunSpec]:
    return [RunSpec(model="yolo11n.yaml", imgsz=640, batch=16, epochs=100, max_steps=60,
                    synthetic_images=256, experiment="yolo-mlops-benchmark", run_kind="benchmark",
                    profiler=ProfilerSettings(skip_first=10, wait=5, warmup=2, active=5))]


class BenchmarkSuite(BaseModel):
    runs: list[RunSpec] = Field(default_factory=default_suite)
    repeats: int = Field(default=3, ge=1, description="runs per configuration per night (the night's noise)")
    max_pvalue: float = Field(default=0.001, gt=0, lt=1, description="significance of a change point")
    fail_on_regression: bool = True


class RegressionDetected(RuntimeError):
    pass


class JudgedSeries(BaseModel):
    series: str
    label: str
    status: str
    runs_tonight: list[str]
    history_runs: int
    new_changes: list[str]  # one line per new change point: metric, magnitude, run, what changed, attribution
    plot_run_id: str  # the run whose trends/series.png shows the series (tonight's last in it)


@task(cache_policy=NO_CACHE, persist_result=False)
def judge_series(experiment: str, run_ids: list[str], max_pvalue: float) -> list[JudgedSeries]:
    """Verdict of every series that tonight's runs belong to, logged on each of tonight's runs."""
    mlflow = store.client()
    tonight = set(run_ids)
    judged = []
    for key, runs in sorted(trends.load_experiment_series(mlflow, experiment).items()):
        mine = [r.run_id for r in runs if r.run_id in tonight]
        if not mine:  # a series no run of tonight belongs to: judged on the nights it runs
            continue
        trend = trends.series_trend(runs, trends.DetectionSettings(max_pvalue=max_pvalue))
        verdict = trends.verdict(trend, tonight)
        attributions = trends.attributions(mlflow, trend)
        lines = []
        for change in verdict.new_changes:
            unit = trend.metric(change.metric).unit
            line = report.change_line(change, unit)
            attribution = attributions.get((change.metric, change.run_id))
            if attribution is not None:
                line += "; moved: " + attribution.summary()
            lines.append(line)
        _log_on_runs(mlflow, mine, trend, verdict, attributions)
        judged.append(JudgedSeries(series=key, label=trend.label, status=verdict.status, runs_tonight=mine,
                                   history_runs=len(runs), new_changes=lines, plot_run_id=mine[-1]))
    return judged


def _log_on_runs(mlflow, run_ids: list[str], trend, verdict, attributions) -> None:
    tags = {names.TREND: verdict.status}
    tags.update({names.TREND_PREFIX + metric.split("/", 1)[1]: status for metric, status in verdict.per_metric.items()})
    if verdict.new_changes:
        tags[names.TREND_CHANGE_RUN] = verdict.new_changes[0].run_id
    with tempfile.TemporaryDirectory(prefix="yolo-mlops-trends-") as tmp:
        folder = Path(tmp) / names.TRENDS_DIR
        folder.mkdir()
        report.plot_series(trend, folder / Path(names.TRENDS_PLOT_PNG).name)
        (folder / Path(names.TRENDS_REPORT_MD).name).write_text(report.series_report(trend, attributions))
        for run_id in run_ids:
            store.log_values(mlflow, run_id, tags=tags)
            store.log_folder(mlflow, run_id, folder, names.TRENDS_DIR)


@flow(name="benchmark", log_prints=True)
def benchmark(suite: BenchmarkSuite = BenchmarkSuite()) -> dict[str, dict]:
    night = str(runtime.flow_run.id or uuid.uuid4())
    failures: list[str] = []
    by_experiment: dict[str, list[str]] = defaultdict(list)
    for repeat in range(suite.repeats):  # interleaved: machine drift during the night spreads over all configs
        for spec in suite.runs:
            spec = spec.model_copy(update={"run_kind": "benchmark",
                                           "tags": {**spec.tags, names.BENCHMARK_NIGHT: night}})
            label = f"{spec.model} {spec.imgsz}px b{spec.batch} {spec.variant} (repeat {repeat + 1})"
            try:
                result = profile_training(spec)
            except Exception as exc:  # one broken configuration must not hide the others' trends
                failures.append(f"{label}: {type(exc).__name__}: {exc}")
                continue
            by_experiment[spec.experiment].append(result.run_id)
    judged: list[JudgedSeries] = []
    for experiment, run_ids in by_experiment.items():
        judged += judge_series(experiment, run_ids, suite.max_pvalue)
    for j in judged:
        print(f"{j.label} [{j.series}]: {j.status} ({len(j.runs_tonight)} runs tonight, {j.history_runs} in history)")
        for line in j.new_changes:
            print("  " + line)
    fleet_sections = [trends.fleet_section(store.client(), experiment) for experiment in by_experiment]
    create_markdown_artifact(_markdown(judged, failures, fleet_sections), key="benchmark-trends",
                             description="Verdict per series of tonight's benchmark runs")
    for j in judged:
        create_image_artifact(store.artifact_url(j.plot_run_id, names.TRENDS_PLOT_PNG),
                              key=f"benchmark-series-{j.series}", description=f"{j.label}: history")
    regressions = [j for j in judged if j.status == "regression"]
    if failures or (regressions and suite.fail_on_regression):
        raise RegressionDetected("; ".join([f"new regression in {j.label} [{j.series}]: {' | '.join(j.new_changes)}"
                                            for j in regressions] + [f"failed run: {f}" for f in failures]))
    return {j.series: j.model_dump() for j in judged}


def _markdown(judged: list[JudgedSeries], failures: list[str], fleet_sections: list[str]) -> str:
    rows = [(f"`{j.series}`", j.label, f"**{j.status}**", len(j.runs_tonight), j.history_runs,
             "<br>".join(j.new_changes) or "-",
             f"[picture]({store.artifact_url(j.plot_run_id, names.TRENDS_PLOT_PNG)})")
            for j in judged]
    table = markdown_table(["series", "workload", "verdict", "runs tonight", "runs in history", "new change points",
                            "plot"], rows)
    return "\n".join(["# Benchmark trends", "", table, "", *[f"- FAILED: {f}" for f in failures],
                      "", "## Fleet", "", *fleet_sections])


