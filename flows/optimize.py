"""Prefect flow `optimize`: profile the baseline, sweep exactly the variants its diagnosis recommends, report
which recommendations held (measurably faster, accuracy unchanged) and by how much.

Deployment entrypoint: `flows/optimize.py:optimize`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Literal

from prefect import flow
from prefect.artifacts import create_markdown_artifact, create_table_artifact
from pydantic import Field

from yolo_mlops import names, sweeps
from yolo_mlops.analysis import Finding
from yolo_mlops.config import RunSpec, SweepRequest, build_run_spec, deep_merge
from yolo_mlops.flows.profile_training import profile_training
from yolo_mlops.flows.sweep import sweep
from yolo_mlops.run import gpu_lock
from yolo_mlops.sweeps import RecommendationRow
from yolo_mlops.tracking import connection


@dataclass
class OptimizeResult:
    profile_run_id: str
    recommended: list[str]
    rows: list[RecommendationRow]
    markdown: str
    findings: list[Finding] = field(default_factory=list)  # the baseline's diagnosis
    sweep_parent_run_id: str | None = None
    best_variant: str | None = None
    rejected: dict[str, str] = field(default_factory=dict)


@flow(name="optimize", log_prints=True)
def optimize(
    base: RunSpec = RunSpec(),
    repeats: Annotated[int, Field(ge=1, le=50)] = 3,
    order: Literal["interleaved", "blocked"] = "interleaved",
    warmup_steps: Annotated[int, Field(ge=0)] = 1,
    concurrency_limit: str | None = None,
) -> OptimizeResult:
    plan = sweeps.plan_sweep(base, [], repeats, order, warmup_steps, concurrency_limit)  # validates the base
    gpu_lock.check_limit(plan.concurrency_limit)
    profile_spec = build_run_spec(
        deep_merge(
            base.model_dump(mode="json"),
            {
                "run_kind": "profile",
                "variant": "baseline",
                "run_name": base.run_name or "optimize-baseline",
                "tags": {names.OPTIMIZE: "baseline-profile"},
            },
        )
    )
    with gpu_lock.hold(plan.concurrency_limit):
        profiled = profile_training(profile_spec, gpu_limit=None)  # the lock is held here
    findings = list(profiled.findings)
    recs = sweeps.recommendations(findings)
    print(
        f"diagnosis of {profiled.run_id} recommends: {recs.variants or 'nothing'}"
        + (f"; not swept: {recs.rejected}" if recs.rejected else "")
    )
    result = None
    if recs.variants:
        request = SweepRequest(
            base=base,
            variants=recs.variants,
            repeats=repeats,
            order=order,
            warmup_steps=warmup_steps,
            concurrency_limit=plan.concurrency_limit,
            extra_tags={
                names.OPTIMIZE_PROFILE_RUN_ID: profiled.run_id,
                names.OPTIMIZE_RECOMMENDED: ",".join(recs.variants),
            },
        )
        result = sweep(request)
    rows, markdown = sweeps.recommendation_report(recs, result.rows if result else None, profiled.run_id)
    if result is not None:
        sweeps.log_recommendations(connection.client(), result.parent_run_id, rows, markdown)
    table = sweeps.json_rows(rows) or [{"variant": "-", "outcome": "no recommendations"}]
    create_table_artifact(
        table, key="optimize-recommendations", description=f"recommendations of profile run {profiled.run_id}"
    )
    create_markdown_artifact(markdown, key="optimize-report", description=f"profile run {profiled.run_id}")
    print(markdown)
    return OptimizeResult(
        profile_run_id=profiled.run_id,
        recommended=recs.variants,
        rows=rows,
        markdown=markdown,
        findings=findings,
        sweep_parent_run_id=result.parent_run_id if result else None,
        best_variant=result.best_variant if result else None,
        rejected=recs.rejected,
    )
