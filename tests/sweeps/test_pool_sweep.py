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
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest
import yaml
from processes import REPO, VENV_BIN, base_env, fail_with_log, free_port, http_ok, poll_until, start

pytestmark = pytest.mark.slow

POOL = "fleet-test"
FAST, SLOW = "fast-1", "slow-2"
LOST_AFTER_S = 20.0
TINY = {"imgsz": 64, "batch": 4, "max_steps": 6, "workers": 0, "device": "cpu", "synthetic_images": 24, "val": False,
        "profiler": {"wait": 0, "warmup": 1, "active": 1}}
SLOW_STEP = '''
import time
import torch.optim
_step = torch.optim.Optimizer.step
def _slow_step(self, *args, **kwargs):
    time.sleep(0.15)  # planted: this machine's steps are slower
    return _step(self, *args, **kwargs)
torch.optim.Optimizer.step = _slow_step
'''


@dataclass
class Fleet:
    env: dict[str, str]  # what a user exports: the Prefect and MLflow servers
    workers: dict[str, subprocess.Popen]
    work_dir: Path
    config: Path

    def cli(self, *args: str, **kwargs) -> subprocess.Popen:
        log = self.work_dir / f"cli-{time.time_ns()}.log"
        return start([str(VENV_BIN / "yolo-mlops"), *args], log, self.env, **kwargs), log


def _wait_up(what: str, proc: subprocess.Popen, log: Path, check) -> None:
    # Start-up on a loaded 2-core machine takes from 10 s to minutes: the bound is generous, and the process
    # exiting ends the wait early.
    if not poll_until(check, 600, proc):
        fail_with_log(what, proc, log)


@pytest.fixture(scope="module")
def fleet(tmp_path_factory) -> Iterator[Fleet]:
    work = tmp_path_factory.mktemp("fleet")
    procs: list[subprocess.Popen] = []
    try:
        prefect_port, mlflow_port = free_port(), free_port()
        server_env = base_env() | {
            "PREFECT_HOME": str(work / "prefect-server"), "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
            "PREFECT_UI_ENABLED": "false", "PREFECT_SERVER_SERVICES_SCHEDULER_ENABLED": "false",
            "PREFECT_API_DATABASE_CONNECTION_URL": f"sqlite+aiosqlite:///{work / 'prefect.db'}"}
        server_env.pop("PREFECT_API_URL", None)
        prefect_log = work / "prefect-server.log"
        prefect = start([str(VENV_BIN / "prefect"), "server", "start", "--host", "127.0.0.1", "--port",
                         str(prefect_port)], prefect_log, server_env)
        mlflow_log = work / "mlflow-server.log"
        mlflow = start([str(VENV_BIN / "mlflow"), "server", "--host", "127.0.0.1", "--port", str(mlflow_port),
                        "--backend-store-uri", f"sqlite:///{work / 'mlflow.db'}",
                        "--artifacts-destination", str(work / "mlartifacts"), "--workers", "1"],
                       mlflow_log, base_env())
        procs += [prefect, mlflow]
        api = f"http://127.0.0.1:{prefect_port}/api"
        _wait_up("Prefect server", prefect, prefect_log, lambda: http_ok(f"{api}/health"))
        _wait_up("MLflow server", mlflow, mlflow_log, lambda: http_ok(f"http://127.0.0.1:{mlflow_port}/health"))

        env = base_env() | {"PREFECT_API_URL": api, "PREFECT_HOME": str(work / "prefect-client"),
                            "MLFLOW_TRACKING_URI": f"http://127.0.0.1:{mlflow_port}",
                            "YOLO_MLOPS_HOME": str(work / "home-cli"), "YOLO_OFFLINE": "1",
                            "PREFECT_LOGGING_LEVEL": "INFO"}
        for variable in ("PREFECT_SERVER_DATABASE_CONNECTION_URL", "PREFECT_API_DATABASE_CONNECTION_URL",
                         "YOLO_MLOPS_PREFECT_DB_OWNER"):
            env.pop(variable, None)
        subprocess.run([str(VENV_BIN / "prefect"), "work-pool", "create", POOL, "--type", "process"], env=env,
                       check=True, capture_output=True, timeout=300)
        deploy = ("from yolo_mlops.flows.profile_training import profile_training\n"
                  f"profile_training.from_source({str(REPO)!r}, 'flows/profile_training.py:profile_training')"
                  f".deploy(name='profile', work_pool_name={POOL!r}, build=False, push=False)\n")
        subprocess.run([str(VENV_BIN / "python"), "-c", deploy], env=env, check=True, capture_output=True,
                       timeout=600, cwd=REPO)

        slow_site = work / "slow-site"
        slow_site.mkdir()
        (slow_site / "sitecustomize.py").write_text(SLOW_STEP)
        workers = {}
        for machine in (FAST, SLOW):
            # what deploy/bootstrap.sh does on each machine: the machine's own work queue in the pool
            subprocess.run([str(VENV_BIN / "prefect"), "work-queue", "create", machine, "--pool", POOL], env=env,
                           check=True, capture_output=True, timeout=300)
            worker_env = env | {"YOLO_MLOPS_MACHINE": machine, "YOLO_MLOPS_HOME": str(work / f"home-{machine}"),
                                "PREFECT_WORKER_QUERY_SECONDS": "2", "PREFECT_WORKER_PREFETCH_SECONDS": "0"}
            if machine == SLOW:
                worker_env["PYTHONPATH"] = str(slow_site)
            workers[machine] = start([str(VENV_BIN / "prefect"), "worker", "start", "--pool", POOL, "--type",
                                      "process", "--work-queue", machine, "--name", f"worker-{machine}"],
                                     work / f"worker-{machine}.log", worker_env, cwd=work)
            procs.append(workers[machine])
        config = work / "tiny.yaml"
        config.write_text(yaml.safe_dump({**TINY, "experiment": "fleet-sweep"}))
        fleet = Fleet(env=env, workers=workers, work_dir=work, config=config)
        _wait_polled(fleet, [FAST, SLOW])
        yield fleet
    finally:
        for proc in procs:
            _kill_tree(proc)


