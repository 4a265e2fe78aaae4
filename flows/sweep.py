"""Prefect flow `sweep`: baseline + variants x repeats as `profile-training` runs under one MLflow parent run.

Planning, collection, statistics and reports live in `yolo_mlops.sweeps`; this flow
- takes one `SweepRequest` (a deployment run passes `{"request": {...}}`) and validates its plan (variants, skip
  reasons, devices, pool, concurrency limits) before anything is created,
- creates the parent MLflow run (`yolo_mlops.run_kind=sweep`) and ends it FINISHED unless the sweep itself breaks,
- runs the children, isolating failures (a failed or lost child is recorded, the sweep goes on): one after another
  here, one `run_lane` task per device in the worker processes of a ProcessPoolTaskRunner, or one thread per
  machine of a work pool; it waits on each lane within the bound of `sweeps.lanes.Waits`; a child here is a
  `profile-training` subflow inside its device's limit (`run_variant_child`),
- logs the comparison to the parent run and as Prefect artifacts.

Deployment entrypoint: `flows/sweep.py:sweep`.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prefect import flow, task
from prefect.artifacts import create_markdown_artifact, create_table_artifact
from prefect.cache_policies import NO_CACHE
from prefect.client.orchestration import get_client
from prefect.settings import PREFECT_API_URL, temporary_settings

from yolo_mlops import names, sweeps
from yolo_mlops.compat import prefect as prefect_compat
from yolo_mlops.config import SweepRequest
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
def sweep(request: SweepRequest = SweepRequest()) -> SweepResult:
    target = remote.find_target(request.pool, request.deployment, request.lost_after_s) if request.pool else None
    plan = sweeps.plan_request(request, target.machines if target else None)
    if target is not None:
        for machine, why in sorted(target.idle.items()):
            print(f"machine {machine} of pool {request.pool} not used: {why}")
    limits = {lane.limit for lane in plan.lanes} if plan.lanes else {plan.concurrency_limit}
    # check_limit gives None only for a None name; these names are all set
    slots = [slot for name in sorted(x for x in limits if x) if (slot := gpu_lock.check_limit(name)) is not None]
    base = request.base
    if target is None:
        dataset = pipeline.resolve_dataset(base, preflight.check(base))
    else:  # a pool's machines check their own dataset and device; the runs all go to this tracking store
        connection.check_reachable()
        dataset = None
    for name, reason in plan.skipped.items():
        print(f"skipping variant {name}: {reason}")

    mlflow = connection.client()
    tags = {**sweeps.parent_tags(plan), **request.extra_tags}
    if slots:
        tags[names.SWEEP_CONCURRENCY_SLOTS] = str(min(slots))
    parent_id = writes.create_run(mlflow, base.experiment, base.run_name or "sweep", tags, sweeps.parent_params(plan))
    experiment_id = queries.experiment_of(mlflow, parent_id)
    with run_end.run_guard(mlflow, parent_id):
        waits = lanes.Waits(request.lost_after_s, request.start_timeout_s, request.run_timeout_s)
        outcomes = _run_children(plan, parent_id, target, waits, dataset.yaml_path if dataset else None)
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
        children=[_child_row(o) for o in outcomes],
    )


def _run_children(
    plan: SweepPlan, parent_id: str, target: remote.PoolTarget | None, waits: lanes.Waits, dataset_yaml: Path | None
) -> list[ChildOutcome]:
    """Every child's outcome, in the plan's order: one after another here without lanes; with lanes, one thread
    per machine of a pool, or one worker process per device of this machine."""
    if not plan.lanes:
        return [
            run_variant_child(plan, parent_id, dataset_yaml, child, plan.concurrency_limit) for child in plan.children
        ]
    if target is not None:
        with ThreadPoolExecutor(max_workers=lanes.width(plan), thread_name_prefix="sweep-lane") as pool:
            done = list(pool.map(lambda lane: lanes.run_pool_lane(plan, lane, target, parent_id, waits), plan.lanes))
    else:
        done = _local_lanes(plan, parent_id, waits, dataset_yaml)
    return lanes.in_plan_order(plan, done)


def _local_lanes(
    plan: SweepPlan, parent_id: str, waits: lanes.Waits, dataset_yaml: Path | None
) -> list[list[ChildOutcome]]:
    """Lanes as `run_lane` tasks in worker processes, connected to this flow's Prefect server (a temporary server
    included). A lane not done within `waits.lane_s` of its children (counted from the sweep's start, lanes queued
    behind others under exclusive isolation included) fails its children and its worker processes are ended."""
    with get_client(sync_client=True) as client:
        api_url = str(client.api_url)
    with (
        temporary_settings({PREFECT_API_URL: api_url}),
        prefect_compat.process_pool_runner(lanes.width(plan)) as runner,
    ):
        parameters = {"plan": plan, "parent_run_id": parent_id, "dataset_yaml": dataset_yaml}
        futures = [runner.submit(run_lane, parameters={**parameters, "lane": lane}) for lane in plan.lanes]
        bound = waits.lane_s(len(plan.children))  # every child, should the lanes run one after another
        deadline = time.monotonic() + bound
        done, overdue = [], False
        for lane, future in zip(plan.lanes, futures, strict=True):
            try:
                done.append(future.result(timeout=max(0.0, deadline - time.monotonic())))
            except FutureTimeout:
                done.append(lanes.failed_lane(plan, lane, lanes.overdue_reason(lane, bound)))
                overdue = True
            except Exception as exc:  # noqa: BLE001 - a lane whose process died fails its children; the sweep goes on
                done.append(lanes.failed_lane(plan, lane, lanes.broken_reason(lane, exc)))
        if overdue:  # their children's MLflow runs are ended FAILED by `end_stopped_children`
            prefect_compat.end_pool_processes(runner)
        return done


def _child_row(o: ChildOutcome) -> dict[str, Any]:
    return {
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
