"""The profiled runs of a bisection: one process per run, in the code of one commit, bounded by a timeout.

Each run is the workload's RunSpec run by `commit_process.py` (this installation's file, `python -P`) with
`PYTHONPATH=<that commit's installed copy>` (`git.Installs`), its working folder outside the repository and
`YOLO_MLOPS_GIT_COMMIT=<commit>` so the run records which code ran; a commit whose code lacks the pipeline's
steps falls back to `python -m yolo_mlops.cli profile --config spec.yaml`. Every run is a child of the
bisection's parent MLflow run (`yolo_mlops.bisect.commit`, `.step`, `.role`); a child its process left
RUNNING (killed hard, or past `run_timeout_s`) is ended FAILED.
"""

from __future__ import annotations

import contextlib
import math
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import yaml

from yolo_mlops import names
from yolo_mlops.bisect import commit_process, git
from yolo_mlops.bisect.decide import Key
from yolo_mlops.bisect.git import Commit
from yolo_mlops.bisect.models import RUN_TIMEOUT_S, BisectPlan, ProfiledRun, Role
from yolo_mlops.tracking import queries, run_end
from yolo_mlops.trends.operators import LOG_FLOOR_MS as OP_LOG_FLOOR_MS
from yolo_mlops.trends.trend import is_operator

if TYPE_CHECKING:
    from yolo_mlops.tracking.connection import MlflowClient

TIMED_OUT = -9  # run_commit_process's exit code for a process killed past its timeout
COMMIT_PROCESS_FILE = Path(commit_process.__file__).resolve()

T = TypeVar("T")
Hold = Callable[[str], contextlib.AbstractContextManager]  # device -> held around each run (the GPU limit)


def no_hold(_device: str) -> contextlib.AbstractContextManager:
    return contextlib.nullcontext()


class RunFailed(RuntimeError):
    pass


