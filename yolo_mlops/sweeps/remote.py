"""Children on other machines: runs of the `profile-training` deployment in a Prefect work pool.

Each GPU machine runs a worker that polls the pool's work queue named after the machine
(`prefect worker start --pool P --work-queue <machine>`), so a sweep can send a whole block to one machine and
keep its comparison paired. A lane submits its next child only when the previous one has ended, so a machine
runs one child of the sweep at a time, in the planned order, and the per-GPU limit is taken by the child on
the worker (`gpu-<machine>-<index>`).

Lost work ends cleanly: a worker that stops polling its queue for `lost_after_s` is taken as gone. The child
it held is marked CRASHED in Prefect and failed in the sweep, the lane's remaining children are failed without
being submitted, and the sweep finishes with what the other lanes measured. The bound on noticing a lost
machine is `lost_after_s` plus one poll of this side (`poll_s`). A machine whose worker keeps polling is not
waited on forever either: a child not running within `start_timeout_s` of its submission, or not finished
within `run_timeout_s` of its start, is cancelled and failed, and the lane goes on with its next child.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from yolo_mlops.compat import prefect_client
from yolo_mlops.config.sweep import LOST_AFTER_S, RUN_TIMEOUT_S, START_TIMEOUT_S
from yolo_mlops.errors import ConfigError
from yolo_mlops.run.environment import MACHINE_VAR, check_machine_name

if TYPE_CHECKING:
    from yolo_mlops.sweeps.collect import ChildOutcome
    from yolo_mlops.sweeps.plan import Lane

__all__ = ["LOST_AFTER_S", "RUN_TIMEOUT_S", "START_TIMEOUT_S", "PoolTarget", "find_target", "run_remote_child"]

PROFILE_FLOW = "profile-training"
DEFAULT_QUEUE = "default"  # Prefect's own queue of every pool: not a machine
POLL_S = 5.0


@dataclass(frozen=True)
class PoolTarget:
    """Where a pool sweep sends its children: the deployment, and the machines with a live worker."""

    pool: str
    deployment_id: str
    deployment_name: str  # "<flow>/<deployment>"
    machines: list[str]  # work queues polled within lost_after_s
    idle: dict[str, str]  # machine queue -> why it is not used (no recent poll, paused)
    job_env: dict[str, str]  # the deployment's job environment, which a child's own variables extend


def find_target(pool: str, deployment: str | None = None, lost_after_s: float = LOST_AFTER_S) -> PoolTarget:
    """The pool's `profile-training` deployment and its live machines; ConfigError (one line) otherwise."""
    with prefect_client.session() as api:
        try:
            exists = api.work_pool_exists(pool)
        except prefect_client.Unreachable as exc:
            raise ConfigError(
                f"--pool {pool}: no Prefect server answers at {api.api_url} ({exc}); start the server the "
                "pool's workers poll, or point PREFECT_API_URL at it"
            ) from None
        if not exists:
            raise ConfigError(
                f"work pool {pool!r} does not exist on {api.api_url} "
                "(deploy/bootstrap.sh creates gpu-process and gpu-docker)"
            )
        chosen = _the_deployment(pool, deployment, api.deployments_of(PROFILE_FLOW))
        machines, idle = _live_machines(api.work_queues(pool), lost_after_s)
    if not machines:
        raise ConfigError(
            f"work pool {pool!r} has no machine with a live worker: start one on each GPU machine with "
            f"`prefect worker start --pool {pool} --work-queue <machine>`"
            + (f" (queues: {', '.join(f'{k}: {v}' for k, v in sorted(idle.items()))})" if idle else "")
        )
    return PoolTarget(pool, chosen.id, f"{PROFILE_FLOW}/{chosen.name}", sorted(machines), idle, chosen.job_env)


def _the_deployment(
    pool: str, deployment: str | None, found: list[prefect_client.Deployment]
) -> prefect_client.Deployment:
    """The one profile-training deployment of `pool` (named `deployment` when given)."""
    found = [d for d in found if d.work_pool == pool and (deployment is None or d.name == deployment)]
    if not found:
        which = f"deployment {deployment!r} of " if deployment else "deployment of "
        raise ConfigError(
            f"work pool {pool!r} has no {which}flow {PROFILE_FLOW!r} (deploy/bootstrap.sh applies deploy/prefect.yaml)"
        )
    if len(found) > 1:
        raise ConfigError(
            f"work pool {pool!r} has several {PROFILE_FLOW!r} deployments "
            f"({', '.join(sorted(d.name for d in found))}): name one with --deployment"
        )
    return found[0]


def _live_machines(queues: list[prefect_client.WorkQueue], lost_after_s: float) -> tuple[list[str], dict[str, str]]:
    """The queues a worker polled within `lost_after_s`, and why each other one is not used."""
    machines, idle = [], {}
    now = datetime.now(UTC)
    for queue in queues:
        if queue.name == DEFAULT_QUEUE:
            continue
        age = _age_s(queue.last_polled, now)
        try:
            check_machine_name(queue.name, "work queue")
        except ConfigError as exc:
            idle[queue.name] = str(exc).split(": use")[0]  # cannot name a machine (nor its GPU limits)
            continue
        if queue.paused:
            idle[queue.name] = "queue paused"
        elif age > lost_after_s:
            idle[queue.name] = "no worker polled it yet" if age == float("inf") else f"last polled {age:.0f} s ago"
        else:
            machines.append(queue.name)
    return machines, idle


def _age_s(moment: datetime | None, now: datetime) -> float:
    return float("inf") if moment is None else (now - moment).total_seconds()


