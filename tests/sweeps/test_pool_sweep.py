"""A sweep over two machines through a Prefect work pool, end to end on CPU, with nothing mocked:

- a real `prefect server` (not the temporary one) and a real `mlflow server`, started by the test;
- a process work pool with the `profile-training` deployment, and two real `prefect worker` processes, each
  with its own YOLO_MLOPS_MACHINE and its own work queue, as two GPU machines would run them;
- machine `slow-2` is planted slow by the test's own code: its worker's Python starts with a sitecustomize
  that sleeps in every optimizer step (production code has no hook for this).

Proves: children run on both machines and the parent ends FINISHED with the comparison; the fleet view
names the slow machine and not the other; killing one machine's worker (and its flow-run process) mid-sweep
fails its child within the documented bound and the sweep completes with what the other machine measured.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest
import yaml
from local_fleet import POOL, LocalFleet, local_fleet
from pool_sweeps import parent_run_id, start_pool_sweep, sweep_children, sweep_workload
from processes import poll_until

pytestmark = pytest.mark.slow

FAST, SLOW = "fast-1", "slow-2"
LOST_AFTER_S = 20.0
SLOW_STEP = """
import time
import torch
_backward = torch.Tensor.backward
def _slow_backward(self, *args, **kwargs):
    time.sleep(2.0)  # planted: every training step of this machine is slower, far above the noise
    return _backward(self, *args, **kwargs)
torch.Tensor.backward = _slow_backward
"""


@pytest.fixture(scope="module")
def fleet(tmp_path_factory) -> Iterator[LocalFleet]:
    slow_site = tmp_path_factory.mktemp("slow-site")
    (slow_site / "sitecustomize.py").write_text(SLOW_STEP)
    with local_fleet(tmp_path_factory.mktemp("fleet"), {FAST: {}, SLOW: {"PYTHONPATH": str(slow_site)}}) as fleet:
        config = fleet.work_dir / "tiny.yaml"
        config.write_text(yaml.safe_dump(sweep_workload(experiment="fleet-sweep")))
        yield fleet


@pytest.fixture(scope="module")
def pool_sweep(fleet: LocalFleet):
    proc, log = start_pool_sweep(fleet, fleet.work_dir / "tiny.yaml", 4, "--lost-after", str(LOST_AFTER_S))
    assert proc.wait(1500) == 0, log.read_text(errors="replace")[-6000:]
    return parent_run_id(log), log


def test_pool_sweep_runs_on_both_machines(pool_sweep, fleet: LocalFleet):
    parent_id, log = pool_sweep
    parent = fleet.mlflow().get_run(parent_id)
    assert parent.info.status == "FINISHED"
    assert parent.data.tags["yolo_mlops.sweep.pool"] == POOL
    assert set(parent.data.tags["yolo_mlops.sweep.lanes"].split(",")) == {f"{FAST}/cpu", f"{SLOW}/cpu"}
    children = sweep_children(fleet, parent_id)
    assert len(children) == 8 and {c.info.status for c in children} == {"FINISHED"}
    by_machine: dict[str, set[str]] = {}
    for child in children:
        by_machine.setdefault(child.data.params["env.machine"], set()).add(child.data.tags["yolo_mlops.sweep.block"])
        assert child.data.tags["yolo_mlops.sweep.lane"] == f"{child.data.params['env.machine']}/cpu"
    # whole blocks per machine: blocks 0 and 2 on the first lane, 1 and 3 on the second
    assert by_machine == {FAST: {"0", "2"}, SLOW: {"1", "3"}}
    assert "sweep/speedup_batch_2" in parent.data.metrics  # the comparison, paired within machines
    assert "paired by block" in log.read_text(errors="replace")


def test_fleet_names_the_planted_slow_machine(pool_sweep, fleet: LocalFleet):
    # Two runs a machine per workload leave the pooled t test 2 degrees of freedom: at the 1% default Holm's
    # first step needs t > 9.9, which one 1.5x swing between the fast machine's two runs on a loaded CI host
    # defeats even against a 10x planted slowdown. 5% (t > 4.3) is the documented setting for few runs; the
    # fast machine cannot be named at any setting (the test is one-sided and it is the faster).
    proc, log = fleet.cli("fleet", "--experiment", "fleet-sweep", "--max-pvalue", "0.05", "--format", "json")
    assert proc.wait(600) == 0, log.read_text(errors="replace")[-4000:]
    text = log.read_text(errors="replace")
    report = json.loads(text[text.index("{") :])
    slow = {m["machine"] for w in report["workloads"] for m in w["slow_machines"]}
    assert slow == {SLOW}, json.dumps([w["machines"] for w in report["workloads"]], indent=1)


def test_a_lost_machine_fails_its_child_and_the_sweep_completes(pool_sweep, fleet: LocalFleet):
    # 2 repeats: one block a machine, enough to lose one mid-sweep and finish with the other's
    proc, log = start_pool_sweep(
        fleet, fleet.work_dir / "tiny.yaml", 2, "--experiment", "fleet-lost", "--lost-after", str(LOST_AFTER_S)
    )
    # wait until a child runs on the slow machine, then take that machine away (worker + flow-run process)
    with fleet.prefect() as client:
        from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterState, FlowRunFilterStateType
        from prefect.client.schemas.objects import StateType

        def running_on_slow():
            runs = client.read_flow_runs(
                flow_run_filter=FlowRunFilter(
                    state=FlowRunFilterState(type=FlowRunFilterStateType(any_=[StateType.RUNNING]))
                )
            )
            return next((r for r in runs if r.work_queue_name == SLOW), None)

        assert poll_until(lambda: running_on_slow() is not None, 900, proc), log.read_text(errors="replace")[-4000:]
        lost_run = running_on_slow()
        fleet.stop_machine(SLOW)
        killed_at = time.monotonic()
        assert poll_until(lambda: client.read_flow_run(lost_run.id).state.is_final(), 300, proc)
        noticed_s = time.monotonic() - killed_at
        assert client.read_flow_run(lost_run.id).state.name == "Crashed"
    # documented bound: lost_after_s after the worker's last poll, plus one poll of the sweep (5 s); the
    # worker polled at most 2 s before it died
    assert noticed_s <= LOST_AFTER_S + 5 + 2 + 10, noticed_s  # + 10 s for a loaded machine
    assert proc.wait(1500) == 0, log.read_text(errors="replace")[-6000:]
    output = log.read_text(errors="replace")
    assert f"machine '{SLOW}' lost" in output
    parent_id = parent_run_id(log)
    parent = fleet.mlflow().get_run(parent_id)
    assert parent.info.status == "FINISHED"
    failed = int(parent.data.tags["yolo_mlops.sweep.failed_children"])
    assert 1 <= failed <= 2  # the lost child and the slow lane's child after it, never the fast lane's
    children = sweep_children(fleet, parent_id)
    assert "RUNNING" not in {c.info.status for c in children}  # the lost child's run was ended FAILED
    assert {c.data.params["env.machine"] for c in children if c.info.status == "FINISHED"} >= {FAST}
