"""A throwaway PostgreSQL cluster set up as the deploy stack's (deploy/docker-compose.yml): initdb with
password (scram) auth over TCP and trust on its private socket, started on a loopback port, then the stack's
own deploy/postgres/init-databases.sh (the `mlflow`, `mlflow_auth` and `prefect` databases and roles).
Used by the deployment tests (tests/deploy/conftest.py) and benchmarks/bench_history_scale.py.

PostgreSQL comes from Debian's `postgresql` package (deploy/ci-system-packages.txt)."""

from __future__ import annotations

import glob
import os
import pwd
import secrets
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from processes import REPO, base_env, free_port


def pg_bindir() -> Path | None:
    """Debian keeps initdb/pg_ctl off PATH, in /usr/lib/postgresql/<major>/bin; None when not installed."""
    found = shutil.which("pg_ctl")
    if found and shutil.which("initdb"):
        return Path(found).resolve().parent
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"), key=lambda p: int(p.split("/")[4]))
    return Path(candidates[-1]).parent if candidates else None


@dataclass
class Postgres:
    host: str
    port: int
    socket_dir: Path
    bindir: Path
    passwords: dict[str, str] = field(default_factory=dict)  # role -> password: mlflow, prefect

    def url(self, role: str, database: str, driver: str = "postgresql") -> str:
        return f"{driver}://{role}:{self.passwords[role]}@{self.host}:{self.port}/{database}"


def _server_user() -> list[str]:
    """initdb refuses to run as root: as root, the server runs as the `postgres` user (or `nobody`)."""
    if os.geteuid() != 0:
        return []
    try:
        pwd.getpwnam("postgres")
        user = "postgres"
    except KeyError:
        user = "nobody"
    return ["runuser", "-u", user, "--"]


@contextmanager
def running_cluster(base: Path, bindir: Path) -> Iterator[Postgres]:
    """The cluster's data, socket and log under `base` (an empty folder), running until the block ends."""
    as_user = _server_user()
    base.chmod(0o755)  # the server user must reach its data and socket dirs
    data, sock = base / "data", base / "sock"
    for path in (data, sock):
        path.mkdir()
        if as_user:
            shutil.chown(path, user=as_user[2])
    log = base / "postgres.log"
    log.touch()
    log.chmod(0o666)
    pwfile = base / "pwfile"
    pwfile.write_text(secrets.token_urlsafe(16) + "\n")  # the superuser's; setup goes through the socket
    pwfile.chmod(0o644)
    initdb = [str(bindir / "initdb"), "-D", str(data), "-U", "postgres", "--pwfile", str(pwfile)]
    initdb += ["--auth-local=trust", "--auth-host=scram-sha-256", "--encoding=UTF8", "--no-sync"]
    subprocess.run([*as_user, *initdb], check=True, capture_output=True)
    port = free_port()
    options = f"-p {port} -k {sock} -c listen_addresses=127.0.0.1 -c fsync=off"
    pg_ctl = [*as_user, str(bindir / "pg_ctl"), "-D", str(data)]
    subprocess.run([*pg_ctl, "-l", str(log), "-w", "-t", "60", "-o", options, "start"], check=True, capture_output=True)
    pg = Postgres(
        host="127.0.0.1",
        port=port,
        socket_dir=sock,
        bindir=bindir,
        passwords={"mlflow": secrets.token_urlsafe(16), "prefect": secrets.token_urlsafe(16)},
    )
    try:
        env = base_env() | {  # what the compose stack's postgres container runs on its first start
            "PATH": f"{bindir}{os.pathsep}{base_env()['PATH']}",
            "PGHOST": str(sock),
            "PGPORT": str(port),
            "POSTGRES_USER": "postgres",
            "MLFLOW_DB_PASSWORD": pg.passwords["mlflow"],
            "PREFECT_DB_PASSWORD": pg.passwords["prefect"],
        }
        subprocess.run(
            ["sh", str(REPO / "deploy/postgres/init-databases.sh")], env=env, check=True, capture_output=True
        )
        yield pg
    finally:
        subprocess.run([*pg_ctl, "-m", "fast", "-w", "stop"], capture_output=True)
