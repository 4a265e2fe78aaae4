"""Commands on a loaded machine: the temporary Prefect server gets time to start, one per command, a database
no other running command uses; when it still cannot start, one line. Rows of docs/reliability.md."""

from __future__ import annotations

import fcntl
import os
import sqlite3
from contextlib import closing
from pathlib import Path

import pytest
from reliability_cli import TINY, cpu_burners, mlflow_runs, run_cli, run_folders, start_cli

pytestmark = pytest.mark.timeout(900)
SERVER_STARTS = "Starting temporary server"
_PREFECT_VARS = (
    "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS",
    "PREFECT_API_URL",
    "PREFECT_SERVER_DATABASE_CONNECTION_URL",
    "PREFECT_API_DATABASE_CONNECTION_URL",
    "YOLO_MLOPS_PREFECT_DB_OWNER",
)


def _metric(env: dict[str, str], run_id: str, key: str) -> float:
    db = Path(env["MLFLOW_TRACKING_URI"].removeprefix("sqlite:///"))
    with closing(sqlite3.connect(db)) as connection:
        rows = list(
            connection.execute("SELECT value FROM latest_metrics WHERE run_uuid = ? AND key = ?", (run_id, key))
        )
    assert len(rows) == 1, (run_id, key)
    return rows[0][0]


def _server_databases(home: Path) -> list[str]:
    """Slot numbers of the temporary servers' databases under the data home."""
    folder = home / "prefect"
    return (
        sorted(p.name.rsplit("-", 1)[1].removesuffix(".db") for p in folder.glob("server-*.db"))
        if folder.is_dir()
        else []
    )


