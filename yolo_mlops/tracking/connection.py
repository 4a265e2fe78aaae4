"""Where the tracking store is and whether it can be used: the tracking URI, the client, the up-front check of
the URI, of the store its artifacts go to, and the server's health during a run.

Every server a command talks to (the MLflow tracking server, an HTTP or S3 artifact store, the Prefect API) is
asked first with one bounded request (`probe`: `YOLO_MLOPS_SERVER_TIMEOUT_S` (5 s by default) for the connection
and for the answer), and a server that does not answer is one line naming its URL and what answered: nothing,
a refused connection, or something that is not that server. A client library's own retries would otherwise
wait minutes on a server that accepts connections and never answers.

MLflow itself is imported only by the functions that need it: `run_end` reads `tracking_uri` and
`server_reachable` from here, and the CLI reads `run_end` to word a failure without importing MLflow.
"""

from __future__ import annotations

import os
from contextlib import closing
from dataclasses import dataclass
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


def checked_client() -> MlflowClient:
    """The client of a command that reads or writes the store: the store checked first (`check_reachable`), so a
    server that does not answer is one line in seconds, not the client's minutes of retries."""
    check_reachable()
    return client()


SERVER_TIMEOUT_VAR = "YOLO_MLOPS_SERVER_TIMEOUT_S"
SERVER_TIMEOUT_S = 5.0


def server_timeout_s() -> float:
    """Seconds a probe waits for a connection, and again for the answer: `YOLO_MLOPS_SERVER_TIMEOUT_S`, else 5."""
    text = os.environ.get(SERVER_TIMEOUT_VAR, "").strip()
    if not text:
        return SERVER_TIMEOUT_S
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not value > 0:
        raise ConfigError(f"{SERVER_TIMEOUT_VAR}={text!r}: must be a number of seconds > 0")
    return value


@dataclass(frozen=True)
class Answer:
    """What one request to a server got: an HTTP status and the start of its body, or why there was none."""

    url: str
    status: int | None = None  # None: no HTTP answer at all
    body: str = ""  # the first bytes of the answer, as text
    silence: str = ""  # why there was no answer: "connection refused", "nothing answered within <timeout> s", ...


def probe(url: str, headers: dict[str, str] | None = None, timeout_s: float | None = None) -> Answer:
    """One GET of `url`, bounded by `timeout_s` (default `server_timeout_s()`) for the connection and for each read
    of the answer; never raises for a server that is down, silent or wrong (the caller words it)."""
    import requests

    timeout = server_timeout_s() if timeout_s is None else timeout_s
    try:
        response = requests.get(url, headers=headers, timeout=timeout, allow_redirects=False)
    except requests.exceptions.ConnectTimeout:
        return Answer(url, silence=f"no connection within {timeout:g} s (nothing accepted it)")
    except requests.exceptions.ReadTimeout:
        return Answer(url, silence=f"connected, but nothing answered within {timeout:g} s")
    except requests.exceptions.SSLError as exc:
        return Answer(url, silence=f"TLS handshake failed ({_short(exc)})")
    except requests.exceptions.ConnectionError as exc:  # refused, no such host, or an answer cut off or stalled
        text = str(exc)
        if "Connection refused" in text:
            return Answer(url, silence="connection refused")
        if "Name or service not known" in text or "name resolution" in text or "nodename nor servname" in text:
            return Answer(url, silence="host not found")
        if "timed out" in text:
            return Answer(url, silence=f"connected, but the answer stalled for {timeout:g} s")
        return Answer(url, silence=f"no connection ({_short(exc)})")
    except (requests.RequestException, OSError) as exc:
        return Answer(url, silence=f"{type(exc).__name__}: {_short(exc)}")
    return Answer(url, response.status_code, response.text[:512])


