"""Optimisation sweeps: baseline + variants x repeats as child runs of one MLflow parent, compared with a
bootstrap confidence interval (docs/sweeps.md).

The modules, in the order a sweep uses them (`flows/sweep.py` and `flows/optimize.py` only orchestrate):

- `variants`   the catalogue: expression -> exact RunSpec change, skip reasons, canonical names
- `plan`       `plan_sweep(base, exprs, ...)` or `plan_request(SweepRequest)` -> `SweepPlan` (every child RunSpec
               validated before any run exists)
- `child`      per-child hygiene in the shared process: `release_device_memory`, `disk_cache_guard`
- `lanes`      where the children run (a lane per device, or per machine of a work pool), every wait bounded,
               as data the flow acts on
- `remote`     a child as a run of the pool's profile-training deployment on one machine's work queue
- `collect`    `collect(mlflow, plan, parent_run_id, outcomes) -> [ChildRecord]`: children read back from MLflow
- `stats`      per-repeat throughput, two-level bootstrap CI, verdicts, accuracy bands
- `blocks`     the paired comparison within blocks when children ran on several lanes
- `compare`    `compare(plan, records) -> SweepReport` of typed `VariantRow`s, best variant, `sweep/*` metrics
- `comparison_report`  Markdown, chart, the MLflow table and files on the parent run, Prefect table rows
- `recommend`  optimize: findings -> `Recommendations`, which held, estimated vs measured saving on the parent

The names below are the API the flows, the CLI and the benchmarks use.
"""

from __future__ import annotations

from yolo_mlops.sweeps.child import dataset_root, disk_cache_guard, release_device_memory
from yolo_mlops.sweeps.collect import ChildOutcome, ChildRecord, collect, ineffective
from yolo_mlops.sweeps.compare import SweepReport, VariantRow, compare, pick_best, sweep_metrics
from yolo_mlops.sweeps.comparison_report import chart, frame, json_rows, log_report, markdown, prefect_table
from yolo_mlops.sweeps.plan import Child, Order, SweepPlan, parent_params, parent_tags, plan_request, plan_sweep
from yolo_mlops.sweeps.recommend import (
    RecommendationRow,
    Recommendations,
    log_recommendations,
    recommendation_report,
    recommendations,
    saving_metrics,
)

__all__ = [
    "Child",
    "ChildOutcome",
    "ChildRecord",
    "Order",
    "RecommendationRow",
    "Recommendations",
    "SweepPlan",
    "SweepReport",
    "VariantRow",
    "chart",
    "collect",
    "compare",
    "dataset_root",
    "disk_cache_guard",
    "frame",
    "ineffective",
    "json_rows",
    "log_recommendations",
    "log_report",
    "markdown",
    "parent_params",
    "parent_tags",
    "pick_best",
    "plan_request",
    "plan_sweep",
    "prefect_table",
    "recommendation_report",
    "recommendations",
    "release_device_memory",
    "saving_metrics",
    "sweep_metrics",
]
