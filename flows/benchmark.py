"""Prefect flow `benchmark`: one night of a fixed suite of profiled runs, each series judged on its history.

Meant for a scheduled deployment (deploy/prefect.yaml runs it nightly, one deployment per machine). Each
configuration runs `repeats` times (interleaved across configurations), every run a full `profile-training`
subflow tagged `run_kind=benchmark` and `yolo_mlops.benchmark.night=<this flow run>`, so the night has its own
noise estimate. Each series touched tonight is then judged over its whole history (`trends.nightly`): a new
regression is re-measured by `confirm_repeats` more runs before it alerts. The flow publishes a Markdown and
an image artifact per series and fails after every run was tracked and judged, so Prefect automations can
notify: with `RegressionDetected` on a confirmed regression, with `BenchmarkRunsFailed` when only runs failed
(both a `NightlyBenchmarkFailed`); with `auto_bisect` it first hands the regression's commit range to the
`bisect` deployment.
"""

from __future__ import annotations

import uuid

from prefect import flow, runtime, task
from prefect.artifacts import create_image_artifact, create_markdown_artifact
from prefect.cache_policies import NO_CACHE

from yolo_mlops import names
from yolo_mlops.bisect import trigger
from yolo_mlops.config import BenchmarkSuite
from yolo_mlops.errors import ConfigError
from yolo_mlops.flows.profile_training import profile_training
from yolo_mlops.tracking import connection, queries
from yolo_mlops.trends import fleet, nightly
from yolo_mlops.trends.commit_range import BisectRange
from yolo_mlops.trends.nightly import JudgedSeries
from yolo_mlops.trends.trend import DetectionSettings

__all__ = [
    "BenchmarkRunsFailed",
    "NightlyBenchmarkFailed",
    "RegressionDetected",
    "benchmark",
    "judge_series",
    "night_failure",
]


class NightlyBenchmarkFailed(RuntimeError):
    """The night fails its flow run; the message lists each new regression, then each run that failed."""


class RegressionDetected(NightlyBenchmarkFailed):
    """A new regression was confirmed tonight (runs that also failed are in the message)."""


class BenchmarkRunsFailed(NightlyBenchmarkFailed):
    """Runs of the night failed; no regression fails it (none found, or `fail_on_regression` is off)."""


def night_failure(
    regressions: list[JudgedSeries], failures: list[str], fail_on_regression: bool
) -> NightlyBenchmarkFailed | None:
    """What the night fails with: RegressionDetected when a regression fails it, else BenchmarkRunsFailed when
    runs failed, else nothing."""
    regressed = bool(regressions) and fail_on_regression
    if not (failures or regressed):
        return None
    message = nightly.failure_message(regressions, failures)
    return RegressionDetected(message) if regressed else BenchmarkRunsFailed(message)


@task(cache_policy=NO_CACHE, persist_result=False)
def judge_series(
    experiment: str,
    run_ids: list[str],
    suite: BenchmarkSuite,
    judging: nightly.JudgingRound = nightly.JudgingRound(),
) -> list[JudgedSeries]:
    settings = DetectionSettings(max_pvalue=suite.max_pvalue, candidate_pvalue=suite.candidate_pvalue)
    return nightly.judge_night(connection.client(), experiment, run_ids, settings, judging)


@flow(name="benchmark", log_prints=True)
def benchmark(suite: BenchmarkSuite = BenchmarkSuite()) -> dict[str, JudgedSeries]:
    night = nightly.Night(str(runtime.flow_run.id or uuid.uuid4()))
    _run_rounds(suite, night, 0, nightly.first_round_counts(suite))
    if suite.repeats == "auto":  # then each configuration's series says how many more runs it needs
        _run_rounds(suite, night, 2, _repeats_needed(suite, night))
    judged = [
        j
        for experiment, run_ids in night.runs_by_experiment.items()
        for j in _judge_confirmed(suite, night, experiment, run_ids)
    ]
    night.add_notes(judged)
    regressions = [j for j in judged if j.status == "regression"]
    if suite.auto_bisect:
        _start_bisections(regressions, suite.bisect_deployment)
    _publish(judged, night.failures, list(night.runs_by_experiment))
    if (failed := night_failure(regressions, night.failures, suite.fail_on_regression)) is not None:
        raise failed
    return {j.series: j for j in judged}  # series key -> its night's verdict