def queue_age_s(api: prefect_client.Session, pool: str, machine: str) -> float:
    """Seconds since a worker last polled the machine's queue (inf: never)."""
    return _age_s(api.queue_last_polled(pool, machine), datetime.now(UTC))


def run_remote_child(
    target: PoolTarget,
    lane: Lane,
    outcome: ChildOutcome,
    spec_json: dict,
    lost_after_s: float = LOST_AFTER_S,
    poll_s: float = POLL_S,
    start_timeout_s: float = START_TIMEOUT_S,
    run_timeout_s: float = RUN_TIMEOUT_S,
) -> ChildOutcome:
    """Submit one child to its lane's machine and wait for its end, for its machine to be lost, or for a
    timeout: not running within `start_timeout_s` of its submission (a worker that polls but never starts it),
    or not finished within `run_timeout_s` of its start. A timed-out child is cancelled in Prefect and failed
    in the sweep, with the reason; the lane goes on with its next child."""
    machine = lane.machine or ""
    with prefect_client.session() as api:
        age = queue_age_s(api, target.pool, machine)
        if age > lost_after_s:
            return _lost(
                outcome,
                f"machine {machine!r} lost: its worker has not polled for "
                f"{'ever' if age == float('inf') else f'{age:.0f} s'}; not submitted",
            )
        t0 = time.perf_counter()
        outcome.started = time.time()
        # The queue is the machine: its name goes in as YOLO_MLOPS_MACHINE, since in a container of the
        # docker pool the host name is the container's id.
        flow_run_id = prefect_client.start_deployment_run(
            target.deployment_id,
            {"spec": spec_json},
            as_subflow=False,
            flow_run_name=f"{outcome.child.variant} r{outcome.child.repeat} @ {lane.name}",
            work_queue_name=machine,
            tags=["yolo-mlops", "sweep-child"],
            job_variables={"env": {**target.job_env, MACHINE_VAR: machine}},
        )
        outcome.flow_run_id = flow_run_id
        waits = _Waits(lost_after_s, poll_s, start_timeout_s, run_timeout_s)
        state, stopped = _wait_for_end(api, target.pool, machine, flow_run_id, t0, waits)
    outcome.wall_s = time.perf_counter() - t0
    outcome.ended = time.time()
    if stopped:
        return _lost(outcome, stopped)
    if state.completed:
        outcome.status = "ok"
    else:
        outcome.status = "failed"
        outcome.error = f"flow run {flow_run_id} ended {state.name}: {state.message}".strip()[:2000]
    return outcome


@dataclass(frozen=True)
class _Waits:
    lost_after_s: float
    poll_s: float
    start_timeout_s: float
    run_timeout_s: float


def _wait_for_end(
    api: prefect_client.Session, pool: str, machine: str, flow_run_id: str, t0: float, waits: _Waits
) -> tuple[prefect_client.RunState, str]:
    """Poll a submitted child until it ends (its final state, ''), or until it is stopped: cancelled past a
    timeout or marked crashed when its machine is lost (its last state and the reason)."""
    running_since: float | None = None
    while True:
        state = api.flow_run_state(flow_run_id)
        if state is not None and state.final:
            return state, ""
        now = time.perf_counter()
        if running_since is None and state is not None and state.running:
            running_since = now
        overdue = _overdue(
            now - t0, None if running_since is None else now - running_since, waits.start_timeout_s, waits.run_timeout_s
        )
        last = state or prefect_client.RunState("unknown", "", False, False, False)
        if overdue:
            reason = f"flow run {flow_run_id} on machine {machine!r} {overdue}; cancelled"
            _end(api, flow_run_id, "cancelling" if last.running else "cancelled", reason)
            return last, reason
        age = queue_age_s(api, pool, machine)
        if age > waits.lost_after_s:
            reason = (
                f"machine {machine!r} lost: its worker stopped polling {age:.0f} s ago (bound "
                f"{waits.lost_after_s:.0f} s) while flow run {flow_run_id} was {last.name}"
            )
            _end(api, flow_run_id, "crashed", reason)
            return last, reason
        time.sleep(waits.poll_s)


def _overdue(since_submit_s: float, since_start_s: float | None, start_timeout_s: float, run_timeout_s: float) -> str:
    """Why a child has waited too long ('' when it has not): not running within the start timeout of its
    submission, or not finished within the run timeout of its start."""
    if since_start_s is None and since_submit_s > start_timeout_s:
        return f"did not start within {start_timeout_s:g} s of its submission (start timeout)"
    if since_start_s is not None and since_start_s > run_timeout_s:
        return f"did not finish within {run_timeout_s:g} s of its start (run timeout)"
    return ""


def _end(api: prefect_client.Session, flow_run_id: str, end: prefect_client.EndState, reason: str) -> None:
    """A child that never started is Cancelled at once (no worker holds it); a running one is set Cancelling, so
    its worker stops the process, as a cancellation from the UI does. The flow run of a lost machine would stay
    RUNNING or SCHEDULED forever: it is marked Crashed, so the UI says so."""
    try:
        api.end_flow_run(flow_run_id, end, reason)
    except Exception as exc:  # noqa: BLE001 - the sweep goes on; the flow run keeps its last state
        print(f"could not set flow run {flow_run_id} {end}: {type(exc).__name__}: {exc}")


def _lost(outcome: ChildOutcome, reason: str) -> ChildOutcome:
    outcome.status, outcome.error = "failed", reason
    print(f"child {outcome.child.variant} r{outcome.child.repeat} failed: {reason}")
    return outcome
