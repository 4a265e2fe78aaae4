"""Where a sweep's children run and how long it waits for them, as plain data the `sweep` flow acts on.

A plan without lanes runs its children one after another in the flow. A plan with lanes runs one lane per
device of this machine, each in a worker process (torch's global switches and the data loader's CPU work are a
process's own), or one lane per machine of a work pool, each child a run of the pool's deployment on that
machine's work queue (`run_pool_lane`, through `remote`). `isolation="exclusive"` runs the lanes one at a time
(`width`). Every wait is bounded (`Waits`): a lane that does not finish in time fails its children
(`failed_lane`) and its process is ended, and a child left RUNNING in MLflow by a lost machine or an ended lane
is ended FAILED with its reason. flows/sweep.py submits the lanes and waits on them.
"""

from __future__ import annotations

from dataclasses import dataclass

from yolo_mlops import names
from yolo_mlops.config.sweep import LOST_AFTER_S, RUN_TIMEOUT_S, START_TIMEOUT_S
from yolo_mlops.sweeps import remote
from yolo_mlops.sweeps.collect import ChildOutcome
from yolo_mlops.sweeps.plan import Lane, SweepPlan
from yolo_mlops.tracking import queries, run_end


@dataclass(frozen=True)
class Waits:
    """How long a sweep waits for a child: a pool machine's worker polling (lost), a child starting (submitted
    to a pool machine, or waiting for its device's limit), a child running."""

    lost_after_s: float = LOST_AFTER_S
    start_timeout_s: float = START_TIMEOUT_S
    run_timeout_s: float = RUN_TIMEOUT_S

    def lane_s(self, children: int) -> float:
        """The longest a device lane of `children` children may take: each may wait to start and then run."""
        return children * (self.start_timeout_s + self.run_timeout_s)


def width(plan: SweepPlan) -> int:
    """How many lanes run at once: all of them, or one under exclusive isolation."""
    return 1 if plan.isolation == "exclusive" else len(plan.lanes)


def in_plan_order(plan: SweepPlan, lanes: list[list[ChildOutcome]]) -> list[ChildOutcome]:
    """Every child's outcome, in the plan's order, from the lanes' outcomes."""
    by_position = {o.child.position: o for outcomes in lanes for o in outcomes}
    return [by_position[c.position] for c in plan.children]


def run_pool_lane(
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


def overdue_reason(lane: Lane, bound_s: float) -> str:
    return (
        f"lane {lane.name} did not finish within {bound_s:g} s (the sweep's children x (start timeout + "
        "run timeout)); its process was ended"
    )


def broken_reason(lane: Lane, exc: BaseException) -> str:
    return f"lane {lane.name} broke: {type(exc).__name__}: {exc}"[:2000]


def failed_lane(plan: SweepPlan, lane: Lane, reason: str) -> list[ChildOutcome]:
    """A lane whose process died (killed, out of memory) or that did not finish within its bound fails its
    children with the reason; the other lanes count."""
    print(reason)
    return [ChildOutcome(child, "failed", error=reason) for child in plan.lane_children(lane.name)]


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
