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
from typing import Literal

from prefect import flow, runtime, task
from prefect.artifacts import create_image_artifact, create_markdown_artifact
from prefect.cache_policies import NO_CACHE
from pydantic import BaseModel, Field, model_validator

from yolo_mlops import trends
from yolo_mlops.flows.profile_training import profile_training
from yolo_mlops.render import markdown_table
from yolo_mlops.run.config import ProfilerSettings, RunSpec
from yolo_mlops.tracking import names, store
from yolo_mlops.trends import confirm, power, report


def default_suite() -> list[RunSpec]:
    return [RunSpec(model="yolo11n.yaml", imgsz=640, batch=16, epochs=100, max_steps=60,
                    synthetic_images=256, experiment="yolo-mlops-benchmark", run_kind="benchmark",
                    profiler=ProfilerSettings(skip_first=10, wait=5, warmup=2, active=5))]


class BenchmarkSuite(BaseModel):
    runs: list[RunSpec] = Field(default_factory=default_suite)
    repeats: int | Literal["auto"] = Field(
        default=3, description="runs per configuration per night (the night's noise), or 'auto': the fewest that "
        "detect target_shift_pct, at most max_repeats")
    target_shift_pct: float | None = Field(default=None, description="repeats='auto': step to detect, % of level")
    max_repeats: int | None = Field(default=None, description="repeats='auto': the cap")
    max_pvalue: float = Field(default=0.001, gt=0, lt=1, description="significance of a change point")
    candidate_pvalue: float = Field(default=0.01, gt=0, lt=1,
                                    description="per version boundary: the chance one is reported without a shift")
    confirm_repeats: int = Field(default=3, description="runs that re-measure a new regression before it alerts")
    fail_on_regression: bool = True

    @model_validator(mode="after")
    def _consistent(self) -> BenchmarkSuite:
        if isinstance(self.repeats, int) and self.repeats < 1:
            raise ValueError(f"repeats must be >= 1 or 'auto', got {self.repeats}")
        if self.confirm_repeats < 0:
            raise ValueError(f"confirm_repeats must be >= 0, got {self.confirm_repeats}")
        if self.target_shift_pct is not None and not self.target_shift_pct > 0:
            raise ValueError(f"target_shift_pct must be > 0 (a step in % of the level), got {self.target_shift_pct}")
        if self.repeats == "auto" and (self.max_repeats is None or self.target_shift_pct is None):
            raise ValueError("repeats='auto' needs target_shift_pct and max_repeats (the cap)")
        if self.max_repeats is not None and self.max_repeats < 2:
            raise ValueError(f"max_repeats must be >= 2 (one run a night shows no level), got {self.max_repeats}")
        return self


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
    confirm_metrics: list[str] = []  # metrics whose new regression awaits confirmation runs
    confirmation: str = ""  # what the confirmation runs showed: confirmed or dismissed, with how many runs
    confirmation_runs: list[str] = []
    min_detectable_pct: dict[str, float] = {}  # per watched metric: smallest step found in one night (90%)
    notes: list[str] = []


@task(cache_policy=NO_CACHE, persist_result=False)
def judge_series(experiment: str, run_ids: list[str], max_pvalue: float, candidate_pvalue: float = 0.01,
                 confirm_repeats: int = 0, confirmations: dict[str, list[str]] | None = None,
                 suspects: dict[str, list[str]] | None = None) -> list[JudgedSeries]:
    """Verdict of every series that tonight's runs belong to, logged on each of tonight's runs. A series whose
    new regression awaits confirmation (confirm_repeats > 0) is returned unlogged with `confirm_metrics`; the
    second call, with `confirmations` (series -> its confirmation runs) and `suspects` (series -> metrics),
    judges only those series over tonight's and the confirmation runs and logs them."""
    mlflow = store.client()
    tonight = set(run_ids)
    settings = trends.DetectionSettings(max_pvalue=max_pvalue, candidate_pvalue=candidate_pvalue)
    judged = []
    for key, runs in sorted(trends.load_experiment_series(mlflow, experiment).items()):
        mine = [r.run_id for r in runs if r.run_id in tonight]
        if not mine or (confirmations is not None and key not in confirmations):
            continue  # a series no run of tonight belongs to: judged on the nights it runs
        trend = trends.series_trend(runs, settings)
        extra, outcome, pending = [], None, ()
        if confirmations is not None:
            extra = confirmations[key]
            verdict, outcome = confirm.judge(trend, set(mine), set(extra), tuple((suspects or {})[key]))
        else:
            verdict = trends.verdict(trend, tonight)
            pending = confirm.needs_confirmation(verdict) if confirm_repeats > 0 else ()
        attributions = trends.attributions(mlflow, trend)
        lines = []
        for change in verdict.new_changes:
            unit = trend.metric(change.metric).unit
            line = report.change_line(change, unit)
            attribution = attributions.get((change.metric, change.run_id))
            if attribution is not None:
                line += "; moved: " + attribution.summary()
            lines.append(line)
        lines += [report.candidate_line(c, trend.metric(c.metric).unit) for c in verdict.new_candidates]
        lines += [report.drift_line(d, trend.metric(d.metric).unit) for d in verdict.new_drifts]
        detectable = power.for_trend(trend, len(mine), max_pvalue)
        if not pending:
            _log_on_runs(mlflow, mine + extra, trend, verdict, attributions, detectable, outcome, mine)
        judged.append(JudgedSeries(
            series=key, label=trend.label, status=verdict.status, runs_tonight=mine, history_runs=len(runs),
            new_changes=lines, plot_run_id=(mine + extra)[-1], confirm_metrics=list(pending),
            confirmation=outcome.summary() if outcome else "", confirmation_runs=extra,
            min_detectable_pct={d.metric: round(d.shift_pct, 3) for d in detectable}))
    return judged


