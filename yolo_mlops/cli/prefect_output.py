"""Prefect's console output under the CLI: failures are reported in one line, not as Prefect's tracebacks."""

from __future__ import annotations

import logging


def _drop_prefect_traceback(record: logging.LogRecord) -> bool:
    """Prefect's engine logs a failing flow's whole traceback to the console; the CLI reports the failure
    in one line and keeps the traceback in the run folder, and Prefect's API log handler (which runs
    before the console one) still sends it to the Prefect UI."""
    if record.exc_info and record.name.startswith("prefect"):
        record.exc_info, record.exc_text = None, None
    return True


def quiet_prefect_tracebacks() -> None:
    """Drop tracebacks from Prefect's console output (call after importing prefect, which sets up logging)."""
    for handler in logging.getLogger().handlers:
        if type(handler).__name__ == "PrefectConsoleHandler" and _drop_prefect_traceback not in handler.filters:
            handler.addFilter(_drop_prefect_traceback)
