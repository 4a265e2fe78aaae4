"""Prefect flow `bisect`: the commit between `good` and `bad` that made training slower.

Thin: the checks, the runs, the statistics and the report live in `yolo_mlops.bisect`. The flow holds the
device's GPU concurrency limit around each profiled run (gpu-<machine>-<index> on a GPU with a shared Prefect
server; none on CPU), so a bisection never shares the GPU with a sweep or the nightly benchmark.

Deployment entrypoint: `flows/bisection.py:bisect`.
"""

from __future__ import annotations

from typing import Annotated

from prefect import flow
from prefect.artifacts import create_markdown_artifact
from pydantic import Field

from yolo_mlops import bisect as bisection
from yolo_mlops import names
from yolo_mlops.bisect.models import DEFAULT_BISECT_EXPERIMENT, DEFAULT_EXPERIMENT, RUN_TIMEOUT_S, BisectResult
from yolo_mlops.run import gpu_lock


def _hold_gpu(device: str):
    return gpu_lock.hold(gpu_lock.limit_name(device))


@flow(name="bisect", log_prints=True)
def bisect(
    good: Annotated[str, Field(description="a commit (any git revision) whose code was fast")],
    bad: Annotated[str, Field(description="a later commit whose code is slow")],
    run_id: Annotated[str | None, Field(description="workload: the RunSpec this MLflow run logged")] = None,
    series: Annotated[str | None, Field(description="workload: the newest run of this series in experiment")] = None,
    experiment: str = DEFAULT_EXPERIMENT,
    repo: Annotated[str | None, Field(description="repository of the code; default: this installation's")] = None,
    bisect_experiment: str = DEFAULT_BISECT_EXPERIMENT,
    repeats: Annotated[int, Field(ge=2, le=50, description="runs a side per step at the first look")] = 3,
    max_repeats: Annotated[int, Field(ge=2, le=100, description="runs a side before a step is inconclusive")] = 6,
    metric: str = names.STEP_TIME_P50,
    alpha: Annotated[float, Field(gt=0, lt=1, description="error bound of each decision")] = 0.01,
    min_effect: Annotated[
        float, Field(ge=0, lt=1, description="smallest slowdown called a regression (0.05 = 5%)")
    ] = 0.05,
    run_timeout_s: Annotated[
        float,
        Field(gt=0, description="a profiled run still going after this long is killed and counts as a failed run"),
    ] = RUN_TIMEOUT_S,
) -> BisectResult:
    request = bisection.BisectRequest(
        good=good,
        bad=bad,
        repo=repo,
        series=series,
        run_id=run_id,
        experiment=experiment,
        bisect_experiment=bisect_experiment,
        repeats=repeats,
        max_repeats=max_repeats,
        metric=metric,
        alpha=alpha,
        min_effect=min_effect,
        run_timeout_s=run_timeout_s,
    )
    plan = bisection.prepare(request)
    result = bisection.run_bisection(plan, hold=_hold_gpu)
    create_markdown_artifact(
        result.report, key="bisect-report", description=f"bisect {plan.good.short}..{plan.bad.short}: {result.result}"
    )
    return result
