"""Sweeps over lanes (devices, a pool's machines): the plan, and bad input refused before any run exists."""

from __future__ import annotations

import pytest
from workloads import tiny

from yolo_mlops import names, sweeps
from yolo_mlops.config import RunSpec, SweepRequest
from yolo_mlops.errors import ConfigError
from yolo_mlops.sweeps import remote
from yolo_mlops.sweeps.plan import check_devices


def test_blocks_run_whole_on_one_lane_round_robin():
    plan = sweeps.plan_sweep(
        RunSpec(device="cpu"), ["batch_2", "workers_0"], repeats=5, pool="gpus", machines=["a", "b"]
    )
    assert [lane.name for lane in plan.lanes] == ["a/cpu", "b/cpu"] and plan.multi_lane
    for child in plan.children:
        assert child.block == child.repeat - 1
        assert child.lane == ("a/cpu" if child.block % 2 == 0 else "b/cpu")
    a = plan.lane_children("a/cpu")
    assert [(c.variant, c.repeat) for c in a[:3]] == [("baseline", 1), ("batch_2", 1), ("workers_0", 1)]
    assert {c.block for c in a} == {0, 2, 4} and len(a) == 9
    spec = plan.child_spec(a[-1], "parent123")
    assert spec.device == "cpu" and spec.parent_run_id == "parent123"
    assert spec.tags[names.SWEEP_BLOCK] == "4" and spec.tags[names.SWEEP_LANE] == "a/cpu"
    tags = sweeps.parent_tags(plan)
    assert tags[names.SWEEP_LANES] == "a/cpu,b/cpu" and tags[names.SWEEP_POOL] == "gpus"


def test_pool_lanes_are_machines_times_devices():
    plan = sweeps.plan_sweep(RunSpec(), ["batch_8"], repeats=2, pool="gpus", machines=["a", "b"], devices=["0", "1"])
    assert [lane.name for lane in plan.lanes] == ["a/0", "a/1", "b/0", "b/1"]
    assert all(lane.limit is None for lane in plan.lanes)  # each worker takes its own gpu-<machine>-<index>
    assert {c.lane for c in plan.children} == {"a/0", "a/1"}  # 2 blocks: 2 lanes used
    default = sweeps.plan_sweep(RunSpec(), [], repeats=1, pool="gpus", machines=["a"])
    assert default.lanes[0].name == "a/default" and default.lanes[0].device is None  # the worker's default


def test_one_lane_is_not_paired():
    plan = sweeps.plan_sweep(RunSpec(device="cpu"), ["batch_2"], repeats=2, devices=["cpu"])
    assert [lane.name for lane in plan.lanes] == ["cpu"] and not plan.multi_lane
    assert sweeps.plan_sweep(RunSpec(device="cpu"), ["batch_2"], repeats=2).lanes == ()


@pytest.mark.parametrize(
    ("devices", "message"),
    [
        (["0", "0"], "0 named twice"),
        (["0"], "0 does not exist here: this machine has 0 CUDA device"),  # this machine has no GPU
        (["cpu", "0"], "'cpu' runs alone"),
        (["gpu1"], "gpu1 is not a CUDA device index"),
        ([" "], "name at least one device"),
    ],
)
def test_bad_devices_are_one_line(devices, message):
    with pytest.raises(ConfigError, match=message):
        sweeps.plan_sweep(RunSpec(device="cpu"), [], repeats=1, devices=devices)


def test_devices_of_other_machines_are_not_checked_here():
    assert check_devices(["0", "cuda:3"], local=False) == ["0", "3"]


def test_blocked_order_and_one_limit_for_many_devices_are_refused():
    with pytest.raises(ConfigError, match="use order 'interleaved'"):
        sweeps.plan_sweep(RunSpec(), [], repeats=2, order="blocked", pool="p", machines=["a"])
    with pytest.raises(ConfigError, match="no machine to run on"):
        sweeps.plan_sweep(RunSpec(), [], repeats=2, pool="p", machines=[])
    with pytest.raises(ConfigError, match="isolation must be"):
        sweeps.plan_sweep(RunSpec(), [], repeats=2, isolation="shared")  # type: ignore[arg-type]


