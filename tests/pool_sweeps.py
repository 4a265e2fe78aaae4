"""A sweep through the work pool of a local fleet (tests/local_fleet.py) and the MLflow runs it leaves: the fleet
tests (tests/sweeps/test_pool_sweep.py) and the fleet benchmark (benchmarks/bench_fleet_sweep.py) start the same
sweep, the baseline against batch_2, of the same tiny workload, and read it back the same way."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import workloads
from local_fleet import POOL, LocalFleet


def sweep_workload(**overrides: Any) -> dict[str, Any]:
    """RunSpec fields of a sweep child: the tiny CPU training (tests/workloads.py), 6 steps over 24 synthetic
    images, with `overrides`."""
    return workloads.tiny(max_steps=6, synthetic_images=24) | overrides


def start_pool_sweep(fleet: LocalFleet, config: Path, repeats: int, *options: str) -> tuple[subprocess.Popen, Path]:
    """`yolo-mlops sweep` of the baseline against batch_2 over the fleet's work pool: `repeats` blocks of the
    workload in `config`, with further `options`; its output goes to the returned log."""
    return fleet.cli(
        "sweep",
        "--pool",
        POOL,
        "--variants",
        "batch_2",
        "--repeats",
        str(repeats),
        "--config",
        str(config),
        *options,
    )


def parent_run_id(log: Path) -> str:
    """The id of the sweep's MLflow parent run, as the sweep's output names it."""
    for line in log.read_text(errors="replace").splitlines():
        if line.startswith("MLflow parent run "):
            return line.split()[3].rstrip(":")
    raise AssertionError(f"no parent run in the output:\n{log.read_text(errors='replace')[-4000:]}")


def sweep_children(fleet: LocalFleet, parent_id: str) -> list:
    """The MLflow runs of the sweep's children."""
    client = fleet.mlflow()
    experiment = client.get_run(parent_id).info.experiment_id
    return client.search_runs([experiment], filter_string=f"tags.`mlflow.parentRunId` = '{parent_id}'")
