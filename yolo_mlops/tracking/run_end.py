"""How a run ends: FINISHED, or FAILED/KILLED with a one-line reason, and marked for `yolo-mlops upload` when
the tracking store could not take the end of it.

The `RunEnd` of a run that did not end cleanly FINISHED travels on the exception that ended it (`ended_by`
finds it), so the CLI words its one line from the exception it is handling. MLflow is imported only by the
functions that write: the CLI reads `ended_by` and `failure_line` from here without it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol
from urllib.parse import urlparse

from yolo_mlops import names
from yolo_mlops.tracking.connection import server_reachable, tracking_uri

if TYPE_CHECKING:
    from mlflow.tracking import MlflowClient


def end_run(mlflow: MlflowClient, run_id: str, status: str) -> None:
    """Set the run's terminal status (FINISHED, FAILED, KILLED)."""
    mlflow.set_terminated(run_id, status=status)


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
    if (
        ("Max retries exceeded" in text or "ConnectionError" in text or "Read timed out" in text)
        and urlparse(uri).scheme in ("http", "https")
        and not server_reachable(uri)
    ):
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


# The attribute that carries a RunEnd on the exception that ended the run. The exception holds the record,
# never the other way round: nothing keeps an exception's frames (and the training state in them) alive.
RUN_END_ATTRIBUTE = "yolo_mlops_run_end"


def _carry(exc: BaseException, end: RunEnd) -> None:
    """Attach `end` to `exc`; an outer run's guard that sees the same exception replaces an inner run's."""
    try:
        setattr(exc, RUN_END_ATTRIBUTE, end)
    except (AttributeError, TypeError):  # an exception type without instance attributes: no record travels
        pass


def ended_by(exc: BaseException) -> RunEnd | None:
    """The run that `exc`, or an exception it was raised from or while handling, ended (the latest raised first)."""
    seen: BaseException | None = exc
    for _ in range(20):
        if seen is None:
            return None
        end = getattr(seen, RUN_END_ATTRIBUTE, None)
        if isinstance(end, RunEnd):
            return end
        seen = seen.__cause__ or seen.__context__
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


def finish_failed_run(
    mlflow: MlflowClient, run_id: str, status: str, reason: str, salvage: Salvage | None = None
) -> RunEnd:
    """Salvage, error tag, terminal status: each step in its own try, so no failing call skips another;
    the terminal status is always attempted (unless the server is known to be gone)."""
    from yolo_mlops.tracking.writes import log_values  # imports MLflow: only a run being ended needs it

    end = RunEnd(run_id, status, reason)
    uri = mlflow.tracking_uri
    if salvage is not None:
        try:
            salvage.record(status, reason)
        except Exception as exc:
            end.failures.append(f"run folder: {exception_line(exc)}"[:500])
    if not server_reachable(uri):
        end.pending = True
    for what, call in salvage.steps(status, reason) if salvage is not None else []:
        _attempt(end, what, call, uri)
    _attempt(
        end, "error tag", lambda: log_values(mlflow, run_id, tags={names.ERROR: reason[: names.TAG_MAX_CHARS]}), uri
    )
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
    local run folder so `yolo-mlops upload` can finish it. The exception goes on carrying the run's RunEnd
    (`ended_by`).
    """
    try:
        yield
    except BaseException as exc:
        from mlflow.entities import RunStatus

        status = RunStatus.to_string(RunStatus.KILLED if interruption_signal(exc) else RunStatus.FAILED)
        reason = failure_line(exc, mlflow.tracking_uri)
        if salvage is not None:
            try:
                reason = salvage.reason(exc, status)
            except Exception:
                pass  # the plain exception line is still a reason
        end = finish_failed_run(mlflow, run_id, status, reason, salvage)
        end.folder = str(salvage.folder) if salvage is not None else ""
        _carry(exc, end)
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
        _carry(exc, end)
        if salvage is not None:
            salvage.ended(end, exc)
        raise
    if salvage is not None:
        try:
            salvage.ended(end, None)
        except Exception:
            pass  # the run is complete in the store; a missing local marker only makes `upload` re-check
