"""A bisection end to end, recorded in MLflow: `run_bisection(plan)` after `checks.prepare(request)`.

A parent MLflow run (`yolo_mlops.run_kind=bisect`) in the bisect experiment, ended FINISHED, or FAILED /
KILLED with the reason; every profiled run (`commit_runs`) is its child. Inside it: one installed copy of the
code per commit (`git.Installs`), the search (`search.bisect`), the attribution of the first bad commit's
runs (trends' attribution), the report (`bisection_report`), and the parent's tags, metrics and `bisect/report.md`.

The runs of a bisection go to their own experiment (default `yolo-mlops-bisect`), never to the series'
experiment: runs of old commits made today would read as a new change point of the series' history.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from yolo_mlops import names
from yolo_mlops.bisect import git, search
from yolo_mlops.bisect.bisection_report import report
from yolo_mlops.bisect.commit_runs import CommitRunner, Hold, no_hold
from yolo_mlops.bisect.git import Commit
from yolo_mlops.bisect.models import DECIDED_ON_TAG, BisectPlan, BisectResult, ProfiledRun, StepRecord
from yolo_mlops.tracking import connection, queries, run_end, writes

if TYPE_CHECKING:
    from yolo_mlops.tracking.connection import MlflowClient
    from yolo_mlops.trends.attribution import Attribution


def run_bisection(
    plan: BisectPlan, mlflow: MlflowClient | None = None, hold: Hold = no_hold, log: Callable[[str], None] = print
) -> BisectResult:
    """Premise, then bisection steps; everything recorded under one parent run."""
    mlflow = mlflow or connection.client()
    r = plan.request
    tags = {
        names.RUN_KIND: names.RUN_KIND_BISECT,
        names.BISECT_GOOD: plan.good.hash,
        names.BISECT_BAD: plan.bad.hash,
        names.BISECT_WORKLOAD_RUN: plan.workload_run,
        names.BISECT_REPO: str(plan.repo),
    }
    params = {
        names.BISECT_PARAM + k: str(v)
        for k, v in (
            ("repeats", r.repeats),
            ("max_repeats", r.max_repeats),
            ("alpha", r.alpha),
            ("min_effect", r.min_effect),
            ("run_timeout_s", r.run_timeout_s),
            ("metric", r.metric),
            ("commits", len(plan.commits)),
        )
    }
    parent_id = writes.create_run(
        mlflow, r.bisect_experiment, f"bisect {plan.good.short}..{plan.bad.short}", tags, params
    )
    t0 = time.perf_counter()
    log(
        f"bisect {plan.good.short}..{plan.bad.short}: {len(plan.commits)} commits, workload {plan.workload_label} "
        f"(run {plan.workload_run}); parent run {parent_id}"
    )
    with run_end.run_guard(mlflow, parent_id), git.Installs(plan.repo) as installs:
        runner = CommitRunner(plan, mlflow, parent_id, installs, hold, log)
        try:
            result = search.bisect(plan, runner, parent_id)
        finally:
            runner.end_children()
        result.runs, result.wall_s, result.install_s = runner.count, time.perf_counter() - t0, dict(installs.install_s)
        if result.first_bad is not None:
            result.attribution = _attribute(mlflow, result.steps, result.first_bad)
        result.report = report(plan, result)
        _log_parent(mlflow, parent_id, result, plan.request.metric)
    return result


def _attribute(mlflow: MlflowClient, steps: list[StepRecord], first_bad: Commit) -> Attribution:
    """Which operators moved between the good runs and the first bad commit's runs (trends' attribution)."""
    from yolo_mlops.trends.attribution import attribute_runs
    from yolo_mlops.trends.history import record_from_stored

    where = search.judging_step(steps, first_bad)

    def records(runs: list[ProfiledRun]) -> list:
        stored = [queries.find_run(mlflow, r.run_id) for r in runs]
        found = [record_from_stored(s) for s in stored if s is not None]
        return [x for x in found if x is not None]

    return attribute_runs(mlflow, records(where.good_runs), records(where.candidate_runs))


def _log_parent(mlflow: MlflowClient, parent_id: str, result: BisectResult, metric: str) -> None:
    tags = {
        names.BISECT_RESULT: result.result,
        names.BISECT_STEPS: str(len(result.steps)),
        DECIDED_ON_TAG: search.figure_label(result.figure, metric)[:5000],
    }
    metrics = {names.BISECT_RUNS_METRIC: float(result.runs), names.BISECT_STEPS_METRIC: float(len(result.steps))}
    if result.first_bad is not None:
        tags[names.BISECT_FIRST_BAD] = result.first_bad.hash
    if result.last_good is not None and result.first_known_bad is not None:
        tags[names.BISECT_RANGE] = f"{result.last_good.hash}..{result.first_known_bad.hash}"
    if result.shift is not None:
        metrics.update(
            {
                names.BISECT_SHIFT_PCT: 100 * result.shift[0],
                names.BISECT_SHIFT_CI_LOW: 100 * result.shift[1],
                names.BISECT_SHIFT_CI_HIGH: 100 * result.shift[2],
            }
        )
    writes.log_values(mlflow, parent_id, tags=tags, metrics=metrics)
    writes.log_text(mlflow, parent_id, result.report, names.BISECT_REPORT_MD)
