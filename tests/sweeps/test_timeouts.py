"""Every wait of a sweep or a bisection is bounded: a pool child that never starts or never finishes, and a
bisection run that runs past its timeout, are ended and counted as failed; the sweep (or bisection) goes on.

Real Prefect server, a real pool, deployment and work queue. No worker is needed: the queue is polled from the
test (so the machine is alive) and the flow run is moved to Running from the test where a run must start.
The timeouts are short and the runs never end on their own, so the outcome does not depend on the machine's
speed."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from uuid import UUID

import pytest
from workloads import tiny

from yolo_mlops.config import RunSpec, SweepRequest
from yolo_mlops.sweeps import ChildOutcome, remote
from yolo_mlops.sweeps.plan import Child, Lane


def _target(pool: str) -> remote.PoolTarget:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import WorkPoolCreate

    from yolo_mlops.flows.profile_training import profile_training

    with get_client(sync_client=True) as client:
        client.create_work_pool(WorkPoolCreate(name=pool, type="process"))
        flow_id = client.create_flow(profile_training)
        client.create_deployment(
            flow_id=flow_id,
            name=f"profile-{pool}",
            work_pool_name=pool,
            entrypoint="flows/profile_training.py:profile_training",
        )
        client.create_work_queue(name="machine-a", work_pool_name=pool)
        _poll(client, pool)
    return remote.find_target(pool)


def _poll(client, pool: str) -> None:
    """What a worker's poll does to the queue (last_polled), taking nothing: the runs stay scheduled."""
    client.get_scheduled_flow_runs_for_work_pool(
        pool, work_queue_names=["machine-a"], scheduled_before=datetime.now(UTC) - timedelta(days=365)
    )


def _child(target: remote.PoolTarget, **timeouts: float) -> ChildOutcome:
    lane = Lane(name="machine-a/default", machine="machine-a", device=None, limit=None)
    outcome = ChildOutcome(Child(0, "baseline", 1), "pending")
    return remote.run_remote_child(
        target, lane, outcome, RunSpec(device="cpu").model_dump(mode="json"), lost_after_s=3600, poll_s=0.2, **timeouts
    )


def _state(flow_run_id: str):
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        return client.read_flow_run(UUID(flow_run_id)).state


def test_a_child_that_never_starts_is_cancelled_after_the_start_timeout(prefect_server):
    target = _target("never-starts")
    outcome = _child(target, start_timeout_s=1.0, run_timeout_s=3600)  # unbounded, it would wait for ever
    assert outcome.status == "failed"
    assert outcome.error is not None and outcome.flow_run_id is not None
    assert "did not start within 1 s of its submission (start timeout); cancelled" in outcome.error
    assert "machine 'machine-a'" in outcome.error
    assert _state(outcome.flow_run_id).name == "Cancelled"


def test_a_child_that_never_finishes_is_cancelled_after_the_run_timeout(prefect_server):
    """The run is moved to Running as soon as it exists (as a worker would start it) and never ends."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import DeploymentFilter, DeploymentFilterId
    from prefect.states import Running

    target = _target("never-ends")
    stop = threading.Event()

    errors: list[BaseException] = []

    def start_it() -> None:
        try:
            with get_client(sync_client=True) as client:
                while not stop.is_set():
                    runs = client.read_flow_runs(
                        deployment_filter=DeploymentFilter(id=DeploymentFilterId(any_=[UUID(target.deployment_id)]))
                    )
                    if runs:
                        client.set_flow_run_state(runs[0].id, Running(), force=True)
                        return
                    time.sleep(0.1)
        except BaseException as exc:  # shown by the assertion below
            errors.append(exc)

    starter = threading.Thread(target=start_it, daemon=True)
    starter.start()
    try:
        outcome = _child(target, start_timeout_s=120, run_timeout_s=1.0)
    finally:
        stop.set()
        starter.join(30)
    assert not errors and outcome.status == "failed", errors
    assert outcome.error is not None and outcome.flow_run_id is not None
    assert "did not finish within 1 s of its start (run timeout); cancelled" in outcome.error
    assert _state(outcome.flow_run_id).name == "Cancelling"  # its worker stops the process, as from the UI


def test_the_waits_of_a_child():
    assert remote._overdue(5.0, None, 10.0, 60.0) == ""
    assert "start timeout" in remote._overdue(11.0, None, 10.0, 60.0)
    assert remote._overdue(500.0, 59.0, 10.0, 60.0) == ""  # started late but within its own run timeout
    assert "run timeout" in remote._overdue(500.0, 61.0, 10.0, 60.0)


def test_a_bisection_run_past_its_timeout_is_killed_and_reported(tmp_path: Path):
    """`bisect.commit_runs.run_commit_process`: the process is ended (TERM) and the exit code says it timed out."""
    from yolo_mlops.bisect import commit_runs

    # a process left to its 600 s sleep would end with 0, not TIMED_OUT
    code, output = commit_runs.run_commit_process(
        ["-c", "import time; print('started', flush=True); time.sleep(600)"],
        {},
        tmp_path,
        tmp_path / "run.log",
        timeout_s=0.5,
    )
    assert code == commit_runs.TIMED_OUT
    assert "started" in output or output == ""  # the process may be ended before it printed
    done = subprocess.run([sys.executable, "-c", "print('ok')"], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "ok"


@pytest.mark.parametrize(
    ("flow_args", "says"), [({"run_timeout_s": 0}, "run_timeout_s"), ({"start_timeout_s": -1}, "start_timeout_s")]
)
def test_sweep_timeouts_must_be_positive(flow_args, says):
    from prefect.exceptions import ParameterTypeError

    from yolo_mlops.flows.sweep import sweep

    with pytest.raises(ParameterTypeError, match=says):
        sweep.validate_parameters({"request": {"base": RunSpec(device="cpu"), **flow_args}})


@pytest.mark.slow
def test_a_device_lane_past_its_bound_fails_its_children_and_the_sweep_goes_on(prefect_server, mlflow_client):
    """`devices`: a lane not done within children x (start + run timeout) is ended; its children fail with the
    reason, their MLflow runs end FAILED, and the sweep returns its report. The bound here (0.05 s a child) is
    far below what starting a lane's worker process takes, so the lane is past it on any machine."""
    from yolo_mlops import names
    from yolo_mlops.flows.sweep import sweep

    # 200 CPU steps a child: a lane that was not ended would finish its children, not fail them with the bound
    result = sweep(
        SweepRequest(
            base=RunSpec.model_validate(tiny(max_steps=200, experiment="sweep-lane-timeout")),
            variants=["batch_2"],
            repeats=1,
            devices=["cpu"],
            start_timeout_s=0.01,
            run_timeout_s=0.015,
        )
    )
    assert [c["status"] for c in result.children] == ["failed", "failed"]
    assert all("did not finish within 0.05 s" in c["error"] for c in result.children)
    assert result.failed_children == 2
    parent = mlflow_client.get_run(result.parent_run_id)
    assert parent.info.status == "FINISHED" and parent.data.tags[names.SWEEP_FAILED_CHILDREN] == "2"
    children = mlflow_client.search_runs(
        [parent.info.experiment_id], filter_string=f"tags.`mlflow.parentRunId` = '{result.parent_run_id}'"
    )
    # none left RUNNING: a child the lane's process was training when it was ended (SIGTERM) ends KILLED by its own
    # run guard, one it had not started yet or that the signal caught outside the guard is ended FAILED by the sweep
    assert all(c.info.status in ("FAILED", "KILLED") for c in children), [
        (c.info.status, c.data.tags.get(names.ERROR)) for c in children
    ]
