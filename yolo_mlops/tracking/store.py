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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol
from urllib.parse import urlparse

import pandas as pd
from mlflow.entities import Metric, Param, RunStatus, RunTag
from mlflow.tracking import MlflowClient

from yolo_mlops.errors import ConfigError
from yolo_mlops.run.config import data_home
from yolo_mlops.tracking import names


def tracking_uri() -> str:
    """`MLFLOW_TRACKING_URI`, else a SQLite store in the project data directory."""
    return os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{data_home() / 'mlflow.db'}"


def default_artifact_root() -> Path:
    return data_home() / "mlartifacts"


def client() -> MlflowClient:
    bound_http_retries()
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
        status = _health_status(uri, timeout_s)
        if isinstance(status, str):
            raise ConfigError(f"MLflow tracking server {uri} is unreachable: {status}")
        if status >= 500 or status == 404:  # 404: something answers, but not `mlflow server` (wrong URL)
            raise ConfigError(f"MLflow tracking server {uri} answered /health with HTTP {status}")
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
               histories: Mapping[str, Sequence[tuple[int, float]]] = {}, timestamp_ms: int | None = None) -> None:
    """One batched write: params, summary metrics, tags, and per-step metric histories ((step, value) pairs).

    `timestamp_ms` pins every row's timestamp: a row sent again with it is an exact duplicate, which MLflow drops.
    """
    now = int(time.time() * 1000) if timestamp_ms is None else timestamp_ms
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


# end of a run ------------------------------------------------------------------------------------------------

# MLflow's own HTTP defaults retry for minutes (7 retries, backoff factor 2, 120 s timeout): with the server
# gone, one call took 4.4 min. These bound one call to about 3 s when the server refuses connections and
# about 3 x 15 s when it hangs; a user's own settings win.
HTTP_RETRY_DEFAULTS = {
    "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2",
    "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
    "MLFLOW_HTTP_REQUEST_BACKOFF_JITTER": "0.5",
    "MLFLOW_HTTP_REQUEST_TIMEOUT": "15",
}


def bound_http_retries() -> None:
    """Set bounded MLflow HTTP retry defaults for this process where the user has not set them."""
    for key, value in HTTP_RETRY_DEFAULTS.items():
        os.environ.setdefault(key, value)


def _health_status(uri: str, timeout_s: float) -> int | str:
    """HTTP status of the server's /health (served by `mlflow server`), or why there was no answer: one
    short request instead of MLflow's minutes of retries."""
    import requests

    try:
        return requests.get(uri.rstrip("/") + "/health", timeout=timeout_s).status_code
    except requests.RequestException as exc:
        return type(exc).__name__


def server_reachable(uri: str | None = None, timeout_s: float = 5.0) -> bool:
    """Whether an HTTP tracking server still answers (a run is under way: any answer below 500 is a live
    server, unlike check_reachable's up-front test of the URL); other stores are local (True)."""
    uri = uri or tracking_uri()
    if urlparse(uri).scheme not in ("http", "https"):
        return True
    status = _health_status(uri, timeout_s)
    return isinstance(status, int) and status < 500


def interruption_signal(exc: BaseException) -> str | None:
    """'SIGTERM'/'SIGINT' when `exc` is how a signal ended the run (KeyboardInterrupt, Prefect's
    TerminationSignal, the CLI's Interrupted, all carry or imply the signal), else None."""
    import signal as signals

    number = getattr(exc, "signal", None)
    if isinstance(number, int):
        try:
            return signals.Signals(number).name
        except ValueError:
            return f"signal {number}"
    return "SIGINT" if isinstance(exc, KeyboardInterrupt) else None


def exception_line(exc: BaseException) -> str:
    """One line naming the cause: 'OSError: [Errno 28] No space left on device: '/x''."""
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def failure_line(exc: BaseException, uri: str | None = None) -> str:
    """`exception_line`, except that a tracking server that stopped answering is said so in a few words
    instead of MLflow's 400-character 'Max retries exceeded ... NewConnectionError(...)'."""
    import re

    text = str(exc)
    uri = uri or tracking_uri()
    if ("Max retries exceeded" in text or "ConnectionError" in text or "Read timed out" in text) and \
            urlparse(uri).scheme in ("http", "https") and not server_reachable(uri):
        cause = re.search(r"\[Errno -?\d+\] ([^\"')]+)", text) or re.search(r"(Read timed out)", text)
        return f"MLflow tracking server {uri} unreachable ({cause.group(1) if cause else type(exc).__name__})"
    return exception_line(exc)


@dataclass
class RunEnd:
    """How a run ended: its status, the one-line reason, and the end-of-run steps that failed."""

    run_id: str
    status: str
    reason: str = ""
    failures: list[str] = field(default_factory=list)  # "step: cause", one per failed or skipped step
    pending: bool = False  # the tracking store missed part of the run: `yolo-mlops upload` can finish it
    folder: str = ""  # the local run folder, when the run has one
    # id() of the exception that ended it: the CLI matches the exception it is handling (alive, so its id is
    # unique then) without this record keeping the exception's frames, and the training state in them, alive
    error_id: int | None = field(default=None, repr=False)

    def summary(self) -> str:
        if self.pending:
            return f"MLflow run {self.run_id} is incomplete: the tracking store could not take the end of the run"
        text = f"MLflow run {self.run_id} ended {self.status}"
        steps = list(dict.fromkeys(f.split(":")[0] for f in self.failures))  # causes: upload_pending, error.log
        return text + (f"; not recorded: {', '.join(steps)}" if steps else "")


