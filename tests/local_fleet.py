"""A fleet on one machine, with nothing mocked: a real `prefect server`, a real `mlflow server`, a process work
pool with the `profile-training` deployment, and one real `prefect worker` per named machine, each with its
own YOLO_MLOPS_MACHINE, data home and work queue, as separate GPU machines would run them.

Used by the fleet tests (tests/sweeps/test_pool_sweep.py) and the fleet benchmark
(benchmarks/bench_fleet_sweep.py). Start-up on a loaded 2-core machine takes from 10 s to minutes: every wait
is bounded generously and ends early when the process it waits for exits.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import psutil
from processes import REPO, VENV_BIN, base_env, fail_with_log, free_port, http_ok, poll_until, start

POOL = "fleet-test"
STARTUP_S = 600


@dataclass
class LocalFleet:
    env: dict[str, str]  # what a user exports: the Prefect and MLflow servers
    work_dir: Path
    workers: dict[str, subprocess.Popen] = field(default_factory=dict)

    def cli(self, *args: str) -> tuple[subprocess.Popen, Path]:
        """`yolo-mlops ARGS` as a user runs it against the fleet; its output goes to the returned log."""
        log = self.work_dir / f"cli-{time.time_ns()}.log"
        return start([str(VENV_BIN / "yolo-mlops"), *args], log, self.env), log

    def prefect(self):
        """A Prefect client of the fleet's server (use as a context manager)."""
        from prefect.client.orchestration import get_client
        from prefect.settings import PREFECT_API_URL, temporary_settings

        with temporary_settings({PREFECT_API_URL: self.env["PREFECT_API_URL"]}):
            return get_client(sync_client=True)

    def mlflow(self):
        from mlflow import MlflowClient

        return MlflowClient(tracking_uri=self.env["MLFLOW_TRACKING_URI"])

    def stop_machine(self, machine: str) -> None:
        """The machine goes away: its worker and every flow run it started, killed at once."""
        kill_tree(self.workers[machine])


