"""Made-up machines for tests and benchmarks that write runs as a fleet would: the environment a run records
(`run.environment.Environment`) of a 16-core CPU node and of an 8-GPU H200 node, each field changeable, and the
params and tags the nightly benchmark logs for a run on one."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from yolo_mlops import names
from yolo_mlops.config import RunSpec
from yolo_mlops.run.environment import Environment, data_identity, series_key
from yolo_mlops.run.pipeline import run_params
from yolo_mlops.run.training import TrainingPlan

_CPU_NODE = Environment(
    python="3.11.7",
    platform="Linux",
    hostname="node-1",
    machine="node-1",
    cpu_count=16,
    torch="2.14.1+cpu",
    torch_cuda=None,
    cudnn=None,
    ultralytics="8.4.190",
    mlflow="3.17.2",
    prefect="3.9.1",
    device_type="cpu",
    device_name="AMD EPYC 9654",
    gpu_count=0,
    nvidia_driver=None,
    git_commit="a" * 40,
    git_dirty=False,
)
_GPU_NODE = dataclasses.replace(
    _CPU_NODE,
    cpu_count=64,
    torch="2.14.1+cu130",
    torch_cuda="13.0",
    cudnn="92400",
    device_type="cuda",
    device_name="NVIDIA H200",
    gpu_count=8,
    nvidia_driver="580.65.06",
)


def cpu_node(**changes: Any) -> Environment:
    """node-1, a 16-core CPU machine at commit a*40, with `changes`."""
    return dataclasses.replace(_CPU_NODE, **changes)


def gpu_node(**changes: Any) -> Environment:
    """node-1, a 64-core machine with 8 H200s at commit a*40, with `changes`."""
    return dataclasses.replace(_GPU_NODE, **changes)


def benchmark_tags(spec: RunSpec, env: Environment, key: str) -> dict[str, str]:
    """The tags of a nightly benchmark run of `spec` on `env` over synthetic data, in the series `key`."""
    return {
        names.RUN_KIND: "benchmark",
        names.VARIANT: spec.variant,
        names.DEVICE_TYPE: env.device_type,
        names.DATASET: "synthetic",
        names.SERIES: key,
    }


def benchmark_run(
    spec: RunSpec, env: Environment, data_yaml: Path, device: str, output_dir: Path
) -> tuple[dict[str, str], dict[str, str]]:
    """The params and tags of a nightly benchmark run of `spec` on `env` over the synthetic data set at
    `data_yaml` (60 steps expected), its series key the one the pipeline computes."""
    plan = TrainingPlan(spec=spec, data_yaml=data_yaml, device=device, output_dir=output_dir, steps_expected=60)
    key = series_key(spec, env, data_identity(data_yaml, True), device)
    return run_params(spec, plan, env), benchmark_tags(spec, env, key)
