"""Prefect flow `sweep`: baseline + variants x repeats as `profile-training` runs under one MLflow parent run.

Thin: planning, collection, statistics and reports live in `yolo_mlops.sweeps`. This flow only
- validates the plan (variants, skip reasons, devices, pool, concurrency limits) before anything is created,
- creates the parent MLflow run (`yolo_mlops.run_kind=sweep`) and ends it FINISHED unless the sweep itself breaks,
- runs the children, isolating failures (a failed or lost child is recorded, the sweep goes on):
  - one device: one after another as `profile-training` subflows in this process, inside the device's limit;
  - `devices`: one lane per device, lanes side by side in worker processes (Prefect's ProcessPoolTaskRunner;
    `isolation="exclusive"` runs them one at a time), each child holding its device's limit;
  - `pool`: one lane per machine of a Prefect work pool, each child a run of the pool's `profile-training`
    deployment on that machine's work queue (`sweeps.remote`), collected by MLflow parent id,
- logs the comparison to the parent run and as Prefect artifacts.

Deployment entrypoint: `flows/sweep.py:sweep`.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

from prefect import flow, task
from prefect.artifacts import create_markdown_artifact, create_table_artifact
from prefect.cache_policies import NO_CACHE
from prefect.task_runners import ProcessPoolTaskRunner
from pydantic import Field

from yolo_mlops import names, sweeps
from yolo_mlops.config import RunSpec
from yolo_mlops.flows.profile_training import profile_training
from yolo_mlops.run import gpu_lock, pipeline, preflight
from yolo_mlops.sweeps import ChildOutcome, SweepPlan, VariantRow, remote
from yolo_mlops.sweeps.plan import Lane
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


def run_child(plan: SweepPlan, outcome: ChildOutcome, parent_run_id: str, dataset_yaml,
              limit: str | None = None) -> ChildOutcome:
    """One variant x repeat as the profile-training subflow, holding the device's concurrency slot."""
    spec = plan.child_spec(outcome.child, parent_run_id)
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
    return [run_child(plan, ChildOutcome(child, "pending"), parent_run_id, dataset_yaml, lane.limit)
            for child in plan.lane_children(lane.name)]


@dataclass(frozen=True)
class Waits:
    """How long a sweep waits for a child: a pool machine's worker polling (lost), a child starting (submitted
    to a pool machine, or waiting for its device's limit), a child running."""
    lost_after_s: float = remote.LOST_AFTER_S
    start_timeout_s: float = remote.START_TIMEOUT_S
    run_timeout_s: float = remote.RUN_TIMEOUT_S

    def lane_s(self, children: int) -> float:
        """The longest a device lane of `children` children may take: each may wait to start and then run."""
        return children * (self.start_timeout_s + self.run_timeout_s)


def run_pool_lane(plan: SweepPlan, lane: Lane, target: remote.PoolTarget, parent_run_id: str,
                  waits: Waits) -> list[ChildOutcome]:
    """One machine's children, one at a time, as runs of the pool's profile-training deployment."""
    return [remote.run_remote_child(target, lane, ChildOutcome(child, "pending"),
                                    plan.child_spec(child, parent_run_id).model_dump(mode="json"),
                                    waits.lost_after_s, start_timeout_s=waits.start_timeout_s,
                                    run_timeout_s=waits.run_timeout_s)
            for child in plan.lane_children(lane.name)]


def run_lanes(plan: SweepPlan, parent_run_id: str, dataset_yaml: Path | None,
              target: remote.PoolTarget | None, waits: Waits) -> list[ChildOutcome]:
    if not plan.lanes:
        return [run_child(plan, ChildOutcome(child, "pending"), parent_run_id, dataset_yaml, plan.concurrency_limit)
                for child in plan.children]
    width = 1 if plan.isolation == "exclusive" else len(plan.lanes)
    if target is not None:
        with ThreadPoolExecutor(max_workers=width, thread_name_prefix="sweep-lane") as pool:
            lanes = list(pool.map(lambda lane: run_pool_lane(plan, lane, target, parent_run_id, waits), plan.lanes))
    else:
        lanes = _local_lanes(plan, parent_run_id, dataset_yaml, width, waits)
    by_position = {o.child.position: o for outcomes in lanes for o in outcomes}
    return [by_position[c.position] for c in plan.children]


def _local_lanes(plan: SweepPlan, parent_run_id: str, dataset_yaml: Path | None, width: int, waits: Waits
                 ) -> list[list[ChildOutcome]]:
    """Lanes in worker processes, connected to this flow's Prefect server (a temporary server included). A lane
    not done within `waits.lane_s` of its children (counted from the sweep's start, lanes queued behind others
    under exclusive isolation included) fails its children and its worker processes are ended."""
    from prefect.settings import PREFECT_API_URL, temporary_settings

    with temporary_settings({PREFECT_API_URL: _api_url()}), ProcessPoolTaskRunner(max_workers=width) as runner:
        futures = [runner.submit(run_lane, parameters={"plan": plan, "lane": lane, "parent_run_id": parent_run_id,
                                                         "dataset_yaml": dataset_yaml})
                   for lane in plan.lanes]
        bound = waits.lane_s(len(plan.children))  # every child, should the lanes run one after another
        deadline = time.monotonic() + bound
        results = [_lane_result(plan, lane, future, max(0.0, deadline - time.monotonic()), bound)
                   for lane, future in zip(plan.lanes, futures, strict=True)]
        if any(overdue for _, overdue in results):
            _end_worker_processes(runner)
        return [outcomes for outcomes, _ in results]