class Salvage(Protocol):
    """What the owner of a run does when it ends (pipeline.RunSalvage for a profiled run)."""

    folder: Path  # the local run folder

    def reason(self, exc: BaseException, status: str) -> str: ...

    def record(self, status: str, reason: str) -> None: ...  # local: what the store should receive

    def steps(self, status: str, reason: str) -> list[tuple[str, Callable[[], None]]]: ...

    def ended(self, end: RunEnd, exc: BaseException | None) -> None: ...


_ENDED: list[RunEnd] = []  # the last 100 runs this process could not end cleanly FINISHED (see ended_by)


def ended_runs() -> list[RunEnd]:
    return list(_ENDED)


def ended_by(exc: BaseException) -> RunEnd | None:
    """The run that `exc` (or an exception it was raised from or while handling) ended, most recent first."""
    chain, seen = [], exc
    while seen is not None and len(chain) < 20:
        chain.append(seen)
        seen = seen.__cause__ or seen.__context__
    for end in reversed(_ENDED):
        if any(end.error_id == id(e) for e in chain):
            return end
    return None


def _attempt(end: RunEnd, what: str, call: Callable[[], None], uri: str) -> None:
    """Run one end-of-run step; a failure is recorded and, if the server has gone, later steps are skipped
    (each would wait out its retries) and the run is marked pending for `yolo-mlops upload`."""
    if end.pending:
        end.failures.append(f"{what}: skipped, tracking server unreachable")
        return
    try:
        call()
    except Exception as exc:
        end.failures.append(f"{what}: {exception_line(exc)}"[:500])
        if not server_reachable(uri):
            end.pending = True


def finish_failed_run(mlflow: MlflowClient, run_id: str, status: str, reason: str,
                      salvage: Salvage | None = None) -> RunEnd:
    """Salvage, error tag, terminal status: each step in its own try, so no failing call skips another;
    the terminal status is always attempted (unless the server is known to be gone)."""
    end = RunEnd(run_id, status, reason)
    uri = mlflow.tracking_uri
    if salvage is not None:
        try:
            salvage.record(status, reason)
        except Exception as exc:
            end.failures.append(f"run folder: {exception_line(exc)}"[:500])
    if not server_reachable(uri):
        end.pending = True
    for what, call in (salvage.steps(status, reason) if salvage is not None else []):
        _attempt(end, what, call, uri)
    _attempt(end, "error tag", lambda: log_values(mlflow, run_id, tags={names.ERROR: reason[:names.TAG_MAX_CHARS]}),
             uri)
    if end.pending:  # the status too: one more wait on a server known to be gone would only delay the user
        end.failures.append("status: skipped, tracking server unreachable")
    else:
        try:
            end_run(mlflow, run_id, status)
        except Exception as exc:
            end.failures.append(f"status: {exception_line(exc)}"[:500])
            end.pending = True
    return end


@contextmanager
def run_guard(mlflow: MlflowClient, run_id: str, salvage: Salvage | None = None) -> Iterator[None]:
    """End the run FINISHED, or FAILED/KILLED with whatever was captured: no run is left RUNNING.

    A signal (SIGTERM, SIGINT) ends it KILLED; anything else FAILED, with a one-line reason in the
    `yolo_mlops.error` tag. When the tracking store cannot take the end of the run, `salvage.ended` marks the
    local run folder so `yolo-mlops upload` can finish it.
    """
    try:
        yield
    except BaseException as exc:
        status = RunStatus.to_string(RunStatus.KILLED if interruption_signal(exc) else RunStatus.FAILED)
        reason = failure_line(exc, mlflow.tracking_uri)
        if salvage is not None:
            try:
                reason = salvage.reason(exc, status)
            except Exception:
                pass  # the plain exception line is still a reason
        end = finish_failed_run(mlflow, run_id, status, reason, salvage)
        end.folder = str(salvage.folder) if salvage is not None else ""
        end.error_id = id(exc)
        _ENDED[:] = _ENDED[-99:] + [end]
        if salvage is not None:
            try:
                salvage.ended(end, exc)
            except Exception as marker_error:  # the folder itself cannot be written (disk full): say so
                end.failures.append(f"run folder: {exception_line(marker_error)}"[:500])
        raise
    end = RunEnd(run_id, "FINISHED", folder=str(salvage.folder) if salvage is not None else "")
    try:
        end_run(mlflow, run_id, "FINISHED")
    except Exception as exc:
        end.failures.append(f"status: {exception_line(exc)}"[:500])
        end.pending = True
        end.reason = failure_line(exc, mlflow.tracking_uri)
        end.error_id = id(exc)
        _ENDED[:] = _ENDED[-99:] + [end]
        if salvage is not None:
            salvage.ended(end, exc)
        raise
    if salvage is not None:
        try:
            salvage.ended(end, None)
        except Exception:
            pass  # the run is complete in the store; a missing local marker only makes `upload` re-check


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
    return f"{base.rstrip('/')}/#/experiments/{experiment_id_}/runs/{run_id}?{names.UI_TRAINING_VIEW_QUERY}"


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
    """The run, or None when no run has this id (any other failure, e.g. the server, is raised)."""
    from mlflow.exceptions import MlflowException

    try:
        return mlflow.get_run(run_id)
    except MlflowException as exc:
        if exc.error_code in ("RESOURCE_DOES_NOT_EXIST", "INVALID_PARAMETER_VALUE"):  # unknown or malformed id
            return None
        raise


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