def _pool(name: str) -> None:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import WorkPoolCreate

    with get_client(sync_client=True) as client:
        client.create_work_pool(WorkPoolCreate(name=name, type="process"))


def test_pool_problems_are_one_line(prefect_server):
    from prefect.client.orchestration import get_client

    with pytest.raises(ConfigError, match="work pool 'no-such-pool' does not exist"):
        remote.find_target("no-such-pool")
    _pool("empty-pool")
    with pytest.raises(ConfigError, match="work pool 'empty-pool' has no deployment of flow 'profile-training'"):
        remote.find_target("empty-pool")

    from yolo_mlops.flows.profile_training import profile_training

    _pool("idle-pool")
    with get_client(sync_client=True) as client:
        flow_id = client.create_flow(profile_training)
        client.create_deployment(
            flow_id=flow_id,
            name="profile",
            work_pool_name="idle-pool",
            entrypoint="flows/profile_training.py:profile_training",
        )
        client.create_work_queue(name="machine-a", work_pool_name="idle-pool")
        client.create_work_queue(name="two words", work_pool_name="idle-pool")
    with pytest.raises(
        ConfigError,
        match="has no machine with a live worker.*machine-a: no worker polled it yet, "
        "two words: work queue 'two words' cannot name a machine",
    ):
        remote.find_target("idle-pool")
    with pytest.raises(ConfigError, match="has no deployment 'other' of flow"):
        remote.find_target("idle-pool", deployment="other")


@pytest.mark.slow
def test_a_device_lane_runs_in_its_own_process(prefect_server, mlflow_client):
    """`devices`: the lane machinery end to end on the one device a CPU machine has (a worker process of
    Prefect's ProcessPoolTaskRunner, connected to this flow's server, each child a profile-training flow)."""
    from yolo_mlops.flows.sweep import sweep
    from yolo_mlops.run.environment import machine_name

    result = sweep(
        SweepRequest(
            base=RunSpec.model_validate(tiny(experiment="sweep-lanes")),
            variants=["batch_2"],
            repeats=2,
            devices=["cpu"],
        )
    )
    assert [c["status"] for c in result.children] == ["ok"] * 4
    assert [(c["lane"], c["block"]) for c in result.children] == [("cpu", 0), ("cpu", 0), ("cpu", 1), ("cpu", 1)]
    parent = mlflow_client.get_run(result.parent_run_id)
    assert parent.info.status == "FINISHED" and parent.data.tags[names.SWEEP_LANES] == "cpu"
    children = mlflow_client.search_runs(
        [parent.info.experiment_id], filter_string=f"tags.`mlflow.parentRunId` = '{result.parent_run_id}'"
    )
    assert {c.data.tags[names.SWEEP_LANE] for c in children} == {"cpu"} and len(children) == 4
    assert {c.data.params["env.machine"] for c in children} == {machine_name()}


def _mark_after(path: str, delay_s: float) -> None:
    """A lane stand-in: it leaves a mark once it has run for `delay_s`."""
    import time
    from pathlib import Path

    time.sleep(delay_s)
    Path(path).write_text("ran")


def test_a_lane_ended_before_it_reached_its_process_never_runs(prefect_server, tmp_path):
    """The runner hands a task to its process pool from a resolver thread: a lane ended right after it was
    submitted (its bound passed before that hand-over) must not start later in a fresh process."""
    from prefect import task

    from yolo_mlops.compat import prefect as prefect_compat

    marker = tmp_path / "ran"
    with prefect_compat.process_pool_runner(1) as runner:
        runner.submit(task(_mark_after), parameters={"path": str(marker), "delay_s": 2.0})
        prefect_compat.end_pool_processes(runner)
    assert not marker.exists()
