"""The NVML sampler inside a real training run, with the clearly named fake backend standing in for a GPU."""

from __future__ import annotations

import csv
from pathlib import Path

import mlflow
import pytest

pytestmark = pytest.mark.slow


def test_fake_nvml_backend_lands_in_mlflow(prefect_server, mlflow_client, tmp_path: Path):
    from yolo_mlops.config import build_run_spec
    from yolo_mlops.flows.profile_training import profile_training

    spec = build_run_spec(
        {
            "imgsz": 64,
            "batch": 4,
            "epochs": 2,
            "max_steps": 6,
            "workers": 0,
            "device": "cpu",
            "synthetic_images": 16,
            "experiment": "nvml-fake",
            "nvml": {"backend": "fake", "interval_ms": 20},
            "profiler": {"wait": 1, "warmup": 1, "active": 1},
        }
    )
    result = profile_training(spec)
    run = mlflow_client.get_run(result.run_id)
    assert run.data.tags["yolo_mlops.nvml_backend"] == "fake"
    # the fake stands in for a Hopper GPU (GPM): NVML needs > 100 ms between GPM samples, so 20 ms was raised
    assert run.data.params["sampler.effective_interval_ms"] == "105"
    metrics = run.data.metrics
    assert 0 <= metrics["gpu/sm_util_pct_mean"] <= 100
    assert metrics["gpu/sm_util_pct_max"] >= metrics["gpu/sm_util_pct_mean"]
    assert "gpu/sm_util_pct_mean_profiled" in metrics and "gpu/sm_util_pct_mean_unprofiled" in metrics
    history = mlflow_client.get_metric_history(result.run_id, "gpu/sm_util_pct")
    assert history and all(0 <= h.step < 6 for h in history)
    local = Path(
        mlflow.artifacts.download_artifacts(run_id=result.run_id, artifact_path="nvml", dst_path=str(tmp_path))
    )
    with open(local / "nvml_timeline.csv") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) > 5 and "sm_util_pct" in rows[0]
    assert {r["profiler_active"] for r in rows} == {"0", "1"}  # samples inside and outside the window
    assert (local / "nvml_timeline.png").stat().st_size > 1000
