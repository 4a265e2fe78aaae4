"""Faults with real processes: `yolo-mlops profile` as a subprocess (its own temporary Prefect server, real
YOLO11n training on CPU), signalled mid-training; a real `mlflow server` killed mid-run and restarted for
`yolo-mlops upload`; a real, size-limited filesystem filled during a run.

Every wait is bounded and waits on an event (a file appearing, a port answering, a process exiting),
never on a fixed sleep, so a loaded machine only makes the tests slower, not wrong.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import workloads
import yaml

pytestmark = pytest.mark.slow

VENV_BIN = Path(sys.executable).parent
STEPS_PER_EPOCH = 4  # 16 synthetic images, batch 4
END_OF_RUN_BOUND_S = 60  # `profile` returns within this after training ends when the tracking server is gone
STARTUP_WAIT_S = 600  # generous: imports, a temporary Prefect server and a dataset build on a loaded 2-core box


# helpers ----------------------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def port_open(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(2)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def wait_for(check, timeout: float, proc: subprocess.Popen | None = None, what: str = "") -> None:
    """Poll `check()` until truthy; fail when `timeout` passes or `proc` exits first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except Exception:  # not there yet (connection refused, file half-written ...)
            pass
        if proc is not None and proc.poll() is not None:
            pytest.fail(f"process exited with {proc.returncode} while waiting for {what}")
        time.sleep(0.2)
    pytest.fail(f"timed out after {timeout:.0f} s waiting for {what}")


def run_config(folder: Path, epochs: int, experiment: str) -> Path:
    path = folder / "run.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "imgsz": 64,
                "batch": 4,
                "epochs": epochs,
                "workers": 0,
                "device": "cpu",
                "synthetic_images": 16,
                "val": False,
                "experiment": experiment,
                "profiler": {"wait": 1, "warmup": 1, "active": 2},
            }
        )
    )
    return path


def cli_env(home: Path, tracking_uri: str, prefect_home: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        {
            "YOLO_MLOPS_HOME": str(home),
            "MLFLOW_TRACKING_URI": tracking_uri,
            "PREFECT_HOME": str(prefect_home),
            "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "600",
            "PREFECT_LOGGING_LEVEL": "INFO",
            "PYTHONUNBUFFERED": "1",
        }
    )
    env.pop("PREFECT_API_URL", None)  # the command starts its own temporary Prefect server
    for key in (
        "MLFLOW_HTTP_REQUEST_MAX_RETRIES",
        "MLFLOW_HTTP_REQUEST_TIMEOUT",
        "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR",
        "MLFLOW_HTTP_REQUEST_BACKOFF_JITTER",
    ):
        env.pop(key, None)  # the command's own bounded defaults are under test
    return env


def start_profile(config: Path, env: dict[str, str], log: Path) -> subprocess.Popen:
    with log.open("wb") as out:  # its own session: the test's signals reach only this process
        return subprocess.Popen(
            [str(VENV_BIN / "yolo-mlops"), "profile", "--config", str(config)],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )


def run_folder(home: Path) -> Path | None:
    folders = sorted((home / "runs").glob("*/")) if (home / "runs").is_dir() else []
    return folders[0] if folders else None


def steps_in(folder: Path | None) -> int:
    """Rows in a run folder's step_times.csv (written after each epoch and when training ends)."""
    csv = folder / "analysis" / "step_times.csv" if folder else None
    if csv is None or not csv.is_file():
        return 0
    return max(0, len(csv.read_text().strip().splitlines()) - 1)


def steps_written(home: Path) -> int:
    return steps_in(run_folder(home))


def output_lines(log: Path) -> list[str]:
    return log.read_text(errors="replace").splitlines()


def yolo_lines(log: Path) -> list[str]:
    return [line for line in output_lines(log) if line.startswith("yolo-mlops:")]


def stop_group(proc: subprocess.Popen) -> None:
    """Kill a command a test gave up on, with its children: the temporary Prefect server runs in a session of
    its own (so a terminal's Ctrl-C reaches only the command), so killing the group alone would orphan it."""
    import psutil

    if proc.poll() is not None:
        return
    children = psutil.Process(proc.pid).children(recursive=True)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(30)
    for child in children:
        if child.is_running():
            child.kill()


def mlflow_client(uri: str):
    from mlflow.tracking import MlflowClient

    return MlflowClient(tracking_uri=uri)


def only_run(client, experiment: str):
    runs = client.search_runs([client.get_experiment_by_name(experiment).experiment_id])
    assert len(runs) == 1
    return runs[0]


