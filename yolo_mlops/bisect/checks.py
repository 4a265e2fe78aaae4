"""Every check before a bisection makes a run: the settings, the repository and its commit range, the
workload, and the series' history at the good commit. Each failure is one ConfigError line."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from yolo_mlops import names
from yolo_mlops.bisect import git
from yolo_mlops.bisect.git import Commit
from yolo_mlops.bisect.models import BisectPlan, BisectRequest
from yolo_mlops.bisect.workload import find_workload, workload_spec
from yolo_mlops.errors import ConfigError
from yolo_mlops.tracking import connection

if TYPE_CHECKING:
    from yolo_mlops.tracking.connection import MlflowClient


def prepare(request: BisectRequest, mlflow: MlflowClient | None = None) -> BisectPlan:
    """Every check before a run is made; each failure is one ConfigError line."""
    from yolo_mlops.trends import bounds
    from yolo_mlops.trends.trend import WATCHED_BY_NAME, is_operator, operator_watched

    if request.repeats < 2:
        raise ConfigError(f"--repeats {request.repeats}: at least 2 runs a side are needed to see the noise")
    if request.max_repeats < request.repeats:
        raise ConfigError(f"--max-repeats {request.max_repeats} is below --repeats {request.repeats}")
    bounds.check_pvalue("--alpha", request.alpha)
    bounds.check_fraction("--min-effect", request.min_effect)
    if not request.run_timeout_s > 0:
        raise ConfigError(f"--run-timeout {request.run_timeout_s:g}: must be > 0 seconds")
    watched = WATCHED_BY_NAME.get(request.metric)
    if watched is None and is_operator(request.metric):
        watched = operator_watched(request.metric)  # an operator series (trends' op/* metrics), lower is better
    if watched is None:
        raise ConfigError(
            f"--metric {request.metric!r} is not watched; one of: {', '.join(WATCHED_BY_NAME)}, or an operator "
            f"series {names.OP_HOST_PREFIX}<operator> / {names.OP_DEVICE_PREFIX}<operator>"
        )
    if (request.series is None) == (request.run_id is None):
        raise ConfigError(
            "bisect needs one workload: --run RUN_ID (its run_spec.yaml) or --series KEY (the "
            "newest run of the series in --experiment)"
        )
    repo = git.check_repo(Path(request.repo).expanduser()) if request.repo else git.project_repo()
    good, bad = git.resolve(repo, request.good), git.resolve(repo, request.bad)
    commits = git.commit_range(repo, good, bad)
    git.check_clean(repo)
    mlflow = mlflow or connection.checked_client()
    connection.check_experiment_store(request.bisect_experiment)
    run, history = find_workload(mlflow, request)
    spec = workload_spec(mlflow, run)
    from yolo_mlops.trends.history import record_from_stored

    record = record_from_stored(run)
    note = check_good_not_slow(repo, good, history, request.metric, watched.higher_is_better, request.min_effect)
    return BisectPlan(
        request,
        repo,
        good,
        bad,
        tuple(commits),
        spec,
        run.run_id,
        record.label if record else run.run_id,
        watched.higher_is_better,
        note,
    )


def check_good_not_slow(
    repo: Path, good: Commit, history: list, metric: str, higher_is_better: bool, min_effect: float
) -> str:
    """ConfigError when the series' history shows the good commit already slow: its runs sit in a segment
    worse by at least min_effect than an earlier segment of runs at its ancestors (a change point before it).
    Returns a note of what was checked."""
    from yolo_mlops.trends import changepoint

    commits = {r.versions.get("commit") for r in history}
    ancestors = {
        c
        for c in commits
        if c and len(c) >= 7 and c not in ("none", "?") and (c == good.hash or git.is_ancestor(repo, c, good.hash))
    }
    points = [
        r
        for r in history
        if r.versions.get("commit") in ancestors and metric in r.metrics and np.isfinite(r.metrics[metric])
    ]
    at_good = [i for i, r in enumerate(points) if r.versions.get("commit") == good.hash]
    if not at_good:
        return f"the series' history has no run at the good commit {good.short}: not checked against history"
    points = points[: at_good[-1] + 1]
    values = np.array([r.metrics[metric] for r in points], dtype=float)
    cps = changepoint.detect(values)
    segs = changepoint.segments(values, cps)
    last = segs[-1]
    worse = (lambda a, b: a < b * (1 - min_effect)) if higher_is_better else (lambda a, b: a > b * (1 + min_effect))
    for seg, cp in zip(segs[:-1], cps, strict=True):
        if worse(last.mean, seg.mean):
            first = points[cps[-1].index]
            raise ConfigError(
                f"good commit {good.short} is already slow: its runs in the series' history are at {last.mean:.4g} "
                f"({metric}), {100 * (last.mean / seg.mean - 1):+.1f}% from an earlier level of {seg.mean:.4g} "
                f"(change point at run {first.run_id}, commit {first.versions.get('commit', '?')[:10]}, "
                f"p={cp.pvalue:.2g}): pick a good commit before that change"
            )
    return f"the good commit's {len(at_good)} runs in the series' history are at its best level"