def kill_tree(proc: subprocess.Popen) -> None:
    try:
        children = psutil.Process(proc.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        children = []
    for child in children:
        with contextlib.suppress(psutil.NoSuchProcess):
            child.kill()
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(30)


def _wait_up(what: str, proc: subprocess.Popen, log: Path, check) -> None:
    if not poll_until(check, STARTUP_S, proc):
        fail_with_log(what, proc, log)


@contextlib.contextmanager
def local_fleet(
    work: Path, machines: dict[str, dict[str, str]], cpus: dict[str, str] | None = None
) -> Iterator[LocalFleet]:
    """Servers, pool, deployment and one worker per machine (machine -> extra environment of its worker).
    `cpus`: machine -> the CPUs (taskset list) its worker and flow runs are pinned to, one thread each, so
    that machines on one host do not share cores as separate hosts would not."""
    procs: list[subprocess.Popen] = []
    try:
        prefect_port, mlflow_port = free_port(), free_port()
        server_env = base_env() | {
            "PREFECT_HOME": str(work / "prefect-server"),
            "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
            "PREFECT_UI_ENABLED": "false",
            "PREFECT_SERVER_SERVICES_SCHEDULER_ENABLED": "false",
            "PREFECT_API_DATABASE_CONNECTION_URL": f"sqlite+aiosqlite:///{work / 'prefect.db'}",
        }
        server_env.pop("PREFECT_API_URL", None)
        prefect_log, mlflow_log = work / "prefect-server.log", work / "mlflow-server.log"
        prefect = start(
            [str(VENV_BIN / "prefect"), "server", "start", "--host", "127.0.0.1", "--port", str(prefect_port)],
            prefect_log,
            server_env,
        )
        mlflow = start(
            [
                str(VENV_BIN / "mlflow"),
                "server",
                "--host",
                "127.0.0.1",
                "--port",
                str(mlflow_port),
                "--backend-store-uri",
                f"sqlite:///{work / 'mlflow.db'}",
                "--artifacts-destination",
                str(work / "mlartifacts"),
                "--workers",
                "1",
            ],
            mlflow_log,
            base_env() | {"MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"},
        )
        procs += [prefect, mlflow]
        api = f"http://127.0.0.1:{prefect_port}/api"
        _wait_up("Prefect server", prefect, prefect_log, lambda: http_ok(f"{api}/health"))
        _wait_up("MLflow server", mlflow, mlflow_log, lambda: http_ok(f"http://127.0.0.1:{mlflow_port}/health"))

        env = base_env() | {
            "PREFECT_API_URL": api,
            "PREFECT_HOME": str(work / "prefect-client"),
            "MLFLOW_TRACKING_URI": f"http://127.0.0.1:{mlflow_port}",
            "YOLO_MLOPS_HOME": str(work / "home-cli"),
            "YOLO_OFFLINE": "1",
            "PREFECT_LOGGING_LEVEL": "INFO",
        }
        for variable in (
            "PREFECT_SERVER_DATABASE_CONNECTION_URL",
            "PREFECT_API_DATABASE_CONNECTION_URL",
            "YOLO_MLOPS_PREFECT_DB_OWNER",
        ):
            env.pop(variable, None)
        prefect_cli = str(VENV_BIN / "prefect")
        subprocess.run(
            [prefect_cli, "work-pool", "create", POOL, "--type", "process"],
            env=env,
            check=True,
            capture_output=True,
            timeout=STARTUP_S,
        )
        deploy = (
            "from yolo_mlops.flows.profile_training import profile_training\n"
            f"profile_training.from_source({str(REPO)!r}, 'flows/profile_training.py:profile_training')"
            f".deploy(name='profile', work_pool_name={POOL!r}, build=False, push=False)\n"
        )
        subprocess.run(
            [str(VENV_BIN / "python"), "-c", deploy],
            env=env,
            check=True,
            capture_output=True,
            timeout=STARTUP_S,
            cwd=REPO,
        )
        fleet = LocalFleet(env=env, work_dir=work)
        for machine, extra in machines.items():
            # what deploy/bootstrap.sh does on each machine: the machine's own work queue in the pool
            subprocess.run(
                [prefect_cli, "work-queue", "create", machine, "--pool", POOL],
                env=env,
                check=True,
                capture_output=True,
                timeout=STARTUP_S,
            )
            worker_env = (
                env
                | {
                    "YOLO_MLOPS_MACHINE": machine,
                    "YOLO_MLOPS_HOME": str(work / f"home-{machine}"),
                    "PREFECT_WORKER_QUERY_SECONDS": "2",
                    "PREFECT_WORKER_PREFETCH_SECONDS": "0",
                }
                | extra
            )
            pin: list[str] = []
            if cpus and machine in cpus:
                pin = ["taskset", "-c", cpus[machine]]
                threads = str(len(cpus[machine].split(",")))
                worker_env |= {"OMP_NUM_THREADS": threads, "MKL_NUM_THREADS": threads}
            fleet.workers[machine] = start(
                [
                    *pin,
                    prefect_cli,
                    "worker",
                    "start",
                    "--pool",
                    POOL,
                    "--type",
                    "process",
                    "--work-queue",
                    machine,
                    "--name",
                    f"worker-{machine}",
                ],
                work / f"worker-{machine}.log",
                worker_env,
                cwd=work,
            )
            procs.append(fleet.workers[machine])
        for machine in machines:
            if not poll_until(lambda m=machine: _polled(fleet, m), STARTUP_S, fleet.workers[machine]):
                fail_with_log(f"worker of {machine}", fleet.workers[machine], work / f"worker-{machine}.log")
        yield fleet
    finally:
        for proc in procs:
            kill_tree(proc)


def _polled(fleet: LocalFleet, machine: str) -> bool:
    with fleet.prefect() as client:
        return client.read_work_queue_by_name(machine, work_pool_name=POOL).last_polled is not None
