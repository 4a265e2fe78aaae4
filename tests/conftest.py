"""Session-wide isolation: a temp data home, one SQLite MLflow store and one Prefect test server per session.

Environment variables are set at import time, before any test module imports prefect or ultralytics,
because both read their settings once on import.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

_SESSION_DIR = Path(tempfile.mkdtemp(prefix="yolo-mlops-tests-"))
os.environ["YOLO_MLOPS_HOME"] = str(_SESSION_DIR / "home")
os.environ["MLFLOW_TRACKING_URI"] = f"sqlite:///{_SESSION_DIR / 'mlflow.db'}"
os.environ["PREFECT_HOME"] = str(_SESSION_DIR / "prefect")
os.environ["PREFECT_SERVER_ANALYTICS_ENABLED"] = "false"
os.environ["PREFECT_LOGGING_LEVEL"] = "WARNING"
os.environ.pop("PREFECT_API_URL", None)  # tests use their own server, never a developer's
os.environ["YOLO_OFFLINE"] = "1"


@pytest.fixture(scope="session")
def session_dir() -> Path:
    return _SESSION_DIR


@pytest.fixture(scope="session")
def prefect_server():
    """Prefect's real (ephemeral) API server, started once per session."""
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=120):
        yield


@pytest.fixture(scope="session")
def mlflow_client():
    from yolo_mlops import tracking

    return tracking.client()