class CommitRunner:
    """Profiled runs of one bisection: one process per run, the code of the commit, children of the parent."""

    def __init__(
        self,
        plan: BisectPlan,
        mlflow: MlflowClient,
        parent_id: str,
        installs: git.Installs,
        hold: Hold,
        log: Callable[[str], None],
    ) -> None:
        self.plan, self.mlflow, self.parent_id, self.installs, self.hold, self.log = (
            plan,
            mlflow,
            parent_id,
            installs,
            hold,
            log,
        )
        self.count = 0
        self.device = plan.spec.device or "0"

    def spec_file(self, commit: Commit, step: int, role: Role) -> Path:
        spec = self.plan.spec
        # only what differs from the defaults: older commits' RunSpecs refuse fields they do not know
        fields = spec.model_dump(mode="json", exclude_defaults=True)
        fields.update(
            experiment=self.plan.request.bisect_experiment,
            parent_run_id=self.parent_id,
            run_kind=names.RUN_KIND_BISECT_RUN,
            run_name=f"bisect s{step} {role} {commit.short}",
            tags={names.BISECT_COMMIT: commit.hash, names.BISECT_STEP: str(step), names.BISECT_ROLE: role},
        )
        path = self.installs.root / f"spec-{self.count:03d}.yaml"
        path.write_text(yaml.safe_dump(fields, sort_keys=False))
        return path

    def run(self, commit: Commit, step: int, role: Role) -> ProfiledRun:
        site = self.installs.site(commit)
        spec_path = self.spec_file(commit, step, role)
        self.count += 1
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([str(site), *filter(None, [os.environ.get("PYTHONPATH")])])
        env["YOLO_MLOPS_GIT_COMMIT"] = commit.hash
        log_path = self.installs.root / f"run-{self.count:03d}.log"
        t0 = time.perf_counter()
        with self.hold(self.device):
            timeout = self.plan.request.run_timeout_s
            code, output = run_commit_process(
                ["-P", str(COMMIT_PROCESS_FILE), str(spec_path)], env, self.installs.root, log_path, timeout
            )
            if code == commit_process.UNSUPPORTED_EXIT and commit_process.UNSUPPORTED_MARK in output:
                # older code: its own command line, with its own Prefect and no GPU limit
                cli_env = {k: v for k, v in env.items() if k != "PREFECT_API_URL"}
                code, output = run_commit_process(
                    ["-m", "yolo_mlops.cli", "profile", "--config", str(spec_path)],
                    cli_env,
                    self.installs.root,
                    log_path,
                    timeout,
                )
        run_id = run_id_in(output)
        killed = f"killed after {self.plan.request.run_timeout_s:g} s (--run-timeout)"
        if run_id is not None:
            self._end_if_running(run_id, killed if code == TIMED_OUT else f"run process exited with code {code}")
        if code == TIMED_OUT:
            raise RunFailed(f"the {role} run of commit {commit.short} (step {step}) was {killed}: {_tail(output)}")
        if code != 0 or run_id is None:
            raise RunFailed(
                f"the {role} run of commit {commit.short} (step {step}) failed (exit code {code}): {_tail(output)}"
            )
        stored = queries.find_run(self.mlflow, run_id)
        metric = self.plan.request.metric
        value = stored.metrics.get(metric) if stored is not None else None
        if stored is not None and value is None and is_operator(metric) and names.OP_FLOOR_MS in stored.metrics:
            value = 0.0  # the run logged its operators and this one took less than its floor (or did not run)
        if stored is None or value is None or not (value > 0 or is_operator(metric)):
            raise RunFailed(f"run {run_id} of commit {commit.short} logged no positive {metric}")
        if is_operator(metric):  # an operator series: its log time, an operator absent at OP_LOG_FLOOR_MS
            slowness = math.log(max(value, OP_LOG_FLOOR_MS))
        else:
            slowness = -math.log(value) if self.plan.higher_is_better else math.log(value)
        self.log(
            f"  step {step} {role:<9} {commit.short}  {self.plan.request.metric} {value:.4g}  "
            f"({time.perf_counter() - t0:.0f} s, run {run_id})"
        )
        step_ms, entries = self._profile(stored)
        return ProfiledRun(commit, step, role, run_id, value, slowness, step_ms, entries)

    def _profile(self, stored: queries.RunRecord) -> tuple[float | None, dict[Key, float] | None]:
        """The run's step time and entries per profiled step (trends' attribution reads them alike); no
        entries when the run logged no profiler tables."""
        from yolo_mlops.trends.attribution import profile_from_run
        from yolo_mlops.trends.history import record_from_stored

        record = record_from_stored(stored)
        profiled = record.profiled_steps if record is not None else None
        step = record.step_time_ms if record is not None else stored.metrics.get(names.STEP_TIME_P50)
        profile = profile_from_run(self.mlflow, stored.run_id, profiled, step)
        if profile is None or not profile.step_ms:
            return step, None
        return profile.step_ms, dict(profile.entries)

    def _end_if_running(self, run_id: str, reason: str) -> None:
        stored = queries.find_run(self.mlflow, run_id)
        if stored is not None and stored.status == "RUNNING":
            run_end.finish_failed_run(self.mlflow, run_id, "FAILED", reason)

    def end_children(self) -> None:
        for child in queries.child_runs(self.mlflow, self.parent_id):
            if child.status == "RUNNING":
                run_end.finish_failed_run(self.mlflow, child.run_id, "FAILED", "the bisection ended before this run")

    def pairs(
        self,
        step: int,
        candidate: Commit,
        runs: dict[int, tuple[ProfiledRun, ProfiledRun]],
        value: Callable[[ProfiledRun], T],
        role: Role = "candidate",
    ) -> Callable[[int], tuple[T, T]]:
        """Interleaved pairs: good then candidate, candidate then good, ... (a linear drift cancels); each
        pair's (good, candidate) as `value` reads a run."""
        good = self.plan.good

        def measure(i: int) -> tuple[T, T]:
            order = [("good", good), (role, candidate)] if i % 2 == 0 else [(role, candidate), ("good", good)]
            done = {r: self.run(commit, step, r) for r, commit in order}
            runs[i] = (done["good"], done[role])
            return value(done["good"]), value(done[role])

        return measure


def run_commit_process(
    args: list[str], env: dict[str, str], cwd: Path, log_path: Path, timeout_s: float = RUN_TIMEOUT_S
) -> tuple[int, str]:
    """A Python process; its output to `log_path`; ended (TERM, then KILL) if this process is interrupted, or
    when it runs past `timeout_s` (then the exit code is TIMED_OUT)."""
    with log_path.open("w") as log:
        proc = subprocess.Popen(
            [sys.executable, *args], env=env, cwd=cwd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
        )
        try:
            code = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            _stop(proc)
            code = TIMED_OUT
        except BaseException:
            _stop(proc)
            raise
    return code, log_path.read_text(errors="replace")


def _stop(proc: subprocess.Popen) -> None:
    """TERM, 60 s for the run to end its MLflow run, then KILL."""
    proc.terminate()
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def run_id_in(output: str) -> str | None:
    """The MLflow run id a run process printed (commit_process's mark, or the command line's summary)."""
    for line in output.splitlines():
        if line.startswith(commit_process.RUN_ID_MARK):
            return line[len(commit_process.RUN_ID_MARK) :].strip()
        if line.startswith("MLflow run "):  # the command line's summary
            return line.split()[2]
    return None


def _tail(output: str) -> str:
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    errors = [line for line in lines if "Error" in line or "error" in line]
    return (errors[-1] if errors else lines[-1] if lines else "no output")[:500]
