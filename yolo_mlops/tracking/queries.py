"""What the project reads back from the tracking store: run lookups, children of a sweep, paginated searches
over long histories (trends, compare), artifacts and tables, and links into the MLflow UI."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

import pandas as pd
from mlflow.tracking import MlflowClient

from yolo_mlops.tracking import names
from yolo_mlops.tracking.connection import tracking_uri


@dataclass(frozen=True)
class StoredRun:
    """What the project reads back of a run: id, status (`FINISHED`, `FAILED`, ...), tags, last metric values."""

    run_id: str
    status: str
    tags: dict[str, str]
    metrics: dict[str, float]


def experiment_of(mlflow: MlflowClient, run_id: str) -> str:
    return mlflow.get_run(run_id).info.experiment_id


def child_runs(mlflow: MlflowClient, parent_run_id: str) -> list[StoredRun]:
    """All child runs of a parent (a sweep), found by the parent tag: works for any store, from any process."""
    found = mlflow.search_runs([experiment_of(mlflow, parent_run_id)],
                               filter_string=f"tags.`{names.PARENT_RUN_TAG}` = '{parent_run_id}'",
                               max_results=5000)
    return [StoredRun(r.info.run_id, r.info.status, dict(r.data.tags), dict(r.data.metrics)) for r in found]


def find_experiment_id(mlflow: MlflowClient, name: str) -> str | None:
    """The id of an existing experiment (never creates one)."""
    found = mlflow.get_experiment_by_name(name)
    return None if found is None else found.experiment_id


def find_run(mlflow: MlflowClient, run_id: str):
    """The run, or None when no run has this id (any other failure, e.g. the server, is raised)."""
    from mlflow.exceptions import MlflowException

    try:
        return mlflow.get_run(run_id)
    except MlflowException as exc:
        if exc.error_code in ("RESOURCE_DOES_NOT_EXIST", "INVALID_PARAMETER_VALUE"):  # unknown or malformed id
            return None
        raise


def run_metric(mlflow: MlflowClient, run_id: str, name: str) -> float | None:
    """One summary metric of a run (its latest value), None when the run has none by that name."""
    return mlflow.get_run(run_id).data.metrics.get(name)


# ---- history queries (trends, compare) ------------------------------------------------------------------------
# search_runs is paginated over ALL pages: MLflow answers at most `max_results` runs per call, and a trend over
# a silently truncated history would be wrong.

SEARCH_PAGE_SIZE = 1000  # runs per page; MLflow's SQL store caps one page at 50,000


def search_all_runs(mlflow: MlflowClient, experiment_ids: Sequence[str], filter_string: str = "",
                    order_by: Sequence[str] = ("attributes.start_time ASC",),
                    page_size: int | None = None) -> list:
    """Every run matching the filter, following page tokens until the last page."""
    page_size = page_size or SEARCH_PAGE_SIZE
    runs: list = []
    token = None
    while True:
        page = mlflow.search_runs(list(experiment_ids), filter_string=filter_string, order_by=list(order_by),
                                  max_results=page_size, page_token=token)
        runs.extend(page)
        token = page.token
        if not token:
            return runs


# ---- artifacts --------------------------------------------------------------------------------------------------

def download_artifact(mlflow: MlflowClient, run_id: str, path: str, dest: Path) -> Path:
    """One artifact file of a run into `dest` (a folder); returns the local file."""
    dest.mkdir(parents=True, exist_ok=True)
    return Path(mlflow.download_artifacts(run_id, path, str(dest)))


def load_artifact_text(mlflow: MlflowClient, run_id: str, artifact_path: str) -> str | None:
    """Text of one run artifact; None when the run has no such artifact."""
    import tempfile

    from mlflow.exceptions import MlflowException

    with tempfile.TemporaryDirectory(prefix="yolo-mlops-artifact-") as tmp:
        try:
            local = mlflow.download_artifacts(run_id, artifact_path, tmp)
        except (MlflowException, OSError):
            return None
        path = Path(local)
        return path.read_text() if path.is_file() else None


def load_run_table(mlflow: MlflowClient, run_id: str, artifact_file: str) -> pd.DataFrame | None:
    """An MLflow table logged with `writes.log_table` (JSON, pandas 'split' layout); None when absent."""
    import io

    text = load_artifact_text(mlflow, run_id, artifact_file)
    if text is None:
        return None
    return pd.read_json(io.StringIO(text), orient="split")


# ---- links into the MLflow UI -----------------------------------------------------------------------------------

def _ui_base() -> str:
    """The tracking server itself, or where `mlflow ui` serves a local store."""
    uri = tracking_uri()
    return uri if urlparse(uri).scheme in ("http", "https") else "http://127.0.0.1:5000"


def run_url(run_id: str, experiment_id_: str) -> str:
    """Link to the run in the MLflow UI (served by `mlflow ui` for local stores)."""
    return f"{_ui_base().rstrip('/')}/#/experiments/{experiment_id_}/runs/{run_id}?{names.UI_TRAINING_VIEW_QUERY}"


def artifact_url(run_id: str, artifact_path: str) -> str:
    """URL of one run artifact as served by the MLflow UI/server (`/get-artifact`), for links and images."""
    return f"{_ui_base().rstrip('/')}/get-artifact?path={artifact_path}&run_uuid={run_id}"


def ui_command() -> str:
    uri = tracking_uri()
    if urlparse(uri).scheme in ("http", "https"):
        return f"open {uri}"
    return f"mlflow ui --backend-store-uri {uri} --port 5000"
