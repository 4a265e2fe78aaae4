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
from typing import TYPE_CHECKING, cast

from yolo_mlops.errors import ConfigError
from yolo_mlops.run.environment import MACHINE_VAR, check_machine_name

if TYPE_CHECKING:
    from prefect.client.orchestration import SyncPrefectClient
    from prefect.client.schemas import FlowRun

    from yolo_mlops.sweeps.collect import ChildOutcome
    from yolo_mlops.sweeps.plan import Lane

PROFILE_FLOW = "profile-training"
DEFAULT_QUEUE = "default"  # Prefect's own queue of every pool: not a machine
LOST_AFTER_S = 120.0  # a dozen missed polls of a worker at Prefect's default `PREFECT_WORKER_QUERY_SECONDS` (10 s)
POLL_S = 5.0
START_TIMEOUT_S = 900.0  # a child submitted but not running after this long is cancelled (an image pull fits)
RUN_TIMEOUT_S = 7200.0  # a child running for longer than this is cancelled


@dataclass(frozen=True)
class PoolTarget:
    """Where a pool sweep sends its children: the deployment, and the machines with a live worker."""

    pool: str
    deployment_id: str
    deployment_name: str  # "<flow>/<deployment>"
    machines: list[str]  # work queues polled within lost_after_s
    idle: dict[str, str]  # machine queue -> why it is not used (no recent poll, paused)
    job_env: dict[str, str]  # the deployment's job environment, which a child's own variables extend


def find_target(
    pool: str,
    deployment: str | None = None,
    lost_after_s: float = LOST_AFTER_S,
    client: SyncPrefectClient | None = None,
) -> PoolTarget:
    """The pool's `profile-training` deployment and its live machines; ConfigError (one line) otherwise."""
    from prefect.client.orchestration import get_client

    if client is None:
        with get_client(sync_client=True) as own:
            return find_target(pool, deployment, lost_after_s, own)
    import httpx
    from prefect.client.schemas.filters import FlowFilter, FlowFilterName
    from prefect.exceptions import ObjectNotFound

    try:
        client.read_work_pool(pool)
    except httpx.TransportError as exc:
        raise ConfigError(
            f"--pool {pool}: no Prefect server answers at {client.api_url} ({type(exc).__name__}: "
            f"{exc}); start the server the pool's workers poll, or point PREFECT_API_URL at it"
        ) from None
    except ObjectNotFound:
        raise ConfigError(
            f"work pool {pool!r} does not exist on {client.api_url} "
            "(deploy/bootstrap.sh creates gpu-process and gpu-docker)"
        ) from None
    found = [
        d
        for d in client.read_deployments(flow_filter=FlowFilter(name=FlowFilterName(any_=[PROFILE_FLOW])))
        if d.work_pool_name == pool and (deployment is None or d.name == deployment)
    ]
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
    chosen = found[0]
    machines, idle = [], {}
    now = datetime.now(UTC)
    for queue in client.read_work_queues(work_pool_name=pool):
        if queue.name == DEFAULT_QUEUE:
            continue
        age = _age_s(queue.last_polled, now)
        try:
            check_machine_name(queue.name, "work queue")
        except ConfigError as exc:
            idle[queue.name] = str(exc).split(": use")[0]  # cannot name a machine (nor its GPU limits)
            continue
        if queue.is_paused:
            idle[queue.name] = "queue paused"
        elif age > lost_after_s:
            idle[queue.name] = "no worker polled it yet" if age == float("inf") else f"last polled {age:.0f} s ago"
        else:
            machines.append(queue.name)
    if not machines:
        raise ConfigError(
            f"work pool {pool!r} has no machine with a live worker: start one on each GPU machine with "
            f"`prefect worker start --pool {pool} --work-queue <machine>`"
            + (f" (queues: {', '.join(f'{k}: {v}' for k, v in sorted(idle.items()))})" if idle else "")
        )
    job_env = {str(k): str(v) for k, v in ((chosen.job_variables or {}).get("env") or {}).items()}
    return PoolTarget(pool, str(chosen.id), f"{PROFILE_FLOW}/{chosen.name}", sorted(machines), idle, job_env)


def _age_s(moment: datetime | None, now: datetime) -> float:
    return float("inf") if moment is None else (now - moment).total_seconds()


