"""The MLflow client calls of the project: runs, children, queries, uploads. Names come from `names`.

Runs are created and ended explicitly by id (MlflowClient), never through `mlflow.start_run()`'s
thread-local active-run stack: Prefect runs tasks in worker threads, where that stack is empty.
Writes are batched (`log_batch` chunks to MLflow's limits), artifacts uploaded as folders.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import closing, contextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

import pandas as pd
from mlflow.entities import Metric, Param, RunStatus, RunTag
from mlflow.tracking import MlflowClient

from yolo_mlops.run.config import ConfigError, data_home
from yolo_mlops.tracking import names


def tracking_uri() -> str:
    """`MLFLOW_TRACKING_URI`, else a SQLite store in the project data directory."""
    return os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{data_home() / 'mlflow.db'}"


def default_artifact_root() -> Path:
    return data_home() / "mlartifacts"


def client() -> MlflowClient:
    return MlflowClient(tracking_uri=tracking_uri())


def check_reachable(uri: str | None = None, timeout_s: float = 5.0) -> None:
    """Fail fast with one line when the tracking store cannot be used (before any run is created)."""
    uri = uri or tracking_uri()
    scheme = urlparse(uri).scheme
    engine = scheme.split("+", 1)[0]  # postgresql+psycopg2 -> postgresql
    if scheme in ("", "file"):
        from mlflow.environment_variables import MLFLOW_ALLOW_FILE_STORE

        if not MLFLOW_ALLOW_FILE_STORE.get():  # MLflow 3 refuses its file store unless this is set
            folder = Path(urlparse(uri).path if scheme == "file" else uri).resolve()
            raise ConfigError(f"MLFLOW_TRACKING_URI {uri} is a folder (MLflow's file store), which MLflow "
                              f"refuses; use sqlite:///{folder / 'mlflow.db'} or an http(s) server "
                              "(or set MLFLOW_ALLOW_FILE_STORE=true)")
    elif scheme in ("http", "https"):
        import requests

        try:
            # /health is served by `mlflow server`; one short request instead of MLflow's minutes of retries
            response = requests.get(uri.rstrip("/") + "/health", timeout=timeout_s)
        except requests.RequestException as exc:
            raise ConfigError(f"MLflow tracking server {uri} is unreachable: {type(exc).__name__}") from None
        if response.status_code >= 500 or response.status_code == 404:
            raise ConfigError(f"MLflow tracking server {uri} answered /health with HTTP {response.status_code}")
    elif scheme == "sqlite":
        db = Path(uri.removeprefix("sqlite:///"))
        try:
            db.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ConfigError(f"MLflow SQLite store {uri}: cannot create {db.parent}: {exc.strerror}") from None
        if db.is_file():  # read-only open: checking writes nothing
            import sqlite3

            try:
                with closing(sqlite3.connect(db.resolve().as_uri() + "?mode=ro", uri=True)) as connection:
                    connection.execute("PRAGMA schema_version")
            except sqlite3.DatabaseError as exc:
                raise ConfigError(f"MLflow SQLite store {uri} cannot be read: {exc}") from None
        # MLflow creates a new store's tables on first use, unlocked: two commands starting together on a fresh
        # store both try and one fails ("table ... already exists"). Open it here, one process at a time
        # (the store object is cached per URI, so the run reuses it).
        import fcntl
        import hashlib
        import tempfile

        key = hashlib.sha256(str(db.resolve()).encode()).hexdigest()[:16]
        with open(Path(tempfile.gettempdir()) / f"yolo-mlops-store-{key}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
            MlflowClient(tracking_uri=uri).search_experiments(max_results=1)
    if engine in ("postgresql", "mysql", "mssql", "sqlite"):
        # MLflow opens these through SQLAlchemy, which imports the scheme's driver only on first use:
        # ask SQLAlchemy which driver that is and whether it is installed, before any run exists
        from sqlalchemy.engine import make_url

        url = make_url(uri)
        try:
            url.get_dialect().import_dbapi()
        except ImportError as exc:
            raise ConfigError(f"MLFLOW_TRACKING_URI {url.render_as_string(hide_password=True)} needs the "
                              f"{engine} driver {url.get_dialect().driver!r}, which is not installed "
                              f"({exc}); install it into this environment") from None
    elif scheme not in ("", "file", "http", "https", "databricks"):
        raise ConfigError(f"unsupported MLFLOW_TRACKING_URI scheme {scheme!r} in {uri}")


def experiment_id(mlflow: MlflowClient, name: str) -> str:
    found = mlflow.get_experiment_by_name(name)
    if found is not None:
        return found.experiment_id
    kind = {names.EXPERIMENT_KIND: names.EXPERIMENT_KIND_TRAINING}
    location = None
    if urlparse(mlflow.tracking_uri).scheme not in ("http", "https"):
        # Without this MLflow puts artifacts in ./mlartifacts of whatever directory the process started in.
        location = (default_artifact_root() / name).as_uri()
    try:
        return mlflow.create_experiment(name, artifact_location=location, tags=kind)
    except Exception:  # created concurrently by another run (sweeps start children in parallel)
        found = mlflow.get_experiment_by_name(name)
        if found is None:
            raise
        return found.experiment_id


def create_run(mlflow: MlflowClient, experiment: str, run_name: str | None, tags: Mapping[str, str],
               params: Mapping[str, str]) -> str:
    run = mlflow.create_run(experiment_id(mlflow, experiment), run_name=run_name, tags=dict(tags))
    log_values(mlflow, run.info.run_id, params=params)
    return run.info.run_id


def log_values(mlflow: MlflowClient, run_id: str, *, params: Mapping[str, str] = {},
               metrics: Mapping[str, float] = {}, tags: Mapping[str, str] = {},
               histories: Mapping[str, Sequence[tuple[int, float]]] = {}) -> None:
    """One batched write: params, summary metrics, tags, and per-step metric histories ((step, value) pairs)."""
    now = int(time.time() * 1000)
    metric_rows = [Metric(k, float(v), now, 0) for k, v in metrics.items()]
    for key, points in histories.items():
        metric_rows.extend(Metric(key, float(v), now, int(step)) for step, v in points)
    mlflow.log_batch(run_id,
                     metrics=metric_rows,
                     params=[Param(k, _param_value(v)) for k, v in params.items()],
                     tags=[RunTag(k, str(v)) for k, v in tags.items()])


def _param_value(value: object) -> str:
    text = str(value)
    return text if len(text) <= 6000 else text[:5997] + "..."  # MLflow's param value limit


def log_folder(mlflow: MlflowClient, run_id: str, folder: Path, artifact_path: str | None = None) -> None:
    if folder.is_dir() and any(folder.iterdir()):
        mlflow.log_artifacts(run_id, str(folder), artifact_path)


def log_table(mlflow: MlflowClient, run_id: str, frame: pd.DataFrame, artifact_file: str) -> None:
    """An MLflow table: the UI shows it, and `mlflow.load_table(artifact_file, run_ids=...)` joins runs."""
    mlflow.log_table(run_id, data=frame, artifact_file=artifact_file)


def end_run(mlflow: MlflowClient, run_id: str, status: str) -> None:
    mlflow.set_terminated(run_id, status=status)


@contextmanager
def run_guard(mlflow: MlflowClient, run_id: str, salvage: Callable[[], None] | None = None) -> Iterator[None]:
    """End the run FINISHED, or FAILED/KILLED with whatever was captured: no run is left RUNNING."""
    try:
        yield
    except BaseException as exc:
        status = RunStatus.to_string(RunStatus.KILLED if isinstance(exc, KeyboardInterrupt) else RunStatus.FAILED)
        try:
            log_values(mlflow, run_id, tags={names.ERROR: f"{type(exc).__name__}: {exc}"[:names.TAG_MAX_CHARS]})
            if salvage is not None:
                salvage()  # upload whatever the run captured before it failed
        finally:
            end_run(mlflow, run_id, status)
        raise
    else:
        end_run(mlflow, run_id, "FINISHED")


def log_text(mlflow: MlflowClient, run_id: str, text: str, artifact_file: str) -> None:
    mlflow.log_text(run_id, text, artifact_file)


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


def download_artifact(mlflow: MlflowClient, run_id: str, path: str, dest: Path) -> Path:
    """One artifact file of a run into `dest` (a folder); returns the local file."""
    dest.mkdir(parents=True, exist_ok=True)
    return Path(mlflow.download_artifacts(run_id, path, str(dest)))


def run_url(run_id: str, experiment_id_: str) -> str:
    """Link to the run in the MLflow UI (served by `mlflow ui` for local stores)."""
    uri = tracking_uri()
    base = uri if urlparse(uri).scheme in ("http", "https") else "http://127.0.0.1:5000"
    return f"{base.rstrip('/')}/#/experiments/{experiment_id_}/runs/{run_id}"


def ui_command() -> str:
    uri = tracking_uri()
    if urlparse(uri).scheme in ("http", "https"):
        return f"open {uri}"
    return f"mlflow ui --backend-store-uri {uri} --port 5000"


# ---- history queries (trends, compare) ------------------------------------------------------------------------
# Read-only helpers for long-term history. search_runs is paginated over ALL pages: MLflow answers at most
# `max_results` runs per call, and a trend over a silently truncated history would be wrong.

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


def find_experiment_id(mlflow: MlflowClient, name: str) -> str | None:
    """The id of an existing experiment (never creates one)."""
    found = mlflow.get_experiment_by_name(name)
    return None if found is None else found.experiment_id


def find_run(mlflow: MlflowClient, run_id: str):
    """The run, or None when no run has this id."""
    from mlflow.exceptions import MlflowException

    try:
        return mlflow.get_run(run_id)
    except MlflowException:
        return None


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
    """An MLflow table logged with `log_table` (JSON, pandas 'split' layout); None when absent."""
    import io

    text = load_artifact_text(mlflow, run_id, artifact_file)
    if text is None:
        return None
    return pd.read_json(io.StringIO(text), orient="split")


def log_file(mlflow: MlflowClient, run_id: str, path: Path, artifact_path: str | None = None) -> None:
    mlflow.log_artifact(run_id, str(path), artifact_path)


def artifact_url(run_id: str, artifact_path: str) -> str:
    """URL of one run artifact as served by the MLflow UI/server (`/get-artifact`), for links and images."""
    uri = tracking_uri()
    base = uri if urlparse(uri).scheme in ("http", "https") else "http://127.0.0.1:5000"
    return f"{base.rstrip('/')}/get-artifact?path={artifact_path}&run_uuid={run_id}"
