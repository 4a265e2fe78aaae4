"""Prefect: its temporary server's process and the process pool of a sweep's lanes, both reached through private
attributes.

- `own_session_server`: the temporary server (`SubprocessASGIServer`, registered per port in `_instances`, started
  by `_run_uvicorn_command`) in a session of its own with its output in a log file, so a Ctrl-C meant for the
  command does not also stop the server the command is still ending its run on;
- `end_pool_processes`: the worker processes of a `ProcessPoolTaskRunner` (`_executor._processes`, after draining
  `_resolver_executor` where it exists).

The releases checked and why the server needs its own session: docs/compatibility.md ("Prefect") and
docs/reliability.md.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

OWN_SESSION_SERVER = "OwnSessionServer"


def own_session_server(server_log: Callable[[], Path | None]) -> bool:
    """Make this process's temporary Prefect server start in a session of its own, its output in `server_log()`;
    False when there is no temporary server to manage (PREFECT_API_URL set) or Prefect's started without it."""
    from prefect.settings import PREFECT_API_URL

    if os.environ.get("PREFECT_API_URL") or PREFECT_API_URL.value():
        return False
    from prefect.server.api import server as prefect_server

    base = prefect_server.SubprocessASGIServer
    if None in base._instances:
        return type(base._instances[None]).__name__ == OWN_SESSION_SERVER
    own_session_server_class(base, server_log)()  # registers itself as the instance Prefect's clients get
    return True


def own_session_server_class(base: Any, server_log: Callable[[], Path | None]) -> type:
    import prefect
    from prefect.settings import get_current_settings

    class OwnSessionServer(base):
        def _run_uvicorn_command(self) -> subprocess.Popen[Any]:
            log_path = server_log()
            if log_path is None or not log_path.parent.is_dir():
                return self.start_server(None)
            with open(log_path, "wb") as log:  # the server process keeps a descriptor of its own
                return self.start_server(log)

        def stop(self) -> None:
            super().stop()
            # before Prefect 3.6.26 a stopped server stayed registered under the port it was asked for (None): the
            # next client in the process got it back, stopped, instead of a new one
            for key, server in list(base._instances.items()):
                if server is self:
                    del base._instances[key]

        def start_server(self, log: IO[bytes] | None) -> subprocess.Popen[Any]:
            # Prefect's command (prefect 3.x), started with start_new_session=True and its output in `log`
            server_env = {"PREFECT_UI_ENABLED": "0", "PREFECT__SERVER_EPHEMERAL": "1", "PREFECT__SERVER_FINAL": "1"}
            return subprocess.Popen(
                args=[
                    sys.executable,
                    "-m",
                    "uvicorn",
                    "--app-dir",
                    str(prefect.__module_path__.parent),
                    "--factory",
                    "prefect.server.api.server:create_app",
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(self.port),
                    "--log-level",
                    "error",
                    "--lifespan",
                    "on",
                ],
                env={**os.environ, **server_env, **get_current_settings().to_environment_variables(exclude_unset=True)},
                start_new_session=True,
                stdout=log,
                stderr=subprocess.STDOUT if log is not None else None,
            )

    OwnSessionServer.__name__ = OWN_SESSION_SERVER
    return OwnSessionServer


def forget_server(port: int | None) -> None:
    """Drop Prefect's registered temporary server object for `port` (tests that made one by hand)."""
    from prefect.server.api.server import SubprocessASGIServer

    SubprocessASGIServer._instances.pop(port, None)


def start_server_command(server: Any) -> subprocess.Popen[Any]:
    """Start `server`'s uvicorn process as Prefect would (its private `_run_uvicorn_command`)."""
    return server._run_uvicorn_command()


def process_pool_runner(max_workers: int) -> Any:
    """Prefect's ProcessPoolTaskRunner: each task in a worker process of its own pool."""
    from prefect.task_runners import ProcessPoolTaskRunner

    return ProcessPoolTaskRunner(max_workers=max_workers)


def end_pool_processes(runner: Any) -> None:
    """End the worker processes of a ProcessPoolTaskRunner still running, so leaving the runner does not wait on
    them. The runner hands a submitted task to its pool from a resolver thread (where it has one), so a task can
    reach the pool after this is called: that thread is drained first, or the task would start in a fresh
    process once these were ended. Ending a process breaks the pool, which fails the tasks still queued in it."""
    resolver = getattr(runner, "_resolver_executor", None)
    if resolver is not None:
        resolver.shutdown(wait=True)  # quick when the tasks wait on no other futures: it only pickles and submits
    executor = getattr(runner, "_executor", None)
    for process in list((getattr(executor, "_processes", None) or {}).values()):
        if process.is_alive():
            process.terminate()
            process.join(30)
            if process.is_alive():
                process.kill()
