"""`yolo-mlops` command line. Every run command builds one RunSpec and hands it to a Prefect flow.

Each command lives in its own module and imports what it needs when it runs. A command line that names a
command builds only that command's parser (`COMMANDS` maps each command to its module), so `analyze`
imports nothing of the run, sweep or trends commands; `--help` and unknown commands build them all.

SIGTERM (docker stop, Kubernetes, a Prefect cancellation), SIGINT (Ctrl-C) and SIGHUP (terminal closed)
become `Interrupted`, a KeyboardInterrupt: the stack unwinds through every `finally` (the MLflow run ends
KILLED with what it captured, the GPU concurrency slot is released) and atexit runs (it stops the temporary
Prefect server, which the default SIGTERM action would leave running; the server runs in a session of its
own, so a terminal's Ctrl-C reaches only the command: yolo_mlops/compat/prefect.py). The user gets one
line; the exit code is 128 + the signal number (130 for SIGINT, 143 for SIGTERM). Any other failure is one
line too, exit code 1; its traceback stays in the run folder (`error.log`).
"""

from __future__ import annotations

import argparse
import importlib
import signal
import sys
import threading

from yolo_mlops.errors import ConfigError

# yolo_mlops.cli.<name>, help order
COMMAND_MODULES = ("run", "analyze", "sweeps", "trends", "compare", "upload", "fleet", "bisect")
# command -> its module (a test checks this against what each module registers)
COMMANDS = {
    "demo": "run",
    "profile": "run",
    "analyze": "analyze",
    "variants": "sweeps",
    "sweep": "sweeps",
    "optimize": "sweeps",
    "trends": "trends",
    "compare": "compare",
    "upload": "upload",
    "fleet": "fleet",
    "bisect": "bisect",
}
HANDLED_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
FLOW_COMMANDS = ("demo", "profile", "sweep", "optimize")  # commands that run a Prefect flow
LIBRARY_FREE_COMMANDS = ("analyze",)  # reads a trace file: no torch, ultralytics, MLflow or Prefect

__all__ = ["Interrupted", "build_parser", "main", "spec_from_args"]


class Interrupted(KeyboardInterrupt):
    """A termination signal raised as an exception; `signal` is its number (as in Prefect's TerminationSignal)."""

    def __init__(self, signal_number: int) -> None:
        super().__init__(signal.Signals(signal_number).name)
        self.signal = signal_number


def _raise_interrupted(signal_number: int, frame) -> None:
    # Later signals are ignored while the run is wound down (its waits are bounded): a second Ctrl-C or a
    # repeated SIGTERM must not cut the upload of what was captured short.
    for handled in HANDLED_SIGNALS:
        signal.signal(handled, signal.SIG_IGN)
    raise Interrupted(signal_number)


def __getattr__(name: str):
    if name == "spec_from_args":  # re-exported without importing the run command for every command line
        from yolo_mlops.cli.run import spec_from_args

        return spec_from_args
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser for `command` alone when it is one of COMMANDS; otherwise for every command."""
    parser = argparse.ArgumentParser(prog="yolo-mlops", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name in [COMMANDS[command]] if command in COMMANDS else COMMAND_MODULES:
        importlib.import_module(f"yolo_mlops.cli.{name}").register(sub)
    return parser


def _command_word(argv: list[str]) -> str | None:
    """The command a command line names: its first word, when it is not an option (`-h`)."""
    return argv[0] if argv and not argv[0].startswith("-") else None


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = build_parser(_command_word(argv)).parse_args(argv)
    if args.command in FLOW_COMMANDS:  # the commands that import prefect; the others stay light (analyze)
        from yolo_mlops.config import data_home
        from yolo_mlops.run import prefect_server

        prefect_server.configure(data_home())  # before prefect is imported
    previous = {}
    if threading.current_thread() is threading.main_thread():
        previous = {s: signal.signal(s, _raise_interrupted) for s in HANDLED_SIGNALS}
    try:
        if args.command not in LIBRARY_FREE_COMMANDS:
            from yolo_mlops.compat.versions import check_installed

            check_installed()  # a library outside its tested range: one line, before anything runs
        if args.command in FLOW_COMMANDS:
            from yolo_mlops.run.prefect_server import detach_temporary_server

            detach_temporary_server()  # Ctrl-C reaches the command, not its temporary Prefect server
        return args.handler(args)
    except ConfigError as exc:
        print(f"yolo-mlops: error: {exc}", file=sys.stderr)
        return 2
    except BaseException as exc:
        started = sys.modules.get("yolo_mlops.run.prefect_server")  # imported by the flow commands
        line = started.startup_failure(exc) if started is not None else None
        if line is not None:
            print(f"yolo-mlops: error: {line}", file=sys.stderr)
            return 2
        number = _signal_number(exc)
        if number is None and not isinstance(exc, Exception):
            raise  # SystemExit, GeneratorExit: not ours to report
        print(f"yolo-mlops: {_failure_line(exc, number)}", file=sys.stderr)
        return 128 + number if number is not None else 1
    finally:
        for handled, handler in previous.items():
            signal.signal(handled, handler)


def _signal_number(exc: BaseException) -> int | None:
    number = getattr(exc, "signal", None)
    if isinstance(number, int):
        return number
    return int(signal.SIGINT) if isinstance(exc, KeyboardInterrupt) else None


def _failure_line(exc: BaseException, number: int | None) -> str:
    """The reason, what happened to the MLflow run, and where the rest is: one line. A run that the exception
    ended travels with it (`run_end.ended_by`); run_end imports no MLflow, so a light command stays light."""
    from yolo_mlops.tracking import run_end

    end = run_end.ended_by(exc)
    if end is None:
        if number is not None:
            return f"interrupted by {signal.Signals(number).name}"
        return "error: " + run_end.failure_line(exc)
    line = (end.reason or str(exc)) if number is not None else f"error: {end.reason or exc}"
    line += f"; {end.summary()}"
    if (end.pending or end.failures) and end.folder:
        line += f"; the run folder is kept: send it later with `yolo-mlops upload {end.folder}`"
    elif end.folder and number is None:
        line += f" (traceback: {end.folder}/error.log)"
    return line


if __name__ == "__main__":
    sys.exit(main())