@pytest.fixture(scope="module")
def prefect_home(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("prefect-home")  # one database for the module's commands: migrated once


# SIGTERM / SIGINT -------------------------------------------------------------------------------------------


# SIGTERM to the process alone, as `docker stop` and Kubernetes send it; SIGINT to the whole process group, as
# a terminal's Ctrl-C sends it (the temporary Prefect server must not get it: it would be gone while the
# command still needs it to end the flow)
@pytest.mark.parametrize(
    "sig, to_group, exit_code, verb",
    [(signal.SIGTERM, False, 143, "terminated"), (signal.SIGINT, True, 130, "interrupted")],
)
def test_signal_ends_run_killed_with_step_times_and_nothing_left_running(
    tmp_path, prefect_home, sig, to_group, exit_code, verb
):
    import psutil

    home, uri = tmp_path / "home", f"sqlite:///{tmp_path / 'mlflow.db'}"
    epochs = 200  # far more than the test waits for: on a fast or idle machine the run is still going when signalled
    log = tmp_path / "out.log"
    proc = start_profile(run_config(tmp_path, epochs, "signalled"), cli_env(home, uri, prefect_home), log)
    try:
        # the first epoch's step times on disk: training is under way (and its Prefect server up)
        wait_for(lambda: steps_written(home) >= STEPS_PER_EPOCH, STARTUP_WAIT_S, proc, "the first epoch")
        children = psutil.Process(proc.pid).children(recursive=True)
        prefect_ports = [
            int(m.group(1)) for c in children for m in [re.search(r"--port (\d+)", " ".join(c.cmdline()))] if m
        ]
        assert prefect_ports, "the temporary Prefect server should be a child of the command"
        os.killpg(proc.pid, sig) if to_group else proc.send_signal(sig)
        proc.wait(300)
    finally:
        stop_group(proc)

    assert proc.returncode == exit_code, log.read_text()[-3000:]
    lines = yolo_lines(log)
    assert len(lines) == 1, log.read_text()[-3000:]
    assert "Traceback" not in log.read_text()
    steps = steps_written(home)
    assert STEPS_PER_EPOCH <= steps < epochs * STEPS_PER_EPOCH
    reason = f"{verb} by {sig.name} after {steps} of {epochs * STEPS_PER_EPOCH} steps"
    assert lines[0].startswith(f"yolo-mlops: {reason}") and "ended KILLED" in lines[0]

    client = mlflow_client(uri)
    run = only_run(client, "signalled")
    assert run.info.status == "KILLED"
    assert run.data.tags["yolo_mlops.error"] == reason
    # the measurements captured before the signal are in the run: step times as artifact, history and perf/*
    analysis = {a.path for a in client.list_artifacts(run.info.run_id, "analysis")}
    assert "analysis/step_times.csv" in analysis
    history = client.get_metric_history(run.info.run_id, "perf/step_time_ms")
    assert sorted(h.step for h in history) == list(range(steps))
    assert run.data.metrics["perf/steps_total"] == steps
    assert 0 < run.data.metrics["perf/step_time_ms_p50"] < 60_000
    traces = [a.path for a in client.list_artifacts(run.info.run_id, "profiler")]
    assert any(p.endswith(".pt.trace.json.gz") for p in traces)  # the window (steps 1-3) closed in epoch 1
    # nothing left behind: the command's children are gone and the Prefect server's port is closed
    for child in children:
        assert not child.is_running() or child.status() == psutil.STATUS_ZOMBIE, child
    assert not any(port_open(port) for port in prefect_ports)
    folder = run_folder(home)
    assert folder is not None
    assert (folder / "uploaded").is_file() and not (folder / "upload_pending").exists()


# tracking server gone mid-run, then back: `upload` finishes the run ------------------------------------------


class MlflowServer:
    def __init__(self, root: Path) -> None:
        self.root, self.port = root, free_port()
        self.uri = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        log = (self.root / "mlflow-server.log").open("ab")
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "mlflow",
                "server",
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--workers",
                "1",
                "--backend-store-uri",
                f"sqlite:///{self.root / 'server.db'}",
                "--artifacts-destination",
                str(self.root / "artifacts"),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            cwd=self.root,
            env=dict(os.environ, MLFLOW_SERVER_ENABLE_JOB_EXECUTION="false"),
        )  # as deploy/ starts it
        import requests

        wait_for(
            lambda: requests.get(f"{self.uri}/health", timeout=5).status_code == 200,
            STARTUP_WAIT_S,
            self.proc,
            "the MLflow server",
        )

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(60)
        wait_for(lambda: not port_open(self.port), 60, what="the MLflow server's port to close")


@pytest.fixture
def mlflow_server(tmp_path):
    server = MlflowServer(tmp_path)
    server.start()
    yield server
    server.kill()


