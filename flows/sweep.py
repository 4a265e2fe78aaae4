"""Prefect flow `sweep`: baseline + variants x repeats as `profile-training` runs under one MLflow parent run.

Thin: planning, collection, statistics and reports live in `yolo_mlops.sweeps`. This flow only
- validates the plan (variants, skip reasons, devices, pool, concurrency limits) before anything is created,
- creates the parent MLflow run (`yolo_mlops.run_kind=sweep`) and ends it FINISHED unless the sweep itself breaks,
- runs the children, isolating failures (a failed or lost child is recorded, the sweep goes on), through
  `sweeps.lanes`: one after another here, one lane per device in worker processes, or one lane per machine of
  a work pool; a child here is a `profile-training` subflow inside its device's limit (`run_variant_child`),
- logs the comparison to the parent run and as Prefect artifacts.

Deployment entrypoint: `flows/sweep.py:sweep`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Annotated, Any, Literal

from prefect import flow, task
from prefect.artifacts import create_markdown_artifact, create_table_artifact
from prefect.cache_policies import NO_CACHE
from pydantic import Field

from yolo_mlops import names, sweeps
from yolo_mlops.config import RunSpec
from yolo_mlops.flows.profile_training import profile_training
from yolo_mlops.run import gpu_lock, pipeline, preflight
from yolo_mlops.sweeps import ChildOutcome, SweepPlan, VariantRow, lanes, remote
from yolo_mlops.sweeps.plan import Child, Lane
from yolo_mlops.tracking import connection, queries, run_end, writes


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


def run_variant_child(
    plan: SweepPlan, parent_run_id: str, dataset_yaml: Path | None, child: Child, limit: str | None = None
) -> ChildOutcome:
    """One variant x repeat as the profile-training subflow, holding the device's concurrency slot."""
    outcome = ChildOutcome(child, "pending")
    spec = plan.child_spec(child, parent_run_id)
    t_wait = time.perf_counter()
    with gpu_lock.hold(limit):  # a missing limit raises here (strict): breaks the sweep, by design
        outcome.started = time.time()
        t0 = time.perf_counter()
        outcome.acquire_s = t0 - t_wait
        sweeps.release_device_memory(spec.device or plan.device)
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


@task(cache_policy=NO_CACHE, persist_result=False)
def run_lane(plan: SweepPlan, lane: Lane, parent_run_id: str, dataset_yaml: Path | None) -> list[ChildOutcome]:
    """One device's children, block by block, in a process of its own (torch's global switches such as
    cudnn.benchmark and the data loader's CPU work must not be shared with another device's children)."""
    return [
        run_variant_child(plan, parent_run_id, dataset_yaml, child, lane.limit)
        for child in plan.lane_children(lane.name)
    ]


