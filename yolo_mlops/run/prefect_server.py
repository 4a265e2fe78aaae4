"""The temporary Prefect server a command starts when no `PREFECT_API_URL` is set.

Prefect starts it on first use (a uvicorn subprocess that migrates a SQLite database) and gives it 20 s by
default: too little on a busy 2-core box, where data-loader workers of another training hold the CPUs. And
by default every temporary server of every process uses the same `~/.prefect/prefect.db`, so two commands
started at once migrate and write one SQLite file together and one of them crashes on "database is locked".

`configure(home)` runs before prefect is imported (Prefect reads its settings once, on import) and only
sets what the user has not set:

- `PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS` = 180;
- a database of this process's own under `<home>/prefect/`, removed when the process ends (with no
  `PREFECT_API_URL` the server lives only as long as the command, so its history has no later reader);
- telemetry off (the tool runs offline).

Within one process Prefect keeps one temporary server (one `SubprocessASGIServer` per port, the port left
to Prefect), so a sweep's child flows reuse the server its parent started.
"""

from __future__ import annotations

import atexit
import os
from pathlib import Path

STARTUP_TIMEOUT_S = 180  # a fresh database migrates in ~15 s on an idle 2-core box, > 60 s when it is loaded
_TIMEOUT_VAR = "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS"
_DATABASE_VARS = ("PREFECT_SERVER_DATABASE_CONNECTION_URL", "PREFECT_API_DATABASE_CONNECTION_URL")
_DB_PREFIX = "server-"
_OWNER_VAR = "YOLO_MLOPS_PREFECT_DB_OWNER"  # pid of the process that chose the database variable below

_STARTUP_FAILED = "Timed out while attempting to connect to ephemeral Prefect API server"


def configure(home: Path) -> Path | None:
    """Set the temporary server's settings the user left unset; returns this process's database, if any."""
    os.environ.setdefault(_TIMEOUT_VAR, str(STARTUP_TIMEOUT_S))
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    if os.environ.get(_OWNER_VAR, str(os.getpid())) != str(os.getpid()):
        # inherited from a parent command (a test, a script calling the CLI): that database is its own
        os.environ.pop(_DATABASE_VARS[0], None)
        os.environ.pop(_OWNER_VAR)
    if os.environ.get("PREFECT_API_URL") or any(os.environ.get(name) for name in _DATABASE_VARS):
        return None  # a real server, or a database the user chose
    folder = home / "prefect"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        _remove_stale(folder)
    except OSError:  # an unwritable data home fails later, in the checks, with one line of its own
        return None
    database = folder / f"{_DB_PREFIX}{os.getpid()}.db"
    os.environ[_DATABASE_VARS[0]] = f"sqlite+aiosqlite:///{database}"
    os.environ[_OWNER_VAR] = str(os.getpid())
    # atexit runs handlers last-in first-out: Prefect registers its server's stop() later (on start), so
    # the server has stopped before its files are removed
    atexit.register(_remove_database, database)
    return database


def startup_failure(exc: BaseException) -> str | None:
    """One line for a temporary server that did not start in time; None for any other error."""
    if not isinstance(exc, RuntimeError) or _STARTUP_FAILED not in str(exc):
        return None
    timeout = os.environ.get(_TIMEOUT_VAR, "20")
    return (f"the temporary Prefect server did not start within {timeout} s (machine busy?); raise "
            f"{_TIMEOUT_VAR}, or point PREFECT_API_URL at a running server (`prefect server start`)")


def _database_files(database: Path) -> list[Path]:
    return [database.with_name(database.name + suffix) for suffix in ("", "-wal", "-shm", "-journal")]


def _remove_database(database: Path) -> None:
    for path in _database_files(database):
        path.unlink(missing_ok=True)


def _remove_stale(folder: Path) -> None:
    """Databases of processes that no longer exist (killed before their atexit handlers ran)."""
    for path in folder.glob(f"{_DB_PREFIX}*.db"):
        pid = path.name.removeprefix(_DB_PREFIX).removesuffix(".db")
        if pid.isdigit() and not _alive(int(pid)):
            _remove_database(path)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        return True
    return True