def test_tracking_server_killed_mid_run_then_upload_finishes_it_once(tmp_path, prefect_home, mlflow_server):
    home = tmp_path / "home"
    log = tmp_path / "out.log"
    epochs = 3
    proc = start_profile(
        run_config(tmp_path, epochs, "server-gone"), cli_env(home, mlflow_server.uri, prefect_home), log
    )
    try:
        wait_for(lambda: steps_written(home) >= STEPS_PER_EPOCH, STARTUP_WAIT_S, proc, "the first epoch")
        mlflow_server.kill()  # the run exists in the store; training goes on without it
        proc.wait(600)
        exited = time.time()
    finally:
        stop_group(proc)

    folder = run_folder(home)
    assert folder is not None
    training_ended = (folder / "analysis" / "step_times.csv").stat().st_mtime
    assert steps_written(home) == epochs * STEPS_PER_EPOCH  # training itself finished
    assert exited - training_ended <= END_OF_RUN_BOUND_S, f"returned {exited - training_ended:.0f} s after training"
    assert proc.returncode == 1, log.read_text()[-3000:]
    lines = yolo_lines(log)
    assert len(lines) == 1 and f"MLflow tracking server {mlflow_server.uri} unreachable" in lines[0]
    assert f"yolo-mlops upload {folder}" in lines[0]
    assert "Traceback" not in log.read_text()
    tracking = json.loads((folder / "tracking.json").read_text())
    assert tracking["tracking_uri"] == mlflow_server.uri and tracking["run_id"]
    pending = json.loads((folder / "upload_pending").read_text())
    assert "unreachable" in pending["reason"]

    env = cli_env(home, mlflow_server.uri, prefect_home)
    upload = [str(VENV_BIN / "yolo-mlops"), "upload", str(folder)]
    early = subprocess.run(upload, env=env, capture_output=True, text=True, timeout=600)
    assert early.returncode == 2 and early.stderr.strip().splitlines() == [
        f"yolo-mlops: error: MLflow tracking server {mlflow_server.uri} is unreachable (connection refused); "
        f"{folder} stays pending"
    ]
    assert (folder / "upload_pending").is_file()

    mlflow_server.start()  # same store, same port
    first = subprocess.run(upload, env=env, capture_output=True, text=True, timeout=600)
    assert first.returncode == 0, first.stderr[-3000:]
    assert f"uploaded to MLflow run {tracking['run_id']}" in first.stdout and "FINISHED" in first.stdout
    assert (folder / "uploaded").is_file() and not (folder / "upload_pending").exists()

    client = mlflow_client(mlflow_server.uri)
    run = client.get_run(tracking["run_id"])
    assert run.info.status == "FINISHED" and "yolo_mlops.error" not in run.data.tags
    assert run.data.params["train.imgsz"] == "64"
    assert run.data.metrics["perf/steps_total"] == epochs * STEPS_PER_EPOCH
    assert run.data.tags["yolo_mlops.analysis_status"] == "ok"
    top = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert {"profiler", "analysis", "env.json", "run_spec.yaml", "ultralytics"} <= top

    def counts() -> dict[str, int]:
        # the table artifact itself (MlflowClient.load_table searches the process-wide tracking URI)
        with tempfile.TemporaryDirectory() as tmp:
            table = json.loads(
                Path(client.download_artifacts(run.info.run_id, "profiler/key_averages_self_cpu.json", tmp)).read_text()
            )["data"]
        return {
            "step_time_points": len(client.get_metric_history(run.info.run_id, "perf/step_time_ms")),
            "loss_points": len(client.get_metric_history(run.info.run_id, "train/box_loss")),
            "table_rows": len(table),
            "artifacts": len(client.list_artifacts(run.info.run_id, "profiler")),
        }

    after_first = counts()
    local_rows = len(json.loads((folder / "tables" / "key_averages_self_cpu.json").read_text())["data"])
    assert after_first["step_time_points"] == epochs * STEPS_PER_EPOCH and after_first["table_rows"] == local_rows

    second = subprocess.run(upload, env=env, capture_output=True, text=True, timeout=600)
    assert second.returncode == 0 and "already uploaded" in second.stdout
    # without the marker, everything is sent again: the store still holds each row once
    (folder / "uploaded").unlink()
    third = subprocess.run(upload, env=env, capture_output=True, text=True, timeout=600)
    assert third.returncode == 0, third.stderr[-3000:]
    assert counts() == after_first


# disk full --------------------------------------------------------------------------------------------------


@pytest.fixture
def small_filesystem():
    """A 256 MiB tmpfs (root only): room for the dataset, the temporary Prefect server's database (kept under
    the data home) and the run, not for a filler file beside them."""
    if os.geteuid() != 0:
        pytest.skip("mounting a size-limited tmpfs needs root")
    mount = Path(tempfile.mkdtemp(prefix="yolo-mlops-small-fs-"))
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=256m", "tmpfs", str(mount)], capture_output=True, text=True
    )
    if done.returncode != 0:
        mount.rmdir()
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    yield mount
    subprocess.run(["umount", "-l", str(mount)], check=False)
    mount.rmdir()


