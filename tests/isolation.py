"""A process on throwaway stores of its own: the data home, a SQLite MLflow store and Prefect's home in one folder,
offline, and never a developer's Prefect server. Used by the test session (tests/conftest.py), the standalone names
run (tests/tracking/demo_run_names.py) and the benchmarks that run flows. Call it before prefect or ultralytics is
imported: both read their settings once, on import."""

from __future__ import annotations

import os
from pathlib import Path


def isolate(folder: Path) -> None:
    """Point this process, and every process it starts, at stores under `folder`."""
    os.environ["YOLO_MLOPS_HOME"] = str(folder / "home")
    os.environ["MLFLOW_TRACKING_URI"] = f"sqlite:///{folder / 'mlflow.db'}"
    os.environ["PREFECT_HOME"] = str(folder / "prefect")
    os.environ["PREFECT_SERVER_ANALYTICS_ENABLED"] = "false"
    os.environ["PREFECT_LOGGING_LEVEL"] = "WARNING"
    os.environ.pop("PREFECT_API_URL", None)  # its own server, never a developer's
    os.environ["YOLO_OFFLINE"] = "1"