def queue_age_s(client: SyncPrefectClient, pool: str, machine: str) -> float:
    """Seconds since a worker last polled the machine's queue (inf: never)."""
    queue = client.read_work_queue_by_name(machine, work_pool_name=pool)
    return _age_s(queue.last_polled, datetime.now(UTC))


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
    from prefect.client.orchestration import get_client
    from prefect.deployments import run_deployment

    machine = lane.machine or ""
    with get_client(sync_client=True) as client:
        age = queue_age_s(client, target.pool, machine)
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
        # cast: run_deployment dispatches on the caller; called synchronously, as here, it returns
        # the FlowRun itself, not a coroutine
        flow_run = cast(
            "FlowRun",
            run_deployment(
                target.deployment_id,
                parameters={"spec": spec_json},
                flow_run_name=f"{outcome.child.variant} r{outcome.child.repeat} @ {lane.name}",
                work_queue_name=machine,
                timeout=0,
                as_subflow=False,
                tags=["yolo-mlops", "sweep-child"],
                job_variables={"env": {**target.job_env, MACHINE_VAR: machine}},
            ),
        )
        outcome.flow_run_id = str(flow_run.id)
        running_since: float | None = None
        while True:
            state = client.read_flow_run(flow_run.id).state
            if state is not None and state.is_final():
                break
            now = time.perf_counter()
            if running_since is None and state is not None and state.is_running():
                running_since = now
            overdue = _overdue(
                now - t0, None if running_since is None else now - running_since, start_timeout_s, run_timeout_s
            )
            if overdue:
                reason = f"flow run {flow_run.id} on machine {machine!r} {overdue}; cancelled"
                _cancel(client, flow_run.id, state, reason)
                outcome.wall_s = time.perf_counter() - t0
                outcome.ended = time.time()
                return _lost(outcome, reason)
            age = queue_age_s(client, target.pool, machine)
            if age > lost_after_s:
                reason = (
                    f"machine {machine!r} lost: its worker stopped polling {age:.0f} s ago (bound "
                    f"{lost_after_s:.0f} s) while flow run {flow_run.id} was "
                    f"{state.name if state else 'unknown'}"
                )
                _mark_crashed(client, flow_run.id, reason)
                outcome.wall_s = time.perf_counter() - t0
                outcome.ended = time.time()
                return _lost(outcome, reason)
            time.sleep(poll_s)
    outcome.wall_s = time.perf_counter() - t0
    outcome.ended = time.time()
    if state.is_completed():
        outcome.status = "ok"
    else:
        outcome.status = "failed"
        outcome.error = f"flow run {flow_run.id} ended {state.name}: {state.message or ''}".strip()[:2000]
    return outcome


def _overdue(since_submit_s: float, since_start_s: float | None, start_timeout_s: float, run_timeout_s: float) -> str:
    """Why a child has waited too long ('' when it has not): not running within the start timeout of its
    submission, or not finished within the run timeout of its start."""
    if since_start_s is None and since_submit_s > start_timeout_s:
        return f"did not start within {start_timeout_s:g} s of its submission (start timeout)"
    if since_start_s is not None and since_start_s > run_timeout_s:
        return f"did not finish within {run_timeout_s:g} s of its start (run timeout)"
    return ""


def _cancel(client: SyncPrefectClient, flow_run_id, state, reason: str) -> None:
    """A child that never started is Cancelled at once (no worker holds it); a running one is set Cancelling,
    so its worker stops the process, as a cancellation from the UI does."""
    from prefect.client.schemas.objects import State
    from prefect.states import Cancelled, Cancelling

    running = state is not None and state.is_running()
    ending: State = Cancelling(message=reason) if running else Cancelled(message=reason)
    try:
        client.set_flow_run_state(flow_run_id, ending, force=True)
    except Exception as exc:  # noqa: BLE001 - the sweep goes on; the flow run keeps its last state
        print(f"could not cancel flow run {flow_run_id}: {type(exc).__name__}: {exc}")


def _lost(outcome: ChildOutcome, reason: str) -> ChildOutcome:
    outcome.status, outcome.error = "failed", reason
    print(f"child {outcome.child.variant} r{outcome.child.repeat} failed: {reason}")
    return outcome


def _mark_crashed(client: SyncPrefectClient, flow_run_id, reason: str) -> None:
    """The flow run of a lost machine would stay RUNNING or SCHEDULED forever: end it, so the UI says so."""
    from prefect.states import Crashed

    try:
        client.set_flow_run_state(flow_run_id, Crashed(message=reason), force=True)
    except Exception as exc:  # noqa: BLE001 - the sweep goes on; the flow run keeps its last state
        print(f"could not mark flow run {flow_run_id} crashed: {type(exc).__name__}: {exc}")
