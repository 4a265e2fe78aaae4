"""Made-up machines for tests and benchmarks that write runs as a fleet would: the environment a run records
(`run.environment.Environment`) of a 16-core CPU node and of an 8-GPU H200 node, each field changeable."""

from __future__ import annotations

import dataclasses
from typing import Any

from yolo_mlops.run.environment import Environment

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