def _run_rounds(suite: BenchmarkSuite, night: nightly.Night, start: int, counts: list[int]) -> None:
    """Rounds start .. max(counts) - 1, each configuration i while its count allows; interleaved, so machine
    drift during the night spreads over all configurations."""
    for repeat in range(start, max(counts, default=0)):
        for i, spec in enumerate(suite.runs):
            if repeat >= counts[i]:
                continue
            spec = night.tagged(spec)
            label = f"{spec.model} {spec.imgsz}px b{spec.batch} {spec.variant} (repeat {repeat + 1})"
            try:
                result = profile_training(spec)
            except Exception as exc:  # one broken configuration must not hide the others' trends
                night.failures.append(f"{label}: {type(exc).__name__}: {exc}")
                continue
            night.ran(i, spec, result.run_id)


def _judge_confirmed(
    suite: BenchmarkSuite, night: nightly.Night, experiment: str, run_ids: list[str]
) -> list[JudgedSeries]:
    """The experiment's series judged (the first round); a series with a new regression is re-measured by its
    confirmation runs before it alerts and judged again over them (the confirmation round)."""
    first = judge_series(experiment, run_ids, suite, nightly.JudgingRound(confirm_repeats=suite.confirm_repeats))
    pending = nightly.awaiting_confirmation(first)
    if not pending:
        return first
    runs = {j.series: _run_confirmation(night, suite, j) for j in pending}
    again = judge_series(experiment, run_ids, suite, nightly.confirmation_round(pending, runs))
    return nightly.with_confirmations(first, again)


def _repeats_needed(suite: BenchmarkSuite, night: nightly.Night) -> list[int]:
    needed = []
    for i in range(len(suite.runs)):
        count, night.notes[i] = nightly.repeats_needed(connection.client(), suite, i, night.runs_of(i))
        needed.append(count)
    return needed


def _run_confirmation(night: nightly.Night, suite: BenchmarkSuite, judged: JudgedSeries) -> list[str]:
    """More runs of a judged series' configuration (`Night.confirmation_repeats`), tagged as confirmation runs
    of this night."""
    spec = night.tagged(night.spec_of(judged), {names.BENCHMARK_CONFIRMATION: night.night_id})
    done = []
    for repeat in range(night.confirmation_repeats(judged, suite)):
        try:
            done.append(profile_training(spec).run_id)
        except Exception as exc:  # reported with the night's failures
            night.failures.append(f"confirmation run {repeat + 1} of {spec.model}: {type(exc).__name__}: {exc}")
    return done


def _start_bisections(regressions: list[JudgedSeries], deployment: str) -> None:
    """One run of the bisect deployment per confirmed regression with a commit range; a missing deployment is a
    note on the series, never a reason to lose the night's verdict."""
    for j in regressions:
        targets: dict[tuple[str, str], BisectRange] = {}
        for t in j.bisect:  # one bisection per commit range, on the first metric that found it: a watched metric
            targets.setdefault((t.good, t.bad), t)  # before an operator series (its premise names the operator)
        for target in targets.values():
            try:
                flow_run_id, where = trigger.start(target, deployment, j.machine)
                j.notes.append(
                    f"auto-bisect: started {deployment} run {flow_run_id} for "
                    f"{target.good[:12]}..{target.bad[:12]} on {where}"
                )
            except ConfigError as exc:
                j.notes.append(str(exc))


def _publish(judged: list[JudgedSeries], failures: list[str], experiments: list[str]) -> None:
    for j in judged:
        print(f"{j.label} [{j.series}]: {j.status} ({len(j.runs_tonight)} runs tonight, {j.history_runs} in history)")
        for line in [*j.new_changes, *([j.confirmation] if j.confirmation else []), *j.notes]:
            print("  " + line)
    fleet_sections = [fleet.fleet_section(connection.client(), experiment) for experiment in experiments]
    create_markdown_artifact(
        nightly.markdown(judged, failures, fleet_sections),
        key="benchmark-trends",
        description="Verdict per series of tonight's benchmark runs",
    )
    for j in judged:
        create_image_artifact(
            queries.artifact_url(j.plot_run_id, names.TRENDS_PLOT_PNG),
            key=f"benchmark-series-{j.series}",
            description=f"{j.label}: history",
        )
