"""`optimize` end to end on CPU: a real baseline profile, then a sweep of exactly the variants its diagnosis
recommends (on this tiny CPU run that may be none, and then the report must say so and start no sweep)."""

from __future__ import annotations

import pytest

from yolo_mlops.run.config import RunSpec

pytestmark = pytest.mark.slow

TINY = dict(imgsz=64, batch=4, max_steps=3, workers=0, device="cpu", synthetic_images=8, val=False,
            profiler={"wait": 0, "warmup": 1, "active": 1})


def test_optimize_profiles_the_baseline_and_sweeps_only_recommendations(prefect_server, mlflow_client):
    from yolo_mlops.flows.optimize import optimize
    from yolo_mlops import sweeps

    result = optimize(base=RunSpec(**TINY, experiment="optimize"), repeats=1)
    run = mlflow_client.get_run(result.profile_run_id)
    assert run.info.status == "FINISHED"
    assert run.data.tags["yolo_mlops.optimize"] == "baseline-profile"
    assert run.data.tags["yolo_mlops.run_kind"] == "profile"
    expected = sweeps.recommendations(result.findings)
    assert result.recommended == expected.variants
    if not expected.variants:
        assert result.sweep_parent_run_id is None and "nothing to sweep" in result.markdown
        return
    parent = mlflow_client.get_run(result.sweep_parent_run_id)
    assert parent.data.tags["yolo_mlops.optimize.profile_run_id"] == result.profile_run_id
    assert parent.data.tags["yolo_mlops.sweep.variants"].split(",") == ["baseline", *expected.variants]
    assert {r["variant"] for r in result.rows} >= set(expected.variants)