def fill(folder: Path) -> int:
    """Write zeros until the filesystem is full; returns the bytes written."""
    written = 0
    chunk = b"\0" * (1 << 20)
    with (folder / "filler.bin").open("wb", buffering=0) as out:
        try:
            while True:
                written += out.write(chunk)
        except OSError:
            pass
        try:  # the last partial pages
            while True:
                written += out.write(b"\0" * 4096)
        except OSError:
            pass
    return written


def test_disk_full_mid_run_fails_the_run_in_one_line(tmp_path, prefect_home, small_filesystem):
    home = small_filesystem / "home"  # run folder, datasets and MLflow artifacts on the small filesystem
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"  # the store's database elsewhere: it can record the failure
    log = tmp_path / "out.log"
    epochs = 40
    proc = start_profile(run_config(tmp_path, epochs, "disk-full"), cli_env(home, uri, prefect_home), log)
    try:
        wait_for(lambda: steps_written(home) >= STEPS_PER_EPOCH, STARTUP_WAIT_S, proc, "the first epoch")
        fill(small_filesystem)
        assert shutil.disk_usage(small_filesystem).free < 1 << 20
        proc.wait(600)
    finally:
        stop_group(proc)

    assert proc.returncode == 1, log.read_text()[-3000:]
    lines = yolo_lines(log)
    assert len(lines) == 1 and "No space left on device" in lines[0], log.read_text()[-3000:]
    assert "Traceback" not in log.read_text()
    run = only_run(mlflow_client(uri), "disk-full")
    assert run.info.status == "FAILED"
    assert "No space left on device" in run.data.tags["yolo_mlops.error"]
    assert run.data.metrics["perf/steps_total"] >= STEPS_PER_EPOCH  # what was captured is in the store


# the GPU concurrency slot -----------------------------------------------------------------------------------


def test_sigterm_releases_the_gpu_concurrency_slot(prefect_server, mlflow_client):
    """In process, with the CLI's signal handlers: Prefect's own SIGTERM bridge raises inside the flow, the
    slot is released while the stack unwinds, and the run ends KILLED."""
    import threading

    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import GlobalConcurrencyLimitCreate

    from yolo_mlops import cli
    from yolo_mlops.config import ProfilerSettings, RunSpec, data_home
    from yolo_mlops.flows.profile_training import profile_training

    limit = "gpu-sigterm-test"
    with get_client(sync_client=True) as client:
        client.create_global_concurrency_limit(GlobalConcurrencyLimitCreate(name=limit, limit=1))
    runs = data_home() / "runs"
    before = set(runs.glob("*/")) if runs.is_dir() else set()
    # the tiny workload, long enough to be signalled mid-training: 40 epochs, no step limit
    spec = RunSpec(
        **workloads.tiny(
            epochs=40, max_steps=None, experiment="slot-release", profiler=ProfilerSettings(wait=1, warmup=1, active=2)
        )
    )

    flow_returned = threading.Event()
    watched: list[str] = []  # what the watcher saw and did: the failure message, should the flow run to its end

    def fresh_folders() -> list[Path]:
        return [f for f in runs.glob("*/") if f not in before]

    def send_sigterm() -> None:
        started = time.monotonic()
        while time.monotonic() - started < STARTUP_WAIT_S and not flow_returned.is_set():
            trained = [f for f in fresh_folders() if steps_in(f) >= STEPS_PER_EPOCH]
            if trained:
                watched.append(
                    f"SIGTERM sent {time.monotonic() - started:.1f} s in, {trained[0].name} at step "
                    f"{steps_in(trained[0])}"
                )
                os.kill(os.getpid(), signal.SIGTERM)
                return
            time.sleep(0.2)
        watched.append(
            f"no SIGTERM sent in {time.monotonic() - started:.1f} s; new run folders and their steps: "
            f"{[(f.name, steps_in(f)) for f in fresh_folders()]}"
        )

    previous = {s: signal.signal(s, cli._raise_interrupted) for s in cli.HANDLED_SIGNALS}
    watcher = threading.Thread(target=send_sigterm, daemon=True)
    try:
        watcher.start()
        with pytest.raises(KeyboardInterrupt) as raised:
            try:
                profile_training(spec, gpu_limit=limit)
            finally:
                flow_returned.set()  # the watcher sends nothing once the flow is over
                watcher.join(60)  # before the handlers go back: no SIGTERM may reach the test process after them
            pytest.fail(f"the flow ran to its end, not interrupted; the watcher: {watched}")
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    assert getattr(raised.value, "signal", None) == signal.SIGTERM
    with get_client(sync_client=True) as client:
        assert client.read_global_concurrency_limit_by_name(limit).active_slots == 0
    run = only_run(mlflow_client, "slot-release")
    assert run.info.status == "KILLED" and run.data.tags["yolo_mlops.error"].startswith("terminated by SIGTERM")
