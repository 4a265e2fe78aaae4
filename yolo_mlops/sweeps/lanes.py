"""Where a sweep's children run and how long it waits for them.

A plan without lanes runs its children one after another here. A plan with lanes runs one lane per device of
this machine, each in a worker process of Prefect's ProcessPoolTaskRunner (torch's global switches and the data
loader's CPU work are a process's own), or one lane per machine of a work pool, each child a run of the pool's
deployment on that machine's work queue (`remote`). `isolation="exclusive"` runs the lanes one at a time.
Every wait is bounded (`Waits`): a lane that does not finish in time fails its children and its process is
ended, and a child left RUNNING in MLflow by a lost machine or an ended lane is ended FAILED with its reason.

The flow passes in how one child runs here (`run_variant_child`: the profile-training subflow inside its device's
limit) and the Prefect task that runs a lane in a worker process; the scheduling itself is this module's.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from typing import Any

from yolo_mlops import names
from yolo_mlops.compat import prefect as prefect_compat
from yolo_mlops.sweeps import remote
from yolo_mlops.sweeps.collect import ChildOutcome
from yolo_mlops.sweeps.plan import Child, Lane, SweepPlan
from yolo_mlops.tracking import queries, run_end

RunChild = Callable[[Child, str | None], ChildOutcome]  # one child run in this process, holding a limit


@dataclass(frozen=True)
class Waits:
    """How long a sweep waits for a child: a pool machine's worker polling (lost), a child starting (submitted
    to a pool machine, or waiting for its device's limit), a child running."""

    lost_after_s: float = remote.LOST_AFTER_S
    start_timeout_s: float = remote.START_TIMEOUT_S
    run_timeout_s: float = remote.RUN_TIMEOUT_S

    def lane_s(self, children: int) -> float:
        """The longest a device lane of `children` children may take: each may wait to start and then run."""
        return children * (self.start_timeout_s + self.run_timeout_s)


def run_lanes(
    plan: SweepPlan,
    parent_run_id: str,
    target: remote.PoolTarget | None,
    waits: Waits,
    run_variant_child: RunChild,
    lane_task: Any,
    lane_parameters: dict[str, Any],
) -> list[ChildOutcome]:
    """Every child's outcome, in the plan's order. `lane_task` is submitted once per local lane with
    `lane_parameters` plus `lane`."""
    if not plan.lanes:
        return [run_variant_child(child, plan.concurrency_limit) for child in plan.children]
    width = 1 if plan.isolation == "exclusive" else len(plan.lanes)
    if target is not None:
        with ThreadPoolExecutor(max_workers=width, thread_name_prefix="sweep-lane") as pool:
            lanes = list(pool.map(lambda lane: _pool_lane(plan, lane, target, parent_run_id, waits), plan.lanes))
    else:
        lanes = _local_lanes(plan, width, waits, lane_task, lane_parameters)
    by_position = {o.child.position: o for outcomes in lanes for o in outcomes}
    return [by_position[c.position] for c in plan.children]


def _pool_lane(
    plan: SweepPlan, lane: Lane, target: remote.PoolTarget, parent_run_id: str, waits: Waits
) -> list[ChildOutcome]:
    """One machine's children, one at a time, as runs of the pool's profile-training deployment."""
    return [
        remote.run_remote_child(
            target,
            lane,
            ChildOutcome(child, "pending"),
            plan.child_spec(child, parent_run_id).model_dump(mode="json"),
            waits.lost_after_s,
            start_timeout_s=waits.start_timeout_s,
            run_timeout_s=waits.run_timeout_s,
        )
        for child in plan.lane_children(lane.name)
    ]


def _local_lanes(
    plan: SweepPlan, width: int, waits: Waits, lane_task: Any, lane_parameters: dict[str, Any]
) -> list[list[ChildOutcome]]:
    """Lanes in worker processes, connected to this flow's Prefect server (a temporary server included). A lane
    not done within `waits.lane_s` of its children (counted from the sweep's start, lanes queued behind others
    under exclusive isolation included) fails its children and its worker processes are ended."""
    from prefect.settings import PREFECT_API_URL, temporary_settings

    with temporary_settings({PREFECT_API_URL: _api_url()}), prefect_compat.process_pool_runner(width) as runner:
        futures = [runner.submit(lane_task, parameters={**lane_parameters, "lane": lane}) for lane in plan.lanes]
        bound = waits.lane_s(len(plan.children))  # every child, should the lanes run one after another
        deadline = time.monotonic() + bound
        results = [
            _lane_result(plan, lane, future, max(0.0, deadline - time.monotonic()), bound)
            for lane, future in zip(plan.lanes, futures, strict=True)
        ]
        if any(overdue for _, overdue in results):
            # their children's MLflow runs are ended FAILED by `end_stopped_children`
            prefect_compat.end_pool_processes(runner)
        return [outcomes for outcomes, _ in results]


def _lane_result(
    plan: SweepPlan, lane: Lane, future: Future | Any, timeout_s: float, bound_s: float
) -> tuple[list[ChildOutcome], bool]:
    """A lane whose process died (killed, out of memory) or that did not finish within its bound (then True)
    fails its children; the other lanes count."""
    try:
        return future.result(timeout=timeout_s), False
    except FutureTimeout:
        reason = (
            f"lane {lane.name} did not finish within {bound_s:g} s (the sweep's children x (start timeout + "
            "run timeout)); its process was ended"
        )
        print(reason)
        return [ChildOutcome(child, "failed", error=reason) for child in plan.lane_children(lane.name)], True
    except Exception as exc:  # noqa: BLE001 - recorded per child, the sweep goes on
        reason = f"lane {lane.name} broke: {type(exc).__name__}: {exc}"[:2000]
        print(reason)
        return [ChildOutcome(child, "failed", error=reason) for child in plan.lane_children(lane.name)], False


def _api_url() -> str:
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        return str(client.api_url)


def end_lost_children(mlflow, outcomes: list[ChildOutcome]) -> None:
    """A child whose machine was lost left its MLflow run RUNNING: end it FAILED with the reason."""
    runs = {o.run_id: o for o in outcomes if o.status == "failed" and o.run_id}
    for run_id, outcome in runs.items():
        run = queries.find_run(mlflow, run_id)
        if run is not None and run.status == "RUNNING":
            run_end.finish_failed_run(mlflow, run_id, "FAILED", outcome.error or "lost")


def end_stopped_children(mlflow, parent_run_id: str, outcomes: list[ChildOutcome]) -> None:
    """Children still RUNNING in MLflow once every lane returned were stopped (a timed-out lane or pool child):
    ended FAILED with their lane's reason."""
    reasons = {o.child.lane: o.error for o in outcomes if o.status == "failed" and o.error}
    for child in queries.child_runs(mlflow, parent_run_id):
        if child.status == "RUNNING":
            reason = reasons.get(child.tags.get(names.SWEEP_LANE, "")) or "the sweep ended before this run"
            run_end.finish_failed_run(mlflow, child.run_id, "FAILED", reason)
