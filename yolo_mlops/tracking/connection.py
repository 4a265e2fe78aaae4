"""Where the tracking store is and whether it can be used: the tracking URI, the client, the up-front check of
the URI and the server's health during a run.

MLflow itself is imported only by the functions that need it: `run_end` reads `tracking_uri` and
`server_reachable` from here, and the CLI reads `run_end` to word a failure without importing MLflow.
"""

from __future__ import annotations

import os
from contextlib import closing
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlparse

from yolo_mlops.compat import mlflow as mlflow_compat
from yolo_mlops.config import data_home
from yolo_mlops.errors import ConfigError

if TYPE_CHECKING:
    from mlflow.tracking import MlflowClient


def tracking_uri() -> str:
    """`MLFLOW_TRACKING_URI`, else a SQLite store in the project data directory."""
    return os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{data_home() / 'mlflow.db'}"


def default_artifact_root() -> Path:
    return data_home() / "mlartifacts"


def client() -> MlflowClient:
    from mlflow.tracking import MlflowClient

    bound_http_retries()
    return MlflowClient(tracking_uri=tracking_uri())


def check_reachable(uri: str | None = None, timeout_s: float = 5.0) -> None:
    """Fail fast with one line when the tracking store cannot be used (before any run is created)."""
    uri = uri or tracking_uri()
    scheme = urlparse(uri).scheme
    engine = scheme.split("+", 1)[0]  # postgresql+psycopg2 -> postgresql
    if scheme in ("", "file"):
        if not mlflow_compat.file_store_allowed():  # newer MLflow refuses its file store unless told otherwise
            folder = Path(urlparse(uri).path if scheme == "file" else uri).resolve()
            raise ConfigError(
                f"MLFLOW_TRACKING_URI {uri} is a folder (MLflow's file store), which MLflow "
                f"refuses; use sqlite:///{folder / 'mlflow.db'} or an http(s) server "
                "(or set MLFLOW_ALLOW_FILE_STORE=true)"
            )
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

        from mlflow.tracking import MlflowClient

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
            raise ConfigError(
                f"MLFLOW_TRACKING_URI {url.render_as_string(hide_password=True)} needs the "
                f"{engine} driver {url.get_dialect().driver!r}, which is not installed "
                f"({exc}); install it into this environment"
            ) from None
    elif scheme not in ("", "file", "http", "https", "databricks"):
        raise ConfigError(f"unsupported MLFLOW_TRACKING_URI scheme {scheme!r} in {uri}")


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
