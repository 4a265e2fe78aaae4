"""Real programs started by tests (servers, workers): free ports, polling for readiness, process-group stop.

Shared by the tests that start the production programs (tests/deploy) and the fleet tests (Prefect server,
MLflow server, two workers). The root conftest puts this folder on sys.path.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
VENV_BIN = Path(sys.executable).parent  # mlflow, prefect and the linters live next to this python


_HANDED_OUT: set[int] = set()


def free_port() -> int:
    """A loopback port free now, chosen by the kernel (at random in its ephemeral range, so parallel test
    workers do not pick the same one) and never handed out twice in this process: two servers started one
    after the other cannot get the same port before the first has bound it."""
    while True:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        if port not in _HANDED_OUT:
            _HANDED_OUT.add(port)
            return port


def poll_until(check, timeout: float, proc: subprocess.Popen | None = None) -> bool:
    """Poll `check()` until it is truthy (True), the timeout passes or `proc` exits (False)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            return False
        try:
            if check():
                return True
        except Exception:  # the server is not up yet: connection refused, 503 ...
            pass
        time.sleep(0.5)
    return False


def fail_with_log(what: str, proc: subprocess.Popen, log: Path) -> None:
    tail = log.read_text(errors="replace")[-6000:] if log.exists() else ""
    state = f"exited with {proc.returncode}" if proc.poll() is not None else "still not answering"
    pytest.fail(f"{what} did not come up ({state})\n--- {log} ---\n{tail}")


def http_ok(url: str, **kwargs) -> bool:
    import requests

    return requests.get(url, timeout=5, **kwargs).status_code == 200


def base_env() -> dict[str, str]:
    """Environment for child processes: ours, with the venv's tools first on PATH."""
    env = dict(os.environ)
    env["PATH"] = f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}"
    return env


def start(cmd: list[str], log: Path, env: dict[str, str], cwd: Path = REPO) -> subprocess.Popen:
    """Start a server in its own process group, so teardown stops its children too."""
    with log.open("ab") as out:
        return subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=cwd, start_new_session=True)


def stop(proc: subprocess.Popen, grace: float = 5) -> None:
    """SIGTERM the process group; SIGKILL what is left after `grace` (throwaway servers, nothing to save)."""
    if proc.poll() is not None:
        return
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(grace)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(grace)
