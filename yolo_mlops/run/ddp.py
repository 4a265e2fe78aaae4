"""Data-parallel training: one process per rank through torchrun, every rank's measurements brought back.

`train_job(plan)` writes the plan into the run folder, starts `torch.distributed.run --standalone` (torch's own
launcher, the one ultralytics' multi-GPU path uses; it picks a free port itself) with one `run.ddp_rank` process
per rank, and waits. torchrun stops every rank when one fails; this process stops torchrun's whole process group
when it is itself stopped (a signal, a cancelled flow run), so no rank outlives its job. The ranks' outcomes are
returned in rank order; a failure raises DdpJobFailed naming the rank and its one-line reason.
"""

from __future__ import annotations

import os
import pickle
import signal
import subprocess
import sys
from pathlib import Path

from yolo_mlops.run.training import TrainingOutcome, TrainingPlan

JOB_FOLDER = "ddp"  # in the run folder: the plan, each rank's outcome or failure, the launcher's log
STOP_GRACE_S = 20.0  # after SIGTERM to torchrun's group, the ranks' time to flush their traces before SIGKILL


class DdpJobFailed(RuntimeError):
    """A rank failed or was killed; the message names it and says why in one line."""


def job_dir(plan: TrainingPlan) -> Path:
    return plan.output_dir / JOB_FOLDER


def read_plan(folder: Path) -> TrainingPlan:
    with open(folder / "plan.pkl", "rb") as fh:  # written by train_job in this run's own folder
        return pickle.load(fh)


def write_outcome(folder: Path, rank: int, outcome: TrainingOutcome) -> None:
    path = folder / f"outcome-rank{rank}.pkl"
    tmp = path.with_suffix(".tmp")
    with open(tmp, "wb") as fh:
        pickle.dump(outcome, fh)
    tmp.replace(path)


def write_failure(folder: Path, rank: int, exc: BaseException, text: str) -> None:
    line = f"{type(exc).__name__}: {exc}".splitlines()[0] if str(exc) else type(exc).__name__
    (folder / f"failure-rank{rank}.txt").write_text(line + "\n\n" + text)


def launcher_command(plan: TrainingPlan, folder: Path) -> list[str]:
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nnodes",
        "1",
        "--nproc-per-node",
        str(plan.world_size),
        "--max-restarts",
        "0",
        "-m",
        "yolo_mlops.run.ddp_rank",
        str(folder),
    ]


def train_job(plan: TrainingPlan) -> list[TrainingOutcome]:
    """Every rank's outcome, in rank order; raises DdpJobFailed naming the rank that failed."""
    folder = job_dir(plan)
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "plan.pkl", "wb") as fh:
        pickle.dump(plan, fh)
    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // plan.world_size)))
    # the ranks import this project as the launching process does (an uninstalled checkout, a test's sys.path)
    env["PYTHONPATH"] = os.pathsep.join(p for p in [*sys.path, env.get("PYTHONPATH", "")] if p)
    proc = subprocess.Popen(launcher_command(plan, folder), env=env, start_new_session=True, stderr=subprocess.PIPE)
    tail = _StderrTail(proc.stderr)
    try:
        code = proc.wait()
    except BaseException:
        _stop_group(proc)
        raise
    finally:
        lines = tail.join()
    (folder / "launcher.log").write_text("\n".join(lines) + "\n")
    if code != 0:
        raise DdpJobFailed(_failure_line(folder, plan.world_size, code, root_cause(lines)))
    missing = [r for r in range(plan.world_size) if not (folder / f"outcome-rank{r}.pkl").is_file()]
    if missing:
        raise DdpJobFailed(f"data-parallel job ended without the outcome of rank(s) {missing}")
    outcomes = []
    for rank in range(plan.world_size):
        with open(folder / f"outcome-rank{rank}.pkl", "rb") as fh:
            outcomes.append(pickle.load(fh))
    return outcomes


def _stop_group(proc: subprocess.Popen) -> None:
    """SIGTERM torchrun and its ranks, SIGKILL whatever is left after the grace period."""
    _signal_group(proc, signal.SIGTERM)
    try:
        proc.wait(timeout=STOP_GRACE_S)
    except subprocess.TimeoutExpired:
        pass
    _signal_group(proc, signal.SIGKILL)  # also a rank that torchrun, itself gone, left behind
    proc.wait()


def _signal_group(proc: subprocess.Popen, sig: signal.Signals) -> None:
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


class _StderrTail:
    """Passes torchrun's stderr through and keeps its last lines: its failure summary names the rank that
    failed first and its exit code or signal."""

    def __init__(self, stream, keep: int = 200) -> None:
        import collections
        import threading

        self.lines: collections.deque[str] = collections.deque(maxlen=keep)
        self.stream = stream
        self.thread = threading.Thread(target=self._pump, daemon=True)
        self.thread.start()

    def _pump(self) -> None:
        for raw in iter(self.stream.readline, b""):
            text = raw.decode(errors="replace")
            self.lines.append(text.rstrip("\n"))
            try:
                sys.stderr.write(text)
            except (OSError, ValueError):
                pass

    def join(self) -> list[str]:
        self.thread.join(timeout=5)
        return list(self.lines)


def root_cause(lines: list[str]) -> tuple[str, str] | None:
    """(rank, exit) from torchrun's "Root Cause (first observed failure)" block, e.g. ("1", "signal 9
    (SIGKILL)") or ("0", "exit code 1")."""
    try:
        start = max(i for i, line in enumerate(lines) if "Root Cause" in line)
    except ValueError:
        return None
    rank = exitcode = None
    for line in lines[start : start + 12]:
        key, _, value = line.strip().partition(":")
        key, value = key.strip(), value.strip()
        if key == "rank" and rank is None:
            rank = value.split()[0]
        elif key == "exitcode" and exitcode is None:
            exitcode = value.split()[0]
    if rank is None or exitcode is None:
        return None
    code = int(exitcode) if exitcode.lstrip("-").isdigit() else None
    if code is not None and code < 0:
        try:
            return rank, f"signal {-code} ({signal.Signals(-code).name})"
        except ValueError:
            return rank, f"signal {-code}"
    return rank, f"exit code {exitcode}"


def _failure_line(folder: Path, world_size: int, code: int, cause: tuple[str, str] | None) -> str:
    failures = sorted(folder.glob("failure-rank*.txt"))
    if cause is not None and not (folder / f"failure-rank{cause[0]}.txt").is_file():
        return (
            f"rank {cause[0]} of {world_size} ended by {cause[1]} without a result (killed, or out of "
            "memory?); torchrun stopped every rank"
        )
    if cause is not None:
        failures = [folder / f"failure-rank{cause[0]}.txt"]
    if failures:
        first = failures[0]
        rank = first.stem.removeprefix("failure-rank")
        return f"rank {rank} of {world_size} failed: {first.read_text().splitlines()[0]}"
    finished = {p.stem.removeprefix("outcome-rank") for p in folder.glob("outcome-rank*.pkl")}
    lost = [str(r) for r in range(world_size) if str(r) not in finished]
    return (
        f"data-parallel job failed (torchrun exit {code}): rank(s) {', '.join(lost)} ended without a result "
        "(killed by a signal or out of memory?); every rank was stopped"
    )