@flow(name="sweep", log_prints=True)
def sweep(
    base: RunSpec = RunSpec(),
    variants: list[str] = ["amp_bf16", "cudnn_benchmark", "channels_first"],  # noqa: B006 - Prefect copies
    repeats: Annotated[int, Field(ge=1, le=50)] = 3,
    order: Literal["interleaved", "blocked"] = "interleaved",
    warmup_steps: Annotated[int, Field(ge=0, description="steps discarded at the start of every child")] = 1,
    concurrency_limit: Annotated[
        str | None,
        Field(
            description="Prefect global concurrency limit each child holds; default gpu-<index> on a GPU, none on "
            "CPU; it must exist (strict)"
        ),
    ] = None,
    custom_variants: Annotated[
        dict[str, dict[str, Any]],
        Field(
            description="ad-hoc variants: name -> RunSpec field changes, e.g. "
            "{'sgd': {'train_args': {'optimizer': 'SGD'}}}"
        ),
    ] = {},  # noqa: B006
    extra_tags: Annotated[dict[str, str], Field(description="extra tags for the parent MLflow run")] = {},  # noqa: B006
    devices: Annotated[
        list[str] | None,
        Field(description="run children side by side, one per device (CUDA indices), blocks paired within a device"),
    ] = None,
    pool: Annotated[
        str | None,
        Field(
            description="Prefect work pool: children run on its machines (one work queue per machine), each a run "
            "of the pool's profile-training deployment"
        ),
    ] = None,
    deployment: Annotated[
        str | None, Field(description="the pool's profile-training deployment, when it has several")
    ] = None,
    isolation: Annotated[
        Literal["side-by-side", "exclusive"],
        Field(description="exclusive: one child at a time over all devices/machines (no interference, slower)"),
    ] = "side-by-side",
    lost_after_s: Annotated[
        float,
        Field(gt=0, description="a pool machine whose worker has not polled for this long is lost: its child fails"),
    ] = remote.LOST_AFTER_S,
    start_timeout_s: Annotated[
        float,
        Field(gt=0, description="a child not running this long after its submission (pool) is cancelled and fails"),
    ] = remote.START_TIMEOUT_S,
    run_timeout_s: Annotated[
        float, Field(gt=0, description="a child not finished this long after its start is cancelled and fails")
    ] = remote.RUN_TIMEOUT_S,
) -> SweepResult:
    target = remote.find_target(pool, deployment, lost_after_s) if pool is not None else None
    plan = sweeps.plan_sweep(
        base,
        list(variants),
        repeats,
        order,
        warmup_steps,
        concurrency_limit,
        custom_variants,
        devices=devices,
        pool=pool,
        machines=target.machines if target else None,
        isolation=isolation,
    )
    if target is not None:
        for machine, why in sorted(target.idle.items()):
            print(f"machine {machine} of pool {pool} not used: {why}")
    limits = {lane.limit for lane in plan.lanes} if plan.lanes else {plan.concurrency_limit}
    # check_limit gives None only for a None name; these names are all set
    slots = [slot for name in sorted(x for x in limits if x) if (slot := gpu_lock.check_limit(name)) is not None]
    if target is None:
        dataset = pipeline.resolve_dataset(base, preflight.check(base))
    else:  # a pool's machines check their own dataset and device; the runs all go to this tracking store
        connection.check_reachable()
        dataset = None
    for name, reason in plan.skipped.items():
        print(f"skipping variant {name}: {reason}")

    mlflow = connection.client()
    tags = {**sweeps.parent_tags(plan), **extra_tags}
    if slots:
        tags[names.SWEEP_CONCURRENCY_SLOTS] = str(min(slots))
    parent_id = writes.create_run(mlflow, base.experiment, base.run_name or "sweep", tags, sweeps.parent_params(plan))
    experiment_id = queries.experiment_of(mlflow, parent_id)
    with run_end.run_guard(mlflow, parent_id):
        dataset_yaml = dataset.yaml_path if dataset else None
        outcomes = lanes.run_lanes(
            plan,
            parent_id,
            target,
            lanes.Waits(lost_after_s, start_timeout_s, run_timeout_s),
            partial(run_variant_child, plan, parent_id, dataset_yaml),
            run_lane,
            {"plan": plan, "parent_run_id": parent_id, "dataset_yaml": dataset_yaml},
        )
        lanes.end_lost_children(mlflow, outcomes)
        lanes.end_stopped_children(mlflow, parent_id, outcomes)
        records = sweeps.collect(mlflow, plan, parent_id, outcomes)
        report = sweeps.compare(plan, records)
        markdown = sweeps.markdown(plan, report)
        sweeps.log_report(mlflow, parent_id, report, markdown)
    url = queries.run_url(parent_id, experiment_id)
    table = sweeps.prefect_table(report)
    create_table_artifact(
        table, key="sweep-comparison", description=f"Sweep {parent_id}: speed-up vs baseline with bootstrap 95% CI"
    )
    create_markdown_artifact(
        markdown + f"\n\nMLflow parent run: [{url}]({url})",
        key="sweep-report",
        description=f"MLflow parent run {parent_id}",
    )
    print(
        f"sweep {parent_id}: best {report.best} - {report.best_evidence}; "
        f"{report.failed_children}/{report.total_children} children failed"
    )
    return SweepResult(
        parent_run_id=parent_id,
        run_url=url,
        best_variant=report.best,
        best_evidence=report.best_evidence,
        failed_children=report.failed_children,
        total_children=report.total_children,
        skipped=dict(plan.skipped),
        rows=report.rows,
        table=table,
        markdown=markdown,
        children=[
            {
                "variant": o.child.variant,
                "repeat": o.child.repeat,
                "position": o.child.position,
                "block": o.child.block,
                "lane": o.child.lane,
                "status": o.status,
                "run_id": o.run_id,
                "flow_run_id": o.flow_run_id,
                "error": o.error,
                "wall_s": o.wall_s,
                "acquire_s": o.acquire_s,
                "started": o.started,
                "ended": o.ended,
            }
            for o in outcomes
        ],
    )