def _short(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text[:200] or type(exc).__name__


def check_reachable(uri: str | None = None, timeout_s: float | None = None) -> None:
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
        answer = probe(uri.rstrip("/") + "/health", timeout_s=timeout_s)
        if answer.status is None:
            raise ConfigError(f"MLflow tracking server {uri} is unreachable: {answer.silence}")
        if answer.status == 404:  # something answers, but not `mlflow server` (wrong URL or port)
            raise ConfigError(f"MLflow tracking server {uri} answered /health with HTTP 404: not an MLflow server")
        if answer.status >= 500:
            raise ConfigError(f"MLflow tracking server {uri} answered /health with HTTP {answer.status}")
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


# MLflow's own HTTP defaults (7 retries, backoff factor 2, a long timeout) retry for minutes with the server gone
# (docs/reliability.md). These bound one call to a few seconds when the server refuses connections and to three
# request timeouts when it hangs; a user's own settings win.
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


def server_silence(uri: str | None = None, timeout_s: float | None = None) -> str | None:
    """Why an HTTP tracking server does not answer now (a run is under way: any answer below 500 is a live
    server, unlike check_reachable's up-front test of the URL), or None when it answers; other stores are local."""
    uri = uri or tracking_uri()
    if urlparse(uri).scheme not in ("http", "https"):
        return None
    answer = probe(uri.rstrip("/") + "/health", timeout_s=timeout_s)
    if answer.status is None:
        return answer.silence
    return None if answer.status < 500 else f"answered /health with HTTP {answer.status}"


def server_reachable(uri: str | None = None, timeout_s: float | None = None) -> bool:
    """Whether an HTTP tracking server still answers (`server_silence` is None)."""
    return server_silence(uri, timeout_s) is None


def _mlflow_auth_headers() -> dict[str, str]:
    """The credentials MLflow's client sends (MLFLOW_TRACKING_USERNAME/PASSWORD, else MLFLOW_TRACKING_TOKEN): a
    server with authentication then answers the artifact listing itself, which asks its store, rather than
    refusing the probe before the store is reached."""
    import base64

    user, password = os.environ.get("MLFLOW_TRACKING_USERNAME"), os.environ.get("MLFLOW_TRACKING_PASSWORD")
    if user and password:
        return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}
    token = os.environ.get("MLFLOW_TRACKING_TOKEN")
    return {"Authorization": f"Bearer {token}"} if token else {}


def check_experiment_store(experiment: str) -> None:
    """The artifact store of an existing experiment, checked (`check_artifact_store`) before a run goes into it;
    a new experiment's store is the tracking server's default, which the server's own check covers."""
    found = client().get_experiment_by_name(experiment)
    if found is not None and found.artifact_location:
        check_artifact_store(found.artifact_location, f"artifacts of experiment {experiment!r}")


def check_artifact_store(artifact_uri: str, what: str, uri: str | None = None) -> None:
    """One bounded request to the store a run's artifacts go to, before a run is created or resumed: an HTTP
    artifact store (`http(s)://.../mlflow-artifacts/artifacts`, or `mlflow-artifacts:` served by the tracking
    server) is asked for its listing, an S3 store's endpoint (`MLFLOW_S3_ENDPOINT_URL`) for any answer. Local
    folders and the other schemes are left to MLflow. `what` names whose artifacts they are (one line)."""
    parsed = urlparse(artifact_uri)
    if parsed.scheme == "mlflow-artifacts":
        base = uri or tracking_uri()
        if parsed.netloc:  # mlflow-artifacts://host:port/path names its server itself
            base = f"{urlparse(base).scheme or 'http'}://{parsed.netloc}"
        if urlparse(base).scheme not in ("http", "https"):
            return
        listing = f"{base.rstrip('/')}/api/2.0/mlflow-artifacts/artifacts?path={parsed.path.lstrip('/')}"
    elif parsed.scheme in ("http", "https"):
        endpoint = "/mlflow-artifacts/artifacts"  # how MLflow's HTTP artifact repository splits the URI
        root, found, tail = artifact_uri.partition(endpoint)
        listing = f"{root}{endpoint}?path={tail.lstrip('/')}" if found else artifact_uri
    elif parsed.scheme == "s3":
        import importlib.util

        if importlib.util.find_spec("boto3") is None:
            raise ConfigError(
                f"artifact store {artifact_uri} ({what}) needs boto3, which is not installed; install it, or "
                "let the tracking server serve the artifacts (mlflow server --serve-artifacts)"
            )
        listing = os.environ.get("MLFLOW_S3_ENDPOINT_URL") or "https://s3.amazonaws.com"
    else:
        return
    answer = probe(listing, headers=_mlflow_auth_headers() if parsed.scheme != "s3" else None)
    if answer.status is None:
        raise ConfigError(f"artifact store {answer.url} ({what}) is unreachable: {answer.silence}")
    if answer.status >= 500:
        raise ConfigError(f"artifact store {answer.url} ({what}) answered HTTP {answer.status}")
