"""The temporary Prefect server in a session of its own, so that Ctrl-C in a terminal does not stop it first.

Ctrl-C sends SIGINT to the terminal's whole foreground process group. Prefect starts its temporary server
(`SubprocessASGIServer` in `prefect.server.api.server`, a uvicorn subprocess) in the command's group, so the
server received the SIGINT too and shut down while the command was still ending its run: every Prefect call
after that waited out the client's retries (142 s measured) and the command exited 1 instead of 130. In a
session of its own the server lives until the command stops it: Prefect registers its `stop()` with atexit,
which runs because the CLI turns SIGINT, SIGTERM and SIGHUP into an exception (yolo_mlops/cli/__init__.py).

Prefect keeps one server object per port in `SubprocessASGIServer._instances` and every client asks for
`SubprocessASGIServer()` (port None), starting it on first use; registering our subclass under None before
that changes nothing else: the server still starts lazily, with Prefect's own settings and timeout.

The subclass also sends the server's output to a log file beside its database
(`prefect_server.server_log()`): under load the server's shutdown can print a SQLAlchemy pool traceback
(`_finalize_fairy ... CancelledError`) after the command's work is done, which is not the user's to read.
"""

from __future__ import annotations

import os
import subprocess
import sys
from typing import IO, Any


def detach_temporary_server() -> bool:
    """Make the temporary Prefect server of this process start in its own session; False when there is no
    temporary server to manage (PREFECT_API_URL set) or Prefect's already started without it."""
    from prefect.settings import PREFECT_API_URL

    if os.environ.get("PREFECT_API_URL") or PREFECT_API_URL.value():
        return False
    from prefect.server.api import server as prefect_server

    base = prefect_server.SubprocessASGIServer
    if None in base._instances:
        return type(base._instances[None]).__name__ == "OwnSessionServer"
    _own_session_class(base)()  # registers itself as the instance Prefect's clients get
    return True


def _own_session_class(base: type) -> type:
    import prefect
    from prefect.settings import get_current_settings

    from yolo_mlops.run.prefect_server import server_log

    class OwnSessionServer(base):
        def _run_uvicorn_command(self) -> subprocess.Popen[Any]:
            log_path = server_log()
            if log_path is None:
                return self._popen(None)
            with open(log_path, "wb") as log:  # the server process keeps a descriptor of its own
                return self._popen(log)

        def _popen(self, log: IO[bytes] | None) -> subprocess.Popen[Any]:
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

    return OwnSessionServer
