"""Prefect flow `benchmark`: one night of a fixed suite of profiled runs, each series judged on its history.

Meant for a scheduled deployment (deploy/prefect.yaml runs it nightly, one deployment per machine). Each
configuration runs `repeats` times (interleaved across configurations), every run a full `profile-training`
subflow tagged `run_kind=benchmark` and `yolo_mlops.benchmark.night=<this flow run>`, so the night has its own
noise estimate. Each series touched tonight is then judged over its whole history (`trends.nightly`): a new
regression is re-measured by `confirm_repeats` more runs before it alerts. The flow publishes a Markdown and
an image artifact per series and fails on a confirmed regression, after every run was tracked and judged, so
Prefect automations can notify; with `auto_bisect` it first hands the regression's commit range to the
`bisect` deployment.
"""

from __future__ import annotations

import uuid
from collections import defaultdict
from dataclasses import asdict

from prefect import flow, runtime, task
from prefect.artifacts import create_image_artifact, create_markdown_artifact
from prefect.cache_policies import NO_CACHE

from yolo_mlops import names, trends
from yolo_mlops.bisect import trigger
from yolo_mlops.config import BenchmarkSuite, RunSpec
from yolo_mlops.errors import ConfigError
from yolo_mlops.flows.profile_training import profile_training
from yolo_mlops.tracking import connection, queries
from yolo_mlops.trends import nightly
from yolo_mlops.trends.nightly import JudgedSeries

__all__ = ["RegressionDetected", "benchmark", "judge_series"]


class RegressionDetected(RuntimeError):
    pass


@task(cache_policy=NO_CACHE, persist_result=False)
def judge_series(experiment: str, run_ids: list[str], suite: BenchmarkSuite, confirm_repeats: int = 0,
                 confirmations: dict[str, list[str]] | None = None,
                 suspects: dict[str, list[str]] | None = None) -> list[JudgedSeries]:
    settings = trends.DetectionSettings(max_pvalue=suite.max_pvalue, candidate_pvalue=suite.candidate_pvalue)
    return nightly.judge_night(connection.client(), experiment, run_ids, settings, confirm_repeats,
                               confirmations, suspects)


@flow(name="benchmark", log_prints=True)
def benchmark(suite: BenchmarkSuite = BenchmarkSuite()) -> dict[str, dict]:
    night = str(runtime.flow_run.id or uuid.uuid4())
    failures: list[str] = []
    by_experiment: dict[str, list[str]] = defaultdict(list)
    spec_of: dict[str, tuple[int, RunSpec]] = {}  # run id -> (index in the suite, configuration it ran)
    notes: dict[int, str] = {}
    planned = [suite.repeats if isinstance(suite.repeats, int) else 2] * len(suite.runs)
    _run_rounds(suite, night, 0, planned, failures, by_experiment, spec_of)
    if suite.repeats == "auto":  # the first 2 runs each; then each configuration's series says how many it needs
        needed = []
        for i in range(len(suite.runs)):
            count, notes[i] = nightly.repeats_needed(connection.client(), suite, i,
                                                     [r for r, (j, _) in spec_of.items() if j == i])
            needed.append(count)
        _run_rounds(suite, night, 2, needed, failures, by_experiment, spec_of)
    judged: list[JudgedSeries] = []
    for experiment, run_ids in by_experiment.items():
        first = judge_series(experiment, run_ids, suite, suite.confirm_repeats)
        pending = [j for j in first if j.confirm_metrics]
        if pending:  # re-measure before alerting: the same configuration, confirm_repeats more runs
            runs = {j.series: _run_confirmation(spec_of[j.runs_tonight[0]][1], night, suite.confirm_repeats, failures)
                    for j in pending}
            again = {j.series: j for j in judge_series(experiment, run_ids, suite, confirmations=runs,
                                                       suspects={j.series: j.confirm_metrics for j in pending})}
            first = [again.get(j.series, j) for j in first]
        judged += first
    for j in judged:
        j.notes += sorted({notes[spec_of[r][0]] for r in j.runs_tonight if notes.get(spec_of.get(r, (-1,))[0])})
    regressions = [j for j in judged if j.status == "regression"]
    if suite.auto_bisect:
        _start_bisections(regressions, suite.bisect_deployment)
    _publish(judged, failures, list(by_experiment))
    if failures or (regressions and suite.fail_on_regression):
        raise RegressionDetected(nightly.failure_message(regressions, failures))
    return {j.series: asdict(j) for j in judged}


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


def _run_confirmation(spec: RunSpec, night: str, repeats: int, failures: list[str]) -> list[str]:
    """`repeats` more runs of a configuration, tagged as confirmation runs of this night."""
    spec = _night_spec(spec, night, {names.BENCHMARK_CONFIRMATION: night})
    done = []
    for repeat in range(repeats):
        try:
            done.append(profile_training(spec).run_id)
        except Exception as exc:  # reported with the night's failures
            failures.append(f"confirmation run {repeat + 1} of {spec.model}: {type(exc).__name__}: {exc}")
    return done


def _start_bisections(regressions: list[JudgedSeries], deployment: str) -> None:
    """One run of the bisect deployment per confirmed regression with a commit range; a missing deployment is a
    note on the series, never a reason to lose the night's verdict."""
    for j in regressions:
        for target in {(t.good, t.bad): t for t in j.bisect}.values():  # one bisection per commit range
            try:
                flow_run_id, where = trigger.start(target, deployment, j.machine)
                j.notes.append(f"auto-bisect: started {deployment} run {flow_run_id} for "
                               f"{target.good[:12]}..{target.bad[:12]} on {where}")
            except ConfigError as exc:
                j.notes.append(str(exc))


def _publish(judged: list[JudgedSeries], failures: list[str], experiments: list[str]) -> None:
    for j in judged:
        print(f"{j.label} [{j.series}]: {j.status} ({len(j.runs_tonight)} runs tonight, {j.history_runs} in history)")
        for line in [*j.new_changes, *([j.confirmation] if j.confirmation else []), *j.notes]:
            print("  " + line)
    fleet_sections = [trends.fleet_section(connection.client(), experiment) for experiment in experiments]
    create_markdown_artifact(nightly.markdown(judged, failures, fleet_sections), key="benchmark-trends",
                             description="Verdict per series of tonight's benchmark runs")
    for j in judged:
        create_image_artifact(queries.artifact_url(j.plot_run_id, names.TRENDS_PLOT_PNG),
                              key=f"benchmark-series-{j.series}", description=f"{j.label}: history")
