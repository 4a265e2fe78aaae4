"""The step runner of the GPU checks: each step a child process with its own time limit, judged from its exit
code and output; in a dry run, each later step's command checked without running it."""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .output import capped, clean_output, last_line, short, write_atomic
from .report import install_info, markdown

STEP_LOG_CAP = 2 * 2**20  # bytes of one step's output kept in checks.log (head and tail)
# A dry run's children (installs, imports, plans) take about 5-20 s each on an idle 2-core machine and were seen
# at 17x that on a loaded one: the limit only catches a child that hangs, never one that is slow.
DRY_RUN_HANG_S = 1800.0


@dataclass
class StepRun:
    name: str
    # passed | failed | goal-missed | timeout | skipped | error | validated (dry run) | ran (CPU rehearsal) | not-run
    status: str = "not-run"
    seconds: float | None = None
    timeout_s: float | None = None
    rc: int | None = None
    note: str = ""
    command: list[str] = field(default_factory=list)
    result: dict = field(default_factory=dict)


@dataclass
class Step:
    name: str
    cuda: bool  # needs the GPU: the dry run stops before the first such step
    max_s: float  # the step's own time cap on a GPU
    # what the step needs on the GPU machine (the H100 run's time, with a margin): it starts only with this much
    # of the budget left, and later steps' reserves never cut its limit below it
    need_s: float
    reserve_s: float  # kept free for this step while earlier steps run; 0: it runs only as time allows
    command: Callable[[Checks], list[str] | str]  # a str is a reason to skip the step
    judge: Callable[[Checks, StepRun, str], None]  # fills status/result from the exit code and output
    dry: Callable[[Checks], list[str] | None] | None = None  # command that validates the step without CUDA