def test_configure_keeps_the_users_settings(tmp_path, monkeypatch):
    from importlib.metadata import version

    from yolo_mlops.run import prefect_server

    for name in _PREFECT_VARS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(prefect_server, "_slots", {})  # this process's slot, put back when the test ends
    monkeypatch.setattr(prefect_server, "_held", [])
    prefix = tmp_path / "prefect" / f"server-{version('prefect')}"
    prefix.parent.mkdir()
    with open(f"{prefix}-0.lock", "a") as other:  # slot 0 held by another running command
        fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
        database = prefect_server.configure(tmp_path)
    assert database == Path(f"{prefix}-1.db")
    assert os.environ["PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS"] == "180"
    assert os.environ["PREFECT_SERVER_DATABASE_CONNECTION_URL"] == f"sqlite+aiosqlite:///{database}"
    assert prefect_server.configure(tmp_path) == database  # one slot per process

    monkeypatch.setenv("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "42")
    monkeypatch.setenv("PREFECT_SERVER_DATABASE_CONNECTION_URL", "sqlite+aiosqlite:////elsewhere/prefect.db")
    monkeypatch.setenv("YOLO_MLOPS_PREFECT_DB_OWNER", "1")  # set by a parent process, not by the user
    assert prefect_server.configure(tmp_path) is not None  # the parent's database is not this process's
    assert os.environ["PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS"] == "42"

    monkeypatch.delenv("YOLO_MLOPS_PREFECT_DB_OWNER")
    monkeypatch.setenv("PREFECT_SERVER_DATABASE_CONNECTION_URL", "sqlite+aiosqlite:////elsewhere/prefect.db")
    assert prefect_server.configure(tmp_path) is None  # the user's own database
    monkeypatch.delenv("PREFECT_SERVER_DATABASE_CONNECTION_URL")
    monkeypatch.setenv("PREFECT_API_URL", "http://127.0.0.1:4200/api")
    assert prefect_server.configure(tmp_path) is None  # a real server: no temporary one


def test_the_temporary_servers_output_goes_to_its_log(tmp_path, monkeypatch, capfd):
    """What the server prints (under load, a SQLAlchemy pool traceback as it shuts down) lands in the log beside
    its database, not in the command's output. The server here is Prefect's real command, stopped by a
    sitecustomize right after it prints, so no port or database is involved."""
    from prefect.server.api.server import SubprocessASGIServer

    from yolo_mlops.compat import prefect as prefect_compat
    from yolo_mlops.run import prefect_server

    for name in _PREFECT_VARS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(prefect_server, "_slots", {})
    monkeypatch.setattr(prefect_server, "_held", [])
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(
        "import os, sys\n"
        "if 'prefect.server.api.server:create_app' in sys.argv:\n"
        "    print('Traceback (most recent call last): from the server', file=sys.stderr, flush=True)\n"
        "    os._exit(0)\n"
    )
    monkeypatch.setenv("PYTHONPATH", str(site))
    database = prefect_server.configure(tmp_path / "home")
    assert database is not None
    port = 1  # a key of Prefect's per-port registry no real server uses; nothing listens
    server = prefect_compat.own_session_server_class(SubprocessASGIServer, prefect_server.server_log)(port)
    try:
        assert prefect_compat.start_server_command(server).wait(timeout=300) == 0
    finally:
        prefect_compat.forget_server(port)
        for lock in prefect_server._held:
            lock.close()
    captured = capfd.readouterr()
    assert "from the server" not in captured.out + captured.err
    assert prefect_server.server_log() == database.with_suffix(".log")
    assert "Traceback (most recent call last): from the server" in database.with_suffix(".log").read_text()


def test_server_that_cannot_start_is_one_line(cli_env, home):
    """A startup timeout no server can meet stands for a machine too busy for any timeout."""
    env = {**cli_env, "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "1"}
    done = run_cli(env, "profile", *TINY, "--batch", "4", "--max-steps", "2")
    assert done.code == 2, done.err[-3000:]
    assert "Traceback" not in done.err + done.out
    assert len(done.error_lines) == 1
    line = done.error_lines[0]
    assert "did not start within 1 s" in line and "PREFECT_API_URL" in line
    log = Path(line.rsplit("its output: ", 1)[1])
    assert log.parent == home / "prefect" and log.is_file()  # the server's own output, kept for a look
    assert mlflow_runs(env) == [] and run_folders(home) == []
    assert _server_databases(home) == []  # a migration cut short is not left for the next command


@pytest.mark.slow
def test_sweep_on_a_loaded_machine(cli_env, home):
    """2 CPU burners per usable core while a sweep starts its temporary server and trains: it succeeds,
    starts one server for the parent and its children, and every child trains exactly --max-steps steps
    (32 images / batch 16 = 2 steps per epoch: 6 steps take 3 epochs)."""
    env = {**cli_env, "PREFECT_LOGGING_LEVEL": "INFO"}
    config = _small_config(home.parent)
    # the burners outlast the server's start (the step that timed out at Prefect's 20 s) and the first child
    with cpu_burners(2, seconds=120):
        done = run_cli(
            env,
            "sweep",
            "--variants",
            "fp32",
            "--repeats",
            "1",
            "--config",
            str(config),
            "--batch",
            "16",
            "--max-steps",
            "6",
            *TINY,
            timeout=600,
        )
    output = done.out + done.err
    assert done.code == 0, output[-4000:]
    assert "Traceback" not in output
    assert output.count(SERVER_STARTS) == 1
    runs = mlflow_runs(env)
    assert len(runs) == 3 and {status for _, status in runs} == {"FINISHED"}  # parent + baseline + fp32
    children = [run_id for run_id, _ in runs if _has_metric(env, run_id, "perf/steps_total")]
    assert len(children) == 2
    assert [_metric(env, run_id, "perf/steps_total") for run_id in children] == [6.0, 6.0]
    assert _server_databases(home) == ["0"]


def _small_config(folder: Path) -> Path:
    """32 synthetic images and no validation pass: the tests measure the commands, not ultralytics' validation."""
    config = folder / "run.yaml"
    config.write_text("synthetic_images: 32\nval: false\n")
    return config


def _has_metric(env: dict[str, str], run_id: str, key: str) -> bool:
    db = Path(env["MLFLOW_TRACKING_URI"].removeprefix("sqlite:///"))
    with closing(sqlite3.connect(db)) as connection:
        return bool(
            list(connection.execute("SELECT 1 FROM latest_metrics WHERE run_uuid = ? AND key = ?", (run_id, key)))
        )


@pytest.mark.slow
def test_two_profiles_at_once_on_one_data_home(cli_env, home):
    """Same data home (synthetic dataset built by both, one SQLite MLflow store, Prefect files): both finish,
    neither prints a crashed server start."""
    config = _small_config(home.parent)
    first, second = (
        start_cli(cli_env, "profile", "--config", str(config), *TINY, "--batch", "8", "--max-steps", "3")
        for _ in range(2)
    )
    outputs = []
    try:
        for process in (first, second):
            out, _ = process.communicate(timeout=600)
            outputs.append((process.returncode, out))
    finally:
        for process in (first, second):
            if process.poll() is None:
                process.kill()
                process.wait()
    for code, out in outputs:
        assert code == 0, out[-4000:]
        assert "Traceback" not in out and "database is locked" not in out
    runs = mlflow_runs(cli_env)
    assert len(runs) == 2 and {status for _, status in runs} == {"FINISHED"}
    assert [_metric(cli_env, run_id, "perf/steps_total") for run_id, _ in runs] == [3.0, 3.0]
    assert len(list((home / "datasets").glob("synthetic-*"))) == 1
    assert _server_databases(home) == ["0", "1"]  # each temporary server had a database of its own
    server_logs = sorted((home / "prefect").glob("server-*.log"))  # where a server's own crash would be told
    assert len(server_logs) == 2 and not [log for log in server_logs if "database is locked" in log.read_text()]
