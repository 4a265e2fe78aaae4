"""The groups of the MLflow metric names: the first part of every name yolo_mlops/names.py defines
(`perf/step_time_ms_p50`, `comm/wait_pct`, ...), as docs/mlflow.md lists them."""

from __future__ import annotations

METRIC_GROUPS = (
    "perf/",
    "trace/",
    "gpu/",
    "analysis/",
    "memory/",
    "data/",
    "train/",
    "val/",
    "trend/",
    "sweep/",
    "power/",
    "bisect/",
    "compare/",
    "optimize/",
    "comm/",
    "op/",
)