def _end_worker_processes(runner: ProcessPoolTaskRunner) -> None:
    """Ends the lane processes still running (a lane past its bound), so leaving the runner does not wait on
    them; their children's MLflow runs are ended FAILED by `end_stopped_children`."""
    executor = getattr(runner, "_executor", None)
    for process in list(getattr(executor, "_processes", {}).values()):
        if process.is_alive():
            process.terminate()
            process.join(30)
            if process.is_alive():
                process.kill()


def _lane_result(plan: SweepPlan, lane: Lane, future, timeout_s: float, bound_s: float
                 ) -> tuple[list[ChildOutcome], bool]:
    """A lane whose process died (killed, out of memory) or that did not finish within its bound (then True)
    fails its children; the other lanes count."""
    from concurrent.futures import TimeoutError as FutureTimeout

    try:
        return future.result(timeout=timeout_s), False
    except FutureTimeout:
        reason = (f"lane {lane.name} did not finish within {bound_s:g} s (the sweep's children x (start timeout + "
                  "run timeout)); its process was ended")
        print(reason)
        return [ChildOutcome(child, "failed", error=reason) for child in plan.lane_children(lane.name)], True
    except Exception as exc:  # noqa: BLE001 - recorded per child, the sweep goes on
        reason = f"lane {lane.name} broke: {type(exc).__name__}: {exc}"[:2000]
        print(reason)
        return [ChildOutcome(child, "failed", error=reason) for child in plan.lane_children(lane.name)], False


def _api_url() -> str:
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        return str(client.api_url)


def end_lost_children(mlflow, outcomes: list[ChildOutcome]) -> None:
    """A child whose machine was lost left its MLflow run RUNNING: end it FAILED with the reason."""
    runs = {o.run_id: o for o in outcomes if o.status == "failed" and o.run_id}
    for run_id, outcome in runs.items():
        run = queries.find_run(mlflow, run_id)
        if run is not None and run.status == "RUNNING":
            run_end.finish_failed_run(mlflow, run_id, "FAILED", outcome.error or "lost")


def end_stopped_children(mlflow, parent_run_id: str, outcomes: list[ChildOutcome]) -> None:
    """Children still RUNNING in MLflow once every lane returned were stopped (a timed-out lane or pool child):
    ended FAILED with their lane's reason."""
    reasons = {o.child.lane: o.error for o in outcomes if o.status == "failed" and o.error}
    for child in queries.child_runs(mlflow, parent_run_id):
        if child.status == "RUNNING":
            reason = reasons.get(child.tags.get(names.SWEEP_LANE, "")) or "the sweep ended before this run"
            run_end.finish_failed_run(mlflow, child.run_id, "FAILED", reason)


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
    devices: Annotated[list[str] | None, Field(
        description="run children side by side, one per device (CUDA indices), blocks paired within a device")
    ] = None,
    pool: Annotated[str | None, Field(
        description="Prefect work pool: children run on its machines (one work queue per machine), each a run "
                    "of the pool's profile-training deployment")] = None,
    deployment: Annotated[str | None, Field(
        description="the pool's profile-training deployment, when it has several")] = None,
    isolation: Annotated[Literal["side-by-side", "exclusive"], Field(
        description="exclusive: one child at a time over all devices/machines (no interference, slower)")
    ] = "side-by-side",
    lost_after_s: Annotated[float, Field(
        gt=0, description="a pool machine whose worker has not polled for this long is lost: its child fails")
    ] = remote.LOST_AFTER_S,
    start_timeout_s: Annotated[float, Field(
        gt=0, description="a child not running this long after its submission (pool) is cancelled and fails")
    ] = remote.START_TIMEOUT_S,
    run_timeout_s: Annotated[float, Field(
        gt=0, description="a child not finished this long after its start is cancelled and fails")
    ] = remote.RUN_TIMEOUT_S,
) -> SweepResult:
    target = remote.find_target(pool, deployment, lost_after_s) if pool is not None else None
    plan = sweeps.plan_sweep(base, list(variants), repeats, order, warmup_steps, concurrency_limit, custom_variants,
                             devices=devices, pool=pool, machines=target.machines if target else None,
                             isolation=isolation)
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
    parent_id = writes.create_run(mlflow, base.experiment, base.run_name or "sweep", tags,
                                    sweeps.parent_params(plan))
    experiment_id = queries.experiment_of(mlflow, parent_id)
    with run_end.run_guard(mlflow, parent_id):
        outcomes = run_lanes(plan, parent_id, dataset.yaml_path if dataset else None, target,
                             Waits(lost_after_s, start_timeout_s, run_timeout_s))
        end_lost_children(mlflow, outcomes)
        end_stopped_children(mlflow, parent_id, outcomes)
        records = sweeps.collect(mlflow, plan, parent_id, outcomes)
        report = sweeps.compare(plan, records)
        markdown = sweeps.markdown(plan, report)
        sweeps.log_report(mlflow, parent_id, report, markdown)
    url = queries.run_url(parent_id, experiment_id)
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
                   "block": o.child.block, "lane": o.child.lane, "status": o.status, "run_id": o.run_id,
                   "flow_run_id": o.flow_run_id, "error": o.error,
                   "wall_s": o.wall_s, "acquire_s": o.acquire_s, "started": o.started, "ended": o.ended}
                  for o in outcomes],
    )
