"""The CLI as a user meets it: `python -m yolo_mlops.cli` in its own process, with its own data home and store.

Imported by the tests of this folder (its conftest puts the folder on sys.path)."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass
from pathlib import Path

CLI = [sys.executable, "-m", "yolo_mlops.cli"]
# small enough to train in seconds on two CPU cores
TINY = ["--device", "cpu", "--imgsz", "64", "--workers", "0", "--wait", "0", "--warmup", "1", "--active", "1"]


@dataclass(frozen=True)
class Finished:
    code: int
    out: str
    err: str

    @property
    def error_lines(self) -> list[str]:
        return [line for line in self.err.splitlines() if line.startswith("yolo-mlops: error:")]


def cli_env(tmp_path: Path, home: Path) -> dict[str, str]:
    """The test process's environment with its own data home and store, and no Prefect server settings."""
    env = dict(os.environ)
    env.update(
        YOLO_MLOPS_HOME=str(home),
        MLFLOW_TRACKING_URI=f"sqlite:///{tmp_path / 'mlflow.db'}",
        PREFECT_LOGGING_LEVEL="WARNING",
    )
    for name in (
        "PREFECT_API_URL",
        "PREFECT_SERVER_DATABASE_CONNECTION_URL",
        "PREFECT_API_DATABASE_CONNECTION_URL",
        "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS",
    ):
        env.pop(name, None)
    return env


def run_cli(env: dict[str, str], *argv: str, timeout: float = 600) -> Finished:
    done = subprocess.run([*CLI, *argv], env=env, capture_output=True, text=True, timeout=timeout)
    return Finished(done.returncode, done.stdout, done.stderr)


def start_cli(env: dict[str, str], *argv: str, merge_output: bool = True) -> subprocess.Popen:
    """The CLI started in the background; stderr joins stdout unless `merge_output` is False."""
    stderr = subprocess.STDOUT if merge_output else subprocess.PIPE
    return subprocess.Popen([*CLI, *argv], env=env, stdout=subprocess.PIPE, stderr=stderr, text=True)


def mlflow_runs(env: dict[str, str]) -> list[tuple[str, str]]:
    """(run id, status) of every run in the CLI's SQLite store, read with sqlite3 (no MLflow client needed)."""
    db = Path(env["MLFLOW_TRACKING_URI"].removeprefix("sqlite:///"))
    if not db.exists():
        return []
    with closing(sqlite3.connect(db)) as connection:
        tables = {row[0] for row in connection.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        if "runs" not in tables:
            return []
        return list(connection.execute("SELECT run_uuid, status FROM runs"))


def run_folders(home: Path) -> list[Path]:
    runs = home / "runs"
    return sorted(runs.iterdir()) if runs.is_dir() else []


@contextmanager
def cpu_burners(per_core: int, seconds: float) -> Iterator[list[subprocess.Popen]]:
    """`per_core` processes for every core this test may use (its CPU affinity: in a parallel run the timing
    tests may hold one), each spinning for at most `seconds`; always ended on exit."""
    count = per_core * (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)
    spin = f"import time\nend = time.monotonic() + {seconds}\nwhile time.monotonic() < end: pass\n"
    burners = [subprocess.Popen([sys.executable, "-c", spin]) for _ in range(count)]
    try:
        yield burners
    finally:
        for burner in burners:
            if burner.poll() is None:
                burner.send_signal(signal.SIGKILL)
            burner.wait()
