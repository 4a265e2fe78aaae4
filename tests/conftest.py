"""Session-wide isolation: a temp data home, one SQLite MLflow store and one Prefect test server per session.

Environment variables are set at import time, before any test module imports prefect or ultralytics,
because both read their settings once on import.
"""

from __future__ import annotations

import ipaddress
import os
import socket
import sys
import tempfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # helper modules shared by test folders (processes.py)

_SESSION_DIR = Path(tempfile.mkdtemp(prefix="yolo-mlops-tests-"))
os.environ["YOLO_MLOPS_HOME"] = str(_SESSION_DIR / "home")
os.environ["MLFLOW_TRACKING_URI"] = f"sqlite:///{_SESSION_DIR / 'mlflow.db'}"
os.environ["PREFECT_HOME"] = str(_SESSION_DIR / "prefect")
os.environ["PREFECT_SERVER_ANALYTICS_ENABLED"] = "false"
os.environ["PREFECT_LOGGING_LEVEL"] = "WARNING"
os.environ.pop("PREFECT_API_URL", None)  # tests use their own server, never a developer's
os.environ["YOLO_OFFLINE"] = "1"

# Offline guard: any connection to a non-loopback address fails and is recorded, so a test that needs the
# internet (ultralytics' checks, a download, telemetry) fails here instead of passing on a networked laptop.
BLOCKED_CONNECTIONS: list[object] = []
_real_connect, _real_connect_ex = socket.socket.connect, socket.socket.connect_ex


def _is_loopback(address: object) -> bool:
    host = address[0] if isinstance(address, tuple) else address
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(str(host).split("%")[0]).is_loopback
    except ValueError:
        return False


def _guard(sock: socket.socket, address: object) -> None:
    if sock.family in (socket.AF_INET, socket.AF_INET6) and not _is_loopback(address):
        BLOCKED_CONNECTIONS.append(address)
        raise OSError(f"tests are offline: blocked connection to {address}")


def _connect(self, address):
    _guard(self, address)
    return _real_connect(self, address)


def _connect_ex(self, address):
    _guard(self, address)
    return _real_connect_ex(self, address)


socket.socket.connect, socket.socket.connect_ex = _connect, _connect_ex


@pytest.fixture(scope="session")
def session_dir() -> Path:
    return _SESSION_DIR


@pytest.fixture(scope="session")
def prefect_server():
    """Prefect's real (ephemeral) API server, started once per session."""
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=120):
        yield


@pytest.fixture
def blocked_connections() -> list[object]:
    return BLOCKED_CONNECTIONS


@pytest.fixture(scope="session")
def mlflow_client():
    from yolo_mlops import tracking

    return tracking.client()