class Checks:
    def __init__(self, args: argparse.Namespace, steps: Sequence[Step] = ()) -> None:
        self.args = args
        self.steps = steps  # the plan: a dry run's summary names the first CUDA step of it
        self.out: Path = args.out.resolve()  # the children run elsewhere (self.cwd): they get absolute paths
        self.out.mkdir(parents=True, exist_ok=True)
        self.work = Path(tempfile.mkdtemp(prefix="gpu-checks-")).resolve()  # MLflow store, data, results: not in OUT
        self.cwd = self.work / "cwd"  # every child's working directory: outside the repository (module docstring)
        self.cwd.mkdir()
        self.py = sys.executable
        self.mode = "dry-run" if args.dry_run else "cpu-rehearsal" if args.rehearse_on_cpu else "gpu"
        self.device = "cpu" if args.rehearse_on_cpu else args.device
        self.t0 = time.monotonic()
        self.started = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
        self.runs: list[StepRun] = []
        self.host: dict = {}
        self.log = self.out / "checks.log"
        self.log.write_text("")
        self.env = {
            **os.environ,
            "YOLO_MLOPS_HOME": str(self.work / "home"),
            "MLFLOW_TRACKING_URI": f"sqlite:///{self.work / 'home' / 'mlflow.db'}",
            "YOLO_OFFLINE": "1",
            "PREFECT_HOME": str(self.work / "prefect"),
            "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
            "PYTHONUNBUFFERED": "1",
            "MPLBACKEND": "Agg",
        }
        self.env.pop("PREFECT_API_URL", None)  # a throwaway Prefect server, never someone's real one

    @property
    def tiny(self) -> bool:
        """A CPU rehearsal: every step at tiny sizes."""
        return self.mode == "cpu-rehearsal"

    def left(self) -> float:
        return self.args.budget_s - (time.monotonic() - self.t0)

    def result_of(self, name: str) -> dict:
        return next((r.result for r in self.runs if r.name == name), {})

    # -- one step -------------------------------------------------------------------------------------------
    def run_step(self, step: Step, reserve_after: float) -> StepRun:
        run = StepRun(step.name)
        self.runs.append(run)
        command = step.command(self)
        if isinstance(command, str):
            run.status, run.note = "skipped", command
            return run
        run.command = [short(c) for c in command]
        # a step's maximum sizes it for the GPU machine's time budget; a CPU rehearsal runs on whatever machine it
        # is given, so there only the whole budget bounds it, and a dry run measures nothing, so there only the
        # hang guard does (a busy machine is slower, not broken)
        if self.mode == "dry-run":
            run.timeout_s = round(DRY_RUN_HANG_S)
            rc, seconds, output = self._spawn(step.name, command, DRY_RUN_HANG_S)
            return self._judged(step, run, rc, seconds, output, DRY_RUN_HANG_S)
        cap = step.max_s if self.mode == "gpu" else self.left()
        # the later steps' reserves shorten a step's limit down to its own need, never below: an earlier step
        # matters more (run2 of the first H100 run: an environment step cut to 19 s by reserves, killed at 19.1 s)
        limit = min(cap, self.left(), max(self.left() - reserve_after, min(step.need_s, cap)))
        if self.left() < step.need_s or limit < 5:
            run.status = "skipped"
            run.note = f"no time left ({self.left():.0f} s of the budget; it needs {step.need_s:.0f} s)"
            return run
        run.timeout_s = round(limit)
        rc, seconds, output = self._spawn(step.name, command, limit)
        return self._judged(step, run, rc, seconds, output, limit)

    def _judged(self, step: Step, run: StepRun, rc: int | None, seconds: float, output: str, limit: float) -> StepRun:
        run.rc, run.seconds = rc, round(seconds, 1)
        if rc is None:
            run.status, run.note = "timeout", f"stopped after {limit:.0f} s"
        try:
            step.judge(self, run, output)
        except Exception as exc:  # noqa: BLE001 - a judge bug must not lose the other steps
            run.status, run.note = "error", f"judging the output failed: {type(exc).__name__}: {exc}"
        if rc is None:
            run.status = "timeout"
        return run

    def validate_step(self, step: Step) -> StepRun:
        """Dry run: the step's command is built and checked (argument parsing, imports), not run."""
        run = StepRun(step.name)
        self.runs.append(run)
        command = step.command(self)
        notes = []
        if isinstance(command, str):
            notes.append(f"would be skipped here: {command}")
        else:
            run.command = [short(c) for c in command]
            parsed = parse_with_script_parser(command)
            if parsed is not None:
                if parsed:
                    run.status, run.note = "failed", f"the script refuses the step's arguments: {parsed}"
                    return run
                notes.append("arguments parse")
        check = step.dry(self) if step.dry else None
        if check is None:
            run.status = "validated" if notes else "not-run"
            run.note = "; ".join(notes) or "nothing to check without running it"
            return run
        rc, seconds, output = self._spawn(f"{step.name} (dry run)", check, DRY_RUN_HANG_S)
        run.rc, run.seconds = rc, round(seconds, 1)
        passed = command if isinstance(command, list) and "--help" in check else []
        missing = [a for a in passed if a.startswith("--") and a not in output]
        if rc == 0 and not missing:
            run.status = "validated"
            notes.append("--help offers every option passed" if "--help" in check else last_line(output))
            run.note = "; ".join(notes)
        else:
            run.status = "failed"
            run.note = (
                f"options not offered by the script: {missing}"
                if missing
                else f"dry-run check exited {rc}: {last_line(output)}"
            )
        return run

    def _spawn(self, label: str, command: list[str], limit: float) -> tuple[int | None, float, str]:
        t = time.monotonic()
        with tempfile.TemporaryFile("w+b") as buf:
            proc = subprocess.Popen(
                command,
                cwd=self.cwd,
                env=self.env,
                stdout=buf,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
            try:
                rc: int | None = proc.wait(timeout=limit)
            except subprocess.TimeoutExpired:
                kill_group(proc)
                rc = None
            seconds = time.monotonic() - t
            buf.seek(0)
            output = clean_output(buf.read().decode("utf-8", "replace"))
        with self.log.open("a") as log:
            log.write(f"\n===== {label}: {' '.join(short(c) for c in command)}\n")
            log.write(capped(output, STEP_LOG_CAP))
            log.write(f"\n===== {label}: exit {rc if rc is not None else 'timeout'} after {seconds:.1f} s\n")
        return rc, seconds, output

    # -- reporting ------------------------------------------------------------------------------------------
    def summary(self) -> dict:
        smoke = self.result_of("gpu_smoke")
        return {
            "mode": self.mode,
            "verified_on_gpu": self.mode == "gpu" and smoke.get("status") == "passed",
            "device_arg": self.device,
            "started_utc": self.started,
            "elapsed_s": round(time.monotonic() - self.t0, 1),
            "budget_s": self.args.budget_s,
            "stopped_before": next((s.name for s in self.steps if s.cuda), None) if self.mode == "dry-run" else None,
            "install": install_info(),
            "host": self.host,
            "steps": [asdict(r) for r in self.runs],
        }

    def write(self) -> None:
        data = self.summary()
        write_atomic(self.out / "summary.json", json.dumps(data, indent=2, default=str))
        write_atomic(self.out / "summary.md", markdown(data))


def kill_group(proc: subprocess.Popen) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=15)
            return
        except subprocess.TimeoutExpired:
            continue


def parse_with_script_parser(command: list[str]) -> str | None:
    """For a step script with a build_parser() (ours), parse the step's arguments in this process:
    None when the script has no such parser, "" when they parse, else argparse's complaint."""
    script = Path(command[1]) if len(command) > 1 else None
    if script is None or script.suffix != ".py" or not script.exists() or "def build_parser(" not in script.read_text():
        return None
    import contextlib
    import importlib.util
    import io

    spec = importlib.util.spec_from_file_location(f"_step_{script.stem}", script)
    assert spec is not None and spec.loader is not None  # a .py file that exists (checked above)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # the step scripts import only the standard library at module level
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            module.build_parser().parse_args(command[2:])
    except SystemExit:
        return last_line(err.getvalue()) or "argument error"
    return ""
