"""Real servers for the deployment tests: PostgreSQL, the MLflow tracking server and the Prefect server.

Each fixture starts the real program the production stack runs (deploy/docker-compose.yml), configured
by the same files (deploy/postgres/init-databases.sh, deploy/mlflow/start-mlflow.sh), on loopback ports
in a throwaway directory, and stops it at the end of the session. Nothing here needs Docker.

PostgreSQL comes from Debian's `postgresql` package (.ci/run installs it; see
deploy/ci-system-packages.txt). Without it the integration tests skip, saying so.
"""

from __future__ import annotations

import secrets
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from postgres_cluster import Postgres, pg_bindir, running_cluster
from processes import REPO, VENV_BIN, base_env, fail_with_log, free_port, http_ok, poll_until, start, stop

__all__ = ["REPO", "VENV_BIN", "base_env", "fail_with_log", "free_port", "http_ok", "poll_until", "start", "stop"]


# ---------------------------------------------------------------- PostgreSQL


@pytest.fixture(scope="session")
def postgres() -> Iterator[Postgres]:
    bindir = pg_bindir()
    if bindir is None:
        pytest.skip(
            "PostgreSQL server binaries (initdb, pg_ctl) not found: apt-get install postgresql "
            "(.ci/run installs it, see deploy/ci-system-packages.txt)"
        )
    base = Path(tempfile.mkdtemp(prefix="yolo-mlops-pg-"))
    try:
        with running_cluster(base, bindir) as pg:
            yield pg
    finally:
        shutil.rmtree(base, ignore_errors=True)


# ---------------------------------------------------------------- MLflow


@dataclass
class MlflowServer:
    url: str
    username: str
    password: str
    artifacts: Path
    log: Path

    def healthy(self) -> bool:
        return http_ok(f"{self.url}/health")

    def client_env(self) -> dict[str, str]:
        """What a client (CLI, flow run) needs: the documented MLFLOW_* variables."""
        return {
            "MLFLOW_TRACKING_URI": self.url,
            "MLFLOW_TRACKING_USERNAME": self.username,
            "MLFLOW_TRACKING_PASSWORD": self.password,
        }


@pytest.fixture(scope="session")
def work_dir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="yolo-mlops-deploy-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _start_mlflow(postgres: Postgres, work_dir: Path, attempt: int) -> tuple[subprocess.Popen, MlflowServer]:
    """deploy/mlflow/start-mlflow.sh with PostgreSQL stores, basic auth and a local artifact destination."""
    port = free_port()
    artifacts = work_dir / "mlflow-artifacts"
    artifacts.mkdir(exist_ok=True)
    log = work_dir / f"mlflow-{attempt}.log"
    password = secrets.token_urlsafe(16)
    env = base_env() | {
        # explicit driver: SQLAlchemy 2.1 maps plain postgresql:// to psycopg 3, the image ships psycopg2
        "MLFLOW_BACKEND_STORE_URI": postgres.url("mlflow", "mlflow", driver="postgresql+psycopg2"),
        "MLFLOW_AUTH_DATABASE_URI": postgres.url("mlflow", "mlflow_auth", driver="postgresql+psycopg2"),
        "MLFLOW_ARTIFACTS_DESTINATION": str(artifacts),
        "MLFLOW_AUTH_ADMIN_PASSWORD": password,
        "MLFLOW_FLASK_SERVER_SECRET_KEY": secrets.token_hex(16),
        "MLFLOW_HOST": "127.0.0.1",
        "MLFLOW_PORT": str(port),
        "MLFLOW_WORKERS": "1",  # 2 shared cores
    }
    # MLFLOW_SERVER_ALLOWED_HOSTS unset: the script's default (the compose stack's) is under test.
    env.pop("MLFLOW_SERVER_ALLOWED_HOSTS", None)
    proc = start(["sh", str(REPO / "deploy/mlflow/start-mlflow.sh")], log, env)
    return proc, MlflowServer(
        url=f"http://127.0.0.1:{port}", username="admin", password=password, artifacts=artifacts, log=log
    )


