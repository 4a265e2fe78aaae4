"""Prefect flow `sweep`: baseline + variants x repeats as `profile-training` subflows under one MLflow parent run.

Thin: planning, collection, statistics and reports live in `yolo_mlops.sweeps`. This flow only
- validates the plan (variants, skip reasons, concurrency limit) before anything is created,
- creates the parent MLflow run (`yolo_mlops.run_kind=sweep`) and ends it FINISHED unless the sweep itself breaks,
- runs each child as the `profile-training` subflow inside the concurrency limit (one GPU = one slot),
  isolating failures: a failed child is recorded, the sweep goes on,
- logs the comparison to the parent run and as Prefect artifacts.

Deployment entrypoint: `flows/sweep.py:sweep`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from prefect import flow
from prefect.artifacts import create_markdown_artifact, create_table_artifact
from pydantic import Field

from yolo_mlops import sweeps, tracking
from yolo_mlops.flows.profile_training import profile_training
from yolo_mlops.run import gpu_lock, pipeline, preflight
from yolo_mlops.run.config import RunSpec
from yolo_mlops.sweeps import ChildOutcome, SweepPlan, VariantRow
from yolo_mlops.tracking import names


@dataclass
class SweepResult:
    parent_run_id: str
    run_url: str
    best_variant: str
    best_evidence: str
    failed_children: int
    total_children: int
    skipped: dict[str, str]
    rows: list[VariantRow]  # the comparison, full precision
    table: list[dict[str, Any]]  # the same rows as the Prefect table artifact shows them (rounded, NaN -> None)
    markdown: str
    children: list[dict[str, Any]] = field(default_factory=list)


def run_child(plan: SweepPlan, outcome: ChildOutcome, parent_run_id: str, dataset_yaml) -> ChildOutcome:
    """One variant x repeat as the profile-training subflow, holding the device's concurrency slot."""
    spec = plan.child_spec(outcome.child, parent_run_id)
    t_wait = time.perf_counter()
    with gpu_lock.hold(plan.concurrency_limit):  # a missing limit raises here (strict): breaks the sweep, by design
        outcome.started = time.time()
        t0 = time.perf_counter()
        outcome.acquire_s = t0 - t_wait
        sweeps.release_device_memory(plan.device)
        with sweeps.disk_cache_guard(spec, dataset_yaml):
            state = profile_training(spec, gpu_limit=None, return_state=True)  # the lock is held here
        outcome.wall_s = time.perf_counter() - t0
        outcome.ended = time.time()
    outcome.flow_run_id = str(state.state_details.flow_run_id) if state.state_details.flow_run_id else None
    if state.is_completed():
        outcome.status = "ok"
        outcome.run_id = state.result().run_id
    else:
        outcome.status = "failed"
        try:
            state.result(raise_on_failure=True)
            outcome.error = state.message or state.name
        except Exception as exc:  # noqa: BLE001 - OOM, compile errors, ultralytics errors: record, go on
            outcome.error = f"{type(exc).__name__}: {exc}"[:2000]  # (Ctrl-C / SystemExit stop the sweep)
        print(f"child {outcome.child.variant} r{outcome.child.repeat} failed: {outcome.error}")
    return outcome


@flow(name="sweep", log_prints=True)
def sweep(
    base: RunSpec = RunSpec(),
    variants: list[str] = ["amp_bf16", "cudnn_benchmark", "channels_first"],  # noqa: B006 - Prefect copies
    repeats: Annotated[int, Field(ge=1, le=50)] = 3,
    order: Literal["interleaved", "blocked"] = "interleaved",
    warmup_steps: Annotated[int, Field(ge=0, description="steps discarded at the start of every child")] = 1,
    concurrency_limit: Annotated[str | None, Field(
        description="Prefect global concurrency limit each child holds; default gpu-<index> on a GPU, none on "
                    "CPU; it must exist (strict)")] = None,
    custom_variants: Annotated[dict[str, dict[str, Any]], Field(
        description="ad-hoc variants: name -> RunSpec field changes, e.g. "
                    "{'sgd': {'train_args': {'optimizer': 'SGD'}}}")] = {},  # noqa: B006
    extra_tags: Annotated[dict[str, str], Field(description="extra tags for the parent MLflow run")] = {},  # noqa: B006
) -> SweepResult:
    plan = sweeps.plan_sweep(base, list(variants), repeats, order, warmup_steps, concurrency_limit, custom_variants)
    slots = gpu_lock.check_limit(plan.concurrency_limit)
    dataset = pipeline.resolve_dataset(base, preflight.check(base))
    for name, reason in plan.skipped.items():
        print(f"skipping variant {name}: {reason}")

    mlflow = tracking.client()
    tags = {**sweeps.parent_tags(plan), **extra_tags}
    if slots is not None:
        tags[names.SWEEP_CONCURRENCY_SLOTS] = str(slots)
    parent_id = tracking.create_run(mlflow, base.experiment, base.run_name or "sweep", tags,
                                    sweeps.parent_params(plan))
    experiment_id = tracking.experiment_of(mlflow, parent_id)
    with tracking.run_guard(mlflow, parent_id):
        outcomes = [run_child(plan, ChildOutcome(child, "pending"), parent_id, dataset.yaml_path)
                    for child in plan.children]
        records = sweeps.collect(mlflow, plan, parent_id, outcomes)
        report = sweeps.compare(plan, records)
        markdown = sweeps.markdown(plan, report)
        sweeps.log_report(mlflow, parent_id, report, markdown)
    url = tracking.run_url(parent_id, experiment_id)
    table = sweeps.prefect_table(report)
    create_table_artifact(table, key="sweep-comparison",
                          description=f"Sweep {parent_id}: speed-up vs baseline with bootstrap 95% CI")
    create_markdown_artifact(markdown + f"\n\nMLflow parent run: [{url}]({url})", key="sweep-report",
                             description=f"MLflow parent run {parent_id}")
    print(f"sweep {parent_id}: best {report.best} - {report.best_evidence}; "
          f"{report.failed_children}/{report.total_children} children failed")
    return SweepResult(
        parent_run_id=parent_id, run_url=url, best_variant=report.best, best_evidence=report.best_evidence,
        failed_children=report.failed_children, total_children=report.total_children, skipped=dict(plan.skipped),
        rows=report.rows, table=table, markdown=markdown,
        children=[{"variant": o.child.variant, "repeat": o.child.repeat, "position": o.child.position,
                   "status": o.status, "run_id": o.run_id, "flow_run_id": o.flow_run_id, "error": o.error,
                   "wall_s": o.wall_s, "acquire_s": o.acquire_s, "started": o.started, "ended": o.ended}
                  for o in outcomes],
    )
