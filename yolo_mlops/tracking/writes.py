"""What the project writes to the tracking store: experiments, runs, batched params/metrics/tags, artifacts.

Runs are created explicitly by id (MlflowClient), never through `mlflow.start_run()`'s thread-local
active-run stack: Prefect runs tasks in worker threads, where that stack is empty. Writes are batched
(`log_batch` chunks to MLflow's limits), artifacts uploaded as folders. How a run ends is `run_end`.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from urllib.parse import urlparse

import pandas as pd
from mlflow.entities import Metric, Param, RunTag
from mlflow.tracking import MlflowClient

from yolo_mlops import names
from yolo_mlops.tracking.connection import default_artifact_root
from yolo_mlops.tracking.queries import find_experiment_id


def experiment_id(mlflow: MlflowClient, name: str) -> str:
    """The id of the experiment `name`, created (as a training experiment) when it does not exist."""
    found = find_experiment_id(mlflow, name)
    if found is not None:
        return found
    kind = {names.EXPERIMENT_KIND: names.EXPERIMENT_KIND_TRAINING}
    location = None
    if urlparse(mlflow.tracking_uri).scheme not in ("http", "https"):
        # Without this MLflow puts artifacts in ./mlartifacts of whatever directory the process started in.
        location = (default_artifact_root() / name).as_uri()
    try:
        return mlflow.create_experiment(name, artifact_location=location, tags=kind)
    except Exception:  # created concurrently by another run (sweeps start children in parallel)
        created = mlflow.get_experiment_by_name(name)
        if created is None:
            raise
        return created.experiment_id


def create_run(
    mlflow: MlflowClient, experiment: str, run_name: str | None, tags: Mapping[str, str], params: Mapping[str, str]
) -> str:
    run = mlflow.create_run(experiment_id(mlflow, experiment), run_name=run_name, tags=dict(tags))
    log_values(mlflow, run.info.run_id, params=params)
    return run.info.run_id


def log_values(
    mlflow: MlflowClient,
    run_id: str,
    *,
    params: Mapping[str, str] = {},
    metrics: Mapping[str, float] = {},
    tags: Mapping[str, str] = {},
    histories: Mapping[str, Sequence[tuple[int, float]]] = {},
    timestamp_ms: int | None = None,
) -> None:
    """One batched write: params, summary metrics, tags, and per-step metric histories ((step, value) pairs).

    `timestamp_ms` pins every row's timestamp: a row sent again with it is an exact duplicate, which MLflow drops.
    """
    now = int(time.time() * 1000) if timestamp_ms is None else timestamp_ms
    metric_rows = [Metric(k, float(v), now, 0) for k, v in metrics.items()]
    for key, points in histories.items():
        metric_rows.extend(Metric(key, float(v), now, int(step)) for step, v in points)
    mlflow.log_batch(
        run_id,
        metrics=metric_rows,
        params=[Param(k, _param_value(v)) for k, v in params.items()],
        tags=[RunTag(k, str(v)) for k, v in tags.items()],
    )


def _param_value(value: object) -> str:
    text = str(value)
    return text if len(text) <= 6000 else text[:5997] + "..."  # MLflow's param value limit


def log_folder(mlflow: MlflowClient, run_id: str, folder: Path, artifact_path: str | None = None) -> None:
    if folder.is_dir() and any(folder.iterdir()):
        mlflow.log_artifacts(run_id, str(folder), artifact_path)


def log_file(mlflow: MlflowClient, run_id: str, path: Path, artifact_path: str | None = None) -> None:
    mlflow.log_artifact(run_id, str(path), artifact_path)


def log_text(mlflow: MlflowClient, run_id: str, text: str, artifact_file: str) -> None:
    mlflow.log_text(run_id, text, artifact_file)


def log_table(mlflow: MlflowClient, run_id: str, frame: pd.DataFrame, artifact_file: str) -> None:
    """An MLflow table: the UI shows it, and `mlflow.load_table(artifact_file, run_ids=...)` joins runs."""
    mlflow.log_table(run_id, data=frame, artifact_file=artifact_file)