def _log_on_runs(mlflow, run_ids: list[str], trend, verdict, attributions, detectable=(), outcome=None,
                 tonight: list[str] | None = None) -> None:
    tags = {names.TREND: verdict.status}
    tags.update({names.TREND_PREFIX + metric.split("/", 1)[1]: status for metric, status in verdict.per_metric.items()})
    if verdict.new_changes:
        tags[names.TREND_CHANGE_RUN] = verdict.new_changes[0].run_id
    if outcome is not None:
        tags[names.TREND_EVIDENCE] = outcome.summary()[:names.TAG_MAX_CHARS]
    metrics = {names.min_detectable_shift_metric(d.metric): d.shift_pct for d in detectable
               if d.shift_pct < float("inf")}
    with tempfile.TemporaryDirectory(prefix="yolo-mlops-trends-") as tmp:
        folder = Path(tmp) / names.TRENDS_DIR
        folder.mkdir()
        report.plot_series(trend, folder / Path(names.TRENDS_PLOT_PNG).name)
        text = report.series_report(trend, attributions, detectable=detectable)
        if outcome is not None:
            text += "\n\nConfirmation: " + outcome.summary()
        (folder / Path(names.TRENDS_REPORT_MD).name).write_text(text)
        for run_id in run_ids:
            on_tonight = tonight is None or run_id in tonight
            store.log_values(mlflow, run_id, tags=tags, metrics=metrics if on_tonight else {})
            store.log_folder(mlflow, run_id, folder, names.TRENDS_DIR)


@flow(name="benchmark", log_prints=True)
def benchmark(suite: BenchmarkSuite = BenchmarkSuite()) -> dict[str, dict]:
    night = str(runtime.flow_run.id or uuid.uuid4())
    failures: list[str] = []
    by_experiment: dict[str, list[str]] = defaultdict(list)
    spec_of: dict[str, tuple[int, RunSpec]] = {}  # run id -> (index in the suite, configuration it ran)
    planned = [suite.repeats if isinstance(suite.repeats, int) else 2] * len(suite.runs)
    notes: dict[int, str] = {}
    _run_rounds(suite, night, 0, planned, failures, by_experiment, spec_of)
    if suite.repeats == "auto":  # the first 2 runs each; then each configuration's series says how many it needs
        needed = [_repeats_needed(suite, spec_of, i, notes) for i in range(len(suite.runs))]
        _run_rounds(suite, night, 2, needed, failures, by_experiment, spec_of)
    judged: list[JudgedSeries] = []
    for experiment, run_ids in by_experiment.items():
        first = judge_series(experiment, run_ids, suite.max_pvalue, suite.candidate_pvalue, suite.confirm_repeats)
        pending = [j for j in first if j.confirm_metrics]
        if pending:  # re-measure before alerting: the same configuration, confirm_repeats more runs
            runs = {j.series: _run_confirmation(spec_of[j.runs_tonight[0]][1], night, suite.confirm_repeats, failures)
                    for j in pending}
            again = {j.series: j for j in judge_series(experiment, run_ids, suite.max_pvalue, suite.candidate_pvalue,
                                                       confirmations=runs,
                                                       suspects={j.series: j.confirm_metrics for j in pending})}
            first = [again.get(j.series, j) for j in first]
        judged += first
    for j in judged:
        j.notes += sorted({notes[spec_of[r][0]] for r in j.runs_tonight if r in spec_of and spec_of[r][0] in notes})
    for j in judged:
        print(f"{j.label} [{j.series}]: {j.status} ({len(j.runs_tonight)} runs tonight, {j.history_runs} in history)")
        for line in [*j.new_changes, *([j.confirmation] if j.confirmation else []), *j.notes]:
            print("  " + line)
    fleet_sections = [trends.fleet_section(store.client(), experiment) for experiment in by_experiment]
    create_markdown_artifact(_markdown(judged, failures, fleet_sections), key="benchmark-trends",
                             description="Verdict per series of tonight's benchmark runs")
    for j in judged:
        create_image_artifact(store.artifact_url(j.plot_run_id, names.TRENDS_PLOT_PNG),
                              key=f"benchmark-series-{j.series}", description=f"{j.label}: history")
    regressions = [j for j in judged if j.status == "regression"]
    if failures or (regressions and suite.fail_on_regression):
        raise RegressionDetected("; ".join([f"new regression in {j.label} [{j.series}]: "
                                            f"{' | '.join([*j.new_changes, j.confirmation or 'not re-measured'])}"
                                            for j in regressions] + [f"failed run: {f}" for f in failures]))
    return {j.series: j.model_dump() for j in judged}


