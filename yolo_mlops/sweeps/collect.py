"""Each child's outcome, read back from MLflow: its status, whether its variant took effect, its steady steps.

Children are found by their parent tag (`queries.child_runs`), so collection works for any store and any
process that ran them. A child counts only when it FINISHED, ran as its variant (ultralytics falls back
silently) and has steady steps: outside the profiler window and after the first `warmup_steps`. A data-parallel
child's steps are the job's pace (each step its slowest rank's: `analysis/step_times.csv`, or for a job logged
before that file, its ranks' `analysis/rank<r>/step_times.csv` combined alike). A FINISHED child whose step
times cannot be read, or hold no steady step, failed: it measured nothing, and is never counted as measured.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from yolo_mlops import names
from yolo_mlops.config import AppliedSettings
from yolo_mlops.profiling.job_pace import job_pace
from yolo_mlops.profiling.step_timer import StepTimes
from yolo_mlops.sweeps import stats, variants
from yolo_mlops.sweeps.plan import Child, SweepPlan
from yolo_mlops.tracking import queries

if TYPE_CHECKING:
    from yolo_mlops.tracking.connection import MlflowClient
    from yolo_mlops.tracking.queries import RunRecord

LOSS_TOTAL = "train/loss_total"  # sum of the final detection losses; a comparison input, not an MLflow name


ChildStatus = Literal["pending", "ok", "failed"]


@dataclass
class ChildOutcome:
    child: Child
    status: ChildStatus  # pending until the child has run
    run_id: str | None = None
    error: str | None = None
    flow_run_id: str | None = None
    wall_s: float = 0.0  # the subflow call, slot held (training + orchestration)
    acquire_s: float = 0.0  # waiting for / acquiring the concurrency slot
    started: float = 0.0
    ended: float = 0.0


@dataclass
class ChildRecord:
    """A child as MLflow holds it, with its steady steps (None when it failed or has none)."""

    outcome: ChildOutcome
    repeat: stats.Repeat | None
    problem: str | None  # why the child does not count (failed, no steady steps, variant not effective)


def collect(
    mlflow: MlflowClient, plan: SweepPlan, parent_run_id: str, outcomes: list[ChildOutcome]
) -> list[ChildRecord]:
    """Match each outcome with its MLflow child run (by variant and repeat) and read what it measured."""
    runs = {
        (r.tags.get(names.VARIANT), r.tags.get(names.SWEEP_REPEAT)): r
        for r in queries.child_runs(mlflow, parent_run_id)
    }
    records = []
    with tempfile.TemporaryDirectory(prefix="sweep-") as tmp:
        for outcome in outcomes:
            run = runs.get((outcome.child.variant, str(outcome.child.repeat)))
            if run is not None:
                outcome.run_id = run.run_id
                if run.status != "FINISHED":
                    outcome.status = "failed"
                    outcome.error = outcome.error or run.tags.get(names.ERROR, run.status)
            if outcome.status != "ok" or run is None:
                records.append(ChildRecord(outcome, None, f"failed: {outcome.error or 'no MLflow run'}"))
                continue
            try:
                problem = ineffective(outcome.child.variant, AppliedSettings.from_tags(run.tags), plan.custom_variants)
            except ValueError as exc:
                problem = f"unreadable applied settings: {exc}"
            repeat = None
            if problem is None:
                repeat, problem = _steady_steps(mlflow, run, plan.warmup_steps, Path(tmp))
                if repeat is None:  # nothing measured: a failed child, not one that ran and was compared
                    outcome.status = "failed"
                    outcome.error = problem
                    problem = f"failed: {problem}"
            records.append(ChildRecord(outcome, repeat, problem))
    return records


def ineffective(
    expr: str, applied: AppliedSettings | None, custom: dict[str, dict[str, Any]] | None = None
) -> str | None:
    """A child that ran as something other than its variant (ultralytics' silent fallbacks) does not count.
    `applied` None (the run recorded no settings) is taken as effective."""
    if applied is None:
        return None
    parts = {p.name for p in variants.parse(expr, custom)}
    if any(n == "compile" or n.startswith("compile_") for n in parts) and not applied.compiled:
        return "not effective: ultralytics fell back to eager (torch.compile unavailable or failed)"
    if "channels_last" in parts and not applied.channels_last_effective:
        return "not effective: the model was not in channels_last memory format"
    return None


def _steady_steps(
    mlflow: MlflowClient, run: RunRecord, warmup_steps: int, tmp: Path
) -> tuple[stats.Repeat | None, str | None]:
    try:
        steps = _step_times(mlflow, run, tmp / run.run_id)
    except Exception as exc:  # noqa: BLE001 - a child without step times cannot be compared, say why
        return None, f"no step times: {type(exc).__name__}: {exc}"
    mask = steps.steady(warmup_steps)
    if not mask.any():
        return None, (
            f"no steady steps: {len(steps)} steps, {warmup_steps} discarded as warm-up, "
            f"{int(steps.profiled.sum())} in the profiler window (raise max_steps)"
        )
    metrics = dict(run.metrics)
    parts = [metrics[k] for k in names.LOSS_PARTS if k in metrics]
    if len(parts) == len(names.LOSS_PARTS):
        metrics[LOSS_TOTAL] = float(sum(parts))
    return stats.Repeat(step_ms=steps.step_ms[mask], images=steps.images[mask], metrics=metrics), None


def _step_times(mlflow: MlflowClient, run: RunRecord, tmp: Path) -> StepTimes:
    """The child's step times: a data-parallel job's pace (its own file, else its ranks' combined)."""
    world_size = int(run.params.get(names.DDP_WORLD_SIZE, "1") or 1)
    try:
        return StepTimes.load_csv(queries.download_artifact(mlflow, run.run_id, names.STEP_TIMES_CSV, tmp))
    except Exception:
        if world_size < 2:
            raise
    ranks = [
        StepTimes.load_csv(queries.download_artifact(mlflow, run.run_id, names.rank_path(names.STEP_TIMES_CSV, r), tmp))
        for r in range(world_size)
    ]
    return job_pace(ranks)