def _prefect_client(fleet: Fleet):
    from prefect.client.orchestration import SyncPrefectClient
    from prefect.settings import PREFECT_API_URL, temporary_settings

    with temporary_settings({PREFECT_API_URL: fleet.env["PREFECT_API_URL"]}):
        from prefect.client.orchestration import get_client

        client = get_client(sync_client=True)
    assert isinstance(client, SyncPrefectClient)
    return client


def _wait_polled(fleet: Fleet, machines: list[str]) -> None:
    from prefect.exceptions import ObjectNotFound

    def polled() -> bool:
        with _prefect_client(fleet) as client:
            try:
                return all(client.read_work_queue_by_name(m, work_pool_name=POOL).last_polled for m in machines)
            except ObjectNotFound:
                return False

    for machine in machines:
        if not poll_until(polled, 600, fleet.workers[machine]):
            fail_with_log(f"worker of {machine}", fleet.workers[machine],
                          fleet.work_dir / f"worker-{machine}.log")


def _kill_tree(proc: subprocess.Popen) -> None:
    """Stop a process and every process it started: a machine going away takes its flow runs with it."""
    try:
        children = psutil.Process(proc.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        children = []
    for child in children:
        try:
            child.kill()
        except psutil.NoSuchProcess:
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait(30)


def _mlflow(fleet: Fleet):
    from mlflow import MlflowClient

    return MlflowClient(tracking_uri=fleet.env["MLFLOW_TRACKING_URI"])


def _children(fleet: Fleet, parent_id: str):
    client = _mlflow(fleet)
    experiment = client.get_run(parent_id).info.experiment_id
    return client.search_runs([experiment], filter_string=f"tags.`mlflow.parentRunId` = '{parent_id}'")


def _parent_id(log: Path) -> str:
    for line in log.read_text(errors="replace").splitlines():
        if line.startswith("MLflow parent run "):
            return line.split()[3].rstrip(":")
    raise AssertionError(f"no parent run in the output:\n{log.read_text(errors='replace')[-4000:]}")


@pytest.fixture(scope="module")
def pool_sweep(fleet: Fleet):
    proc, log = fleet.cli("sweep", "--pool", POOL, "--variants", "batch_2", "--repeats", "4",
                          "--config", str(fleet.config), "--lost-after", str(LOST_AFTER_S))
    assert proc.wait(1500) == 0, log.read_text(errors="replace")[-6000:]
    return _parent_id(log), log


def test_pool_sweep_runs_on_both_machines(pool_sweep, fleet: Fleet):
    parent_id, log = pool_sweep
    parent = _mlflow(fleet).get_run(parent_id)
    assert parent.info.status == "FINISHED"
    assert parent.data.tags["yolo_mlops.sweep.pool"] == POOL
    assert set(parent.data.tags["yolo_mlops.sweep.lanes"].split(",")) == {f"{FAST}/cpu", f"{SLOW}/cpu"}
    children = _children(fleet, parent_id)
    assert len(children) == 8 and {c.info.status for c in children} == {"FINISHED"}
    by_machine: dict[str, set[str]] = {}
    for child in children:
        by_machine.setdefault(child.data.params["env.machine"], set()).add(child.data.tags["yolo_mlops.sweep.block"])
        assert child.data.tags["yolo_mlops.sweep.lane"] == f"{child.data.params['env.machine']}/cpu"
    # whole blocks per machine: blocks 0 and 2 on the first lane, 1 and 3 on the second
    assert by_machine == {FAST: {"0", "2"}, SLOW: {"1", "3"}}
    assert "sweep/speedup_batch_2" in parent.data.metrics  # the comparison, paired within machines
    assert "paired by block" in log.read_text(errors="replace")


def test_fleet_names_the_planted_slow_machine(pool_sweep, fleet: Fleet):
    proc, log = fleet.cli("fleet", "--experiment", "fleet-sweep", "--format", "json")
    assert proc.wait(600) == 0, log.read_text(errors="replace")[-4000:]
    text = log.read_text(errors="replace")
    report = json.loads(text[text.index("{"):])
    slow = {m["machine"] for w in report["workloads"] for m in w["slow_machines"]}
    assert slow == {SLOW}


def test_a_lost_machine_fails_its_child_and_the_sweep_completes(pool_sweep, fleet: Fleet):
    proc, log = fleet.cli("sweep", "--pool", POOL, "--variants", "batch_2", "--repeats", "4",
                          "--config", str(fleet.config), "--experiment", "fleet-lost", "--lost-after",
                          str(LOST_AFTER_S))
    # wait until a child runs on the slow machine, then take that machine away (worker + flow-run process)
    with _prefect_client(fleet) as client:
        from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterState, FlowRunFilterStateType

        def running_on_slow():
            runs = client.read_flow_runs(flow_run_filter=FlowRunFilter(
                state=FlowRunFilterState(type=FlowRunFilterStateType(any_=["RUNNING"]))))
            return next((r for r in runs if r.work_queue_name == SLOW), None)

        assert poll_until(lambda: running_on_slow() is not None, 900, proc), log.read_text(errors="replace")[-4000:]
        lost_run = running_on_slow()
        _kill_tree(fleet.workers[SLOW])
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
    parent_id = _parent_id(log)
    parent = _mlflow(fleet).get_run(parent_id)
    assert parent.info.status == "FINISHED"
    failed = int(parent.data.tags["yolo_mlops.sweep.failed_children"])
    assert 1 <= failed <= 4  # the lost child and the slow lane's children after it, never the fast lane's
    children = _children(fleet, parent_id)
    assert "RUNNING" not in {c.info.status for c in children}  # the lost child's run was ended FAILED
    assert {c.data.params["env.machine"] for c in children if c.info.status == "FINISHED"} >= {FAST}