def _night_spec(spec: RunSpec, night: str, extra_tags: dict[str, str] | None = None) -> RunSpec:
    return spec.model_copy(update={"run_kind": "benchmark",
                                   "tags": {**spec.tags, names.BENCHMARK_NIGHT: night, **(extra_tags or {})}})


def _run_rounds(suite: BenchmarkSuite, night: str, start: int, counts: list[int], failures: list[str],
                by_experiment: dict[str, list[str]], spec_of: dict[str, tuple[int, RunSpec]]) -> None:
    """Rounds start .. max(counts) - 1, each configuration i while its count allows; interleaved, so machine
    drift during the night spreads over all configurations."""
    for repeat in range(start, max(counts, default=0)):
        for i, spec in enumerate(suite.runs):
            if repeat >= counts[i]:
                continue
            spec = _night_spec(spec, night)
            label = f"{spec.model} {spec.imgsz}px b{spec.batch} {spec.variant} (repeat {repeat + 1})"
            try:
                result = profile_training(spec)
            except Exception as exc:  # one broken configuration must not hide the others' trends
                failures.append(f"{label}: {type(exc).__name__}: {exc}")
                continue
            by_experiment[spec.experiment].append(result.run_id)
            spec_of[result.run_id] = (i, spec)


def _repeats_needed(suite: BenchmarkSuite, spec_of: dict[str, tuple[int, RunSpec]], i: int,
                    notes: dict[int, str]) -> int:
    """repeats='auto': the runs configuration i needs tonight to detect target_shift_pct in its step time."""
    mine = [r for r, (j, _) in spec_of.items() if j == i]
    if not mine:
        return 0
    grouped = trends.load_experiment_series(store.client(), suite.runs[i].experiment)
    runs = next((v for v in grouped.values() if any(r.run_id == mine[0] for r in v)), [])
    history = [r for r in runs if r.run_id not in mine]
    step = trends.series_trend(history, trends.DetectionSettings(max_pvalue=suite.max_pvalue)).metric(
        names.STEP_TIME_P50) if len(history) >= 2 else None
    if step is None:
        notes[i] = f"repeats auto: no step-time history yet, {suite.max_repeats} runs (the cap)"
        return suite.max_repeats
    recent = power.recent_segment(step)
    found = power.for_values(step.metric, recent, 2, suite.max_pvalue)
    k, reachable = power.repeats_needed(found.noise_pct, len(recent), suite.target_shift_pct, suite.max_repeats,
                                        suite.max_pvalue)
    at_k = power.min_detectable_shift(found.noise_pct, len(recent), k, suite.max_pvalue)
    notes[i] = (f"repeats auto: {k} runs detect a {at_k:.2f}% step in step time (target {suite.target_shift_pct:g}%)"
                if reachable else
                f"repeats auto: the cap of {k} runs cannot reach the target {suite.target_shift_pct:g}%: the smallest "
                f"step found in one night is {at_k:.2f}% (noise {found.noise_pct:.2f}%, {len(recent)} runs of history)")
    return k


def _run_confirmation(spec: RunSpec, night: str, repeats: int, failures: list[str]) -> list[str]:
    """`repeats` more runs of a configuration, tagged as confirmation runs of this night."""
    spec = _night_spec(spec, night, {names.BENCHMARK_CONFIRMATION: night})
    done = []
    for repeat in range(repeats):
        try:
            done.append(profile_training(spec).run_id)
        except Exception as exc:  # noqa: BLE001 - reported with the night's failures
            failures.append(f"confirmation run {repeat + 1} of {spec.model}: {type(exc).__name__}: {exc}")
    return done


def _pct(value: float | None) -> str:
    return "-" if value is None or value == float("inf") else f"{value:.2f}%"


def _markdown(judged: list[JudgedSeries], failures: list[str], fleet_sections: list[str]) -> str:
    rows = [(f"`{j.series}`", j.label, f"**{j.status}**", len(j.runs_tonight), j.history_runs,
             "<br>".join(j.new_changes) or "-", j.confirmation or "-",
             _pct(j.min_detectable_pct.get(names.STEP_TIME_P50)),
             f"[picture]({store.artifact_url(j.plot_run_id, names.TRENDS_PLOT_PNG)})")
            for j in judged]
    table = markdown_table(["series", "workload", "verdict", "runs tonight", "runs in history", "new change points",
                            "confirmation", "min. detectable step (step time)", "plot"], rows)
    notes = [f"- {j.series}: {n}" for j in judged for n in j.notes]
    return "\n".join(["# Benchmark trends", "", table, "", *notes, *[f"- FAILED: {f}" for f in failures],
                      "", "## Fleet", "", *fleet_sections])


