"""The temporary Prefect server a command starts when no `PREFECT_API_URL` is set.

`configure(home)` runs before prefect is imported (Prefect reads its settings once, on import) and sets only what
the user has not: a start-up timeout a busy machine can meet, a database slot no other running command uses (held
with a file lock for the life of the process, kept for the next command on the slot), telemetry off. The server's
own output goes to `server_log()`, beside its database, not into the command's. Why each: docs/reliability.md
("The temporary Prefect server").
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import IO

from yolo_mlops.compat import prefect as prefect_compat
from yolo_mlops.compat import prefect_client
from yolo_mlops.errors import ConfigError

STARTUP_TIMEOUT_S = 180  # above the slowest start measured on a loaded 2-core box (docs/benchmarks.md)
SLOTS = 64  # commands running at once on one data home
_TIMEOUT_VAR = "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS"
_DATABASE_VARS = ("PREFECT_SERVER_DATABASE_CONNECTION_URL", "PREFECT_API_DATABASE_CONNECTION_URL")
_OWNER_VAR = "YOLO_MLOPS_PREFECT_DB_OWNER"  # pid of the process that chose the database variable below
_STARTUP_FAILED = "Timed out while attempting to connect to ephemeral Prefect API server"

_held: list[IO[str]] = []  # slot locks of this process, open until it exits
_slots: dict[Path, Path] = {}  # data home's prefect folder -> this process's database there


def configure(home: Path) -> Path | None:
    """Set the temporary server's settings the user left unset; returns this process's database, if any."""
    os.environ.setdefault(_TIMEOUT_VAR, str(STARTUP_TIMEOUT_S))
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    if _OWNER_VAR in os.environ:
        # set by this process before, or inherited from a parent command (a test, a script calling the CLI):
        # either way not the user's choice
        os.environ.pop(_DATABASE_VARS[0], None)
        os.environ.pop(_OWNER_VAR)
    if os.environ.get("PREFECT_API_URL") or any(os.environ.get(name) for name in _DATABASE_VARS):
        return None  # a real server, or a database the user chose
    try:
        database = _take_slot(home / "prefect")
    except OSError:  # an unwritable data home fails later, in the checks, with one line of its own
        return None
    if database is None:
        return None  # every slot busy: Prefect's default database
    os.environ[_DATABASE_VARS[0]] = f"sqlite+aiosqlite:///{database}"
    os.environ[_OWNER_VAR] = str(os.getpid())
    return database


def startup_failure(exc: BaseException) -> str | None:
    """One line for a temporary server that did not start in time; None for any other error.

    The database it was migrating is removed: a migration cut short must not be the next command's start."""
    if not isinstance(exc, RuntimeError) or _STARTUP_FAILED not in str(exc):
        return None
    for database in _slots.values():
        for path in _database_files(database):
            path.unlink(missing_ok=True)
    timeout = os.environ.get(_TIMEOUT_VAR, "20")
    log = server_log()
    return (
        f"the temporary Prefect server did not start within {timeout} s (machine busy?); raise "
        f"{_TIMEOUT_VAR}, or point PREFECT_API_URL at a running server (`prefect server start`)"
        + (f"; its output: {log}" if log is not None else "")
    )


def server_log() -> Path | None:
    """Where this process's temporary server writes its output: beside its slot's database; None when the
    database is the user's (or Prefect's default), whose server keeps Prefect's own output handling."""
    database = next(iter(_slots.values()), None)
    return database.with_suffix(".log") if database is not None else None


def _take_slot(folder: Path) -> Path | None:
    """A free slot's database, locked for the life of this process (one slot per process)."""
    import fcntl

    if folder in _slots:
        return _slots[folder]
    folder.mkdir(parents=True, exist_ok=True)
    from importlib.metadata import version

    prefix = f"server-{version('prefect')}"  # a database migrated by another Prefect release is not reused
    for slot in range(SLOTS):
        lock = open(folder / f"{prefix}-{slot}.lock", "a")  # held open until the process exits
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.close()
            continue
        _held.append(lock)
        _slots[folder] = folder / f"{prefix}-{slot}.db"
        return _slots[folder]
    return None


def _database_files(database: Path) -> list[Path]:
    return [database.with_name(database.name + suffix) for suffix in ("", "-wal", "-shm", "-journal")]


def detach_temporary_server() -> bool:
    """This process's temporary Prefect server in a session of its own, its output in `server_log()`, so that a
    terminal's Ctrl-C reaches only the command (compat/prefect.py says why); False when there is none to manage."""
    return prefect_compat.own_session_server(server_log)


def api_url() -> str | None:
    """The Prefect API this process talks to: PREFECT_API_URL as Prefect reads it (environment or profile); None
    when the command starts its temporary server instead."""
    return prefect_client.api_url()


def check_api(context: str = "") -> None:
    """With PREFECT_API_URL set, one bounded request to its /health before anything starts, as for the tracking
    store (tracking/connection.py): a server that accepts connections and never answers would otherwise hold the
    command for Prefect's request timeout and retries, and something that is not Prefect would be taken for a
    Prefect server that lacks what the command asked for. `context` starts the line (`--pool P: `)."""
    url = api_url()
    if url is None:
        return
    from yolo_mlops.tracking import connection

    answer = connection.probe(url.rstrip("/") + "/health", headers=prefect_client.auth_headers())
    if answer.status is None:
        raise ConfigError(
            f"{context}no Prefect server answers at {url} ({answer.silence}); start it (`prefect server start`), "
            "or point PREFECT_API_URL at the server the workers poll"
        )
    if answer.status in (401, 403):
        raise ConfigError(
            f"{context}the Prefect API at {url} refused the credentials (HTTP {answer.status} on /health); "
            "check PREFECT_API_AUTH_STRING or PREFECT_API_KEY"
        )
    if answer.status != 200 or answer.body.strip() != "true":
        got = f"HTTP {answer.status}" + (f" {answer.body.strip()[:60]!r}" if answer.body.strip() else "")
        raise ConfigError(
            f"{context}no Prefect API at {url}: GET /health answered {got}, not Prefect's `true`; point "
            "PREFECT_API_URL at the Prefect server's API (http://HOST:4200/api)"
        )