# ---------------------------------------------------------------- Prefect


@dataclass
class PrefectServer:
    api_url: str
    auth_string: str  # "user:password", the server's basic auth as in the compose stack
    home: Path
    log: Path

    @property
    def auth(self) -> tuple[str, str]:
        user, _, password = self.auth_string.partition(":")
        return user, password

    def healthy(self) -> bool:
        return http_ok(f"{self.api_url}/health", auth=self.auth)

    def client_env(self) -> dict[str, str]:
        # PREFECT_HOME isolates profiles/settings from the developer's own.
        return {
            "PREFECT_API_URL": self.api_url,
            "PREFECT_API_AUTH_STRING": self.auth_string,
            "PREFECT_HOME": str(self.home),
        }


def _start_prefect(postgres: Postgres, work_dir: Path, attempt: int) -> tuple[subprocess.Popen, PrefectServer]:
    """`prefect server start` on PostgreSQL, as in the compose stack (API + services in one process here)."""
    port = free_port()
    home = work_dir / "prefect-home"
    home.mkdir(exist_ok=True)
    log = work_dir / f"prefect-server-{attempt}.log"
    auth_string = f"admin:{secrets.token_urlsafe(16)}"
    env = base_env() | {
        "PREFECT_HOME": str(home),
        "PREFECT_API_DATABASE_CONNECTION_URL": postgres.url("prefect", "prefect", driver="postgresql+asyncpg"),
        "PREFECT_SERVER_API_AUTH_STRING": auth_string,
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "PREFECT_UI_ENABLED": "false",
        # No scheduler: the nightly deployment must not create runs that a --run-once worker could pick up.
        "PREFECT_SERVER_SERVICES_SCHEDULER_ENABLED": "false",
    }
    proc = start([str(VENV_BIN / "prefect"), "server", "start", "--host", "127.0.0.1", "--port", str(port)], log, env)
    return proc, PrefectServer(api_url=f"http://127.0.0.1:{port}/api", auth_string=auth_string, home=home, log=log)


@dataclass
class Stack:
    mlflow: MlflowServer
    prefect: PrefectServer


@pytest.fixture(scope="session")
def stack(postgres: Postgres, work_dir: Path) -> Iterator[Stack]:
    """MLflow and Prefect servers on the one PostgreSQL; started together, since both spend their
    start-up in imports and database migrations."""
    servers: dict[str, Callable[[int], tuple[subprocess.Popen, MlflowServer | PrefectServer]]] = {
        "MLflow server": lambda n: _start_mlflow(postgres, work_dir, n),
        "Prefect server": lambda n: _start_prefect(postgres, work_dir, n),
    }
    started = {name: launch(0) for name, launch in servers.items()}
    procs = [proc for proc, _ in started.values()]
    try:
        up: dict[str, MlflowServer | PrefectServer] = {}
        for name, launch in servers.items():
            proc, server = started[name]
            for attempt in range(1, 4):
                if poll_until(server.healthy, 180, proc):
                    break
                # free_port() only finds a port that was free a moment ago; another process on this
                # shared machine may have bound it since. Try again on a new one.
                if attempt < 3 and "already in use" in server.log.read_text(errors="replace"):
                    proc, server = launch(attempt)
                    procs.append(proc)
                    continue
                fail_with_log(name, proc, server.log)
            up[name] = server
        mlflow, prefect = up["MLflow server"], up["Prefect server"]
        assert isinstance(mlflow, MlflowServer) and isinstance(prefect, PrefectServer)
        yield Stack(mlflow=mlflow, prefect=prefect)
    finally:
        for proc in procs:
            stop(proc)


@pytest.fixture(scope="session")
def mlflow_server(stack: Stack) -> MlflowServer:
    return stack.mlflow


@pytest.fixture(scope="session")
def prefect_api(stack: Stack) -> PrefectServer:
    return stack.prefect
