"""Contracts shared by every layer: the run configuration (`RunSpec`), the nightly suite (`BenchmarkSuite`), a
sweep's request (`SweepRequest`), the settings a run applied and the step arithmetic.

A leaf of the import graph: stdlib, pydantic and yaml, plus `yolo_mlops.errors` and the MLflow names of
`yolo_mlops.names`; never torch and nothing else of the project (tests/test_layers.py).
"""

from __future__ import annotations

from yolo_mlops.config.applied import AppliedSettings
from yolo_mlops.config.benchmark import BenchmarkSuite
from yolo_mlops.config.run_spec import (
    DEFAULT_EXPERIMENT,
    DdpSettings,
    NvmlSettings,
    ProfilerSettings,
    RunSpec,
    TorchSettings,
    build_run_spec,
    data_home,
    deep_merge,
    device_list,
    load_run_spec,
    one_line_validation_error,
    yaml_error_line,
)
from yolo_mlops.config.steps import boundary_steps, resolve_steps, steps_per_epoch, window_inside_epoch
from yolo_mlops.config.sweep import SweepRequest

__all__ = [
    "DEFAULT_EXPERIMENT",
    "AppliedSettings",
    "BenchmarkSuite",
    "DdpSettings",
    "NvmlSettings",
    "ProfilerSettings",
    "RunSpec",
    "SweepRequest",
    "TorchSettings",
    "build_run_spec",
    "data_home",
    "deep_merge",
    "device_list",
    "load_run_spec",
    "one_line_validation_error",
    "boundary_steps",
    "resolve_steps",
    "steps_per_epoch",
    "window_inside_epoch",
    "yaml_error_line",
]
