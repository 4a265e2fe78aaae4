"""`optimize` end to end on CPU: a real baseline profile run whose diagnosis step returns findings the test
chose, so both branches run: nothing recommended (no sweep starts), and recommended variants swept (one
sweepable, one GPU-only, one the catalogue rejects). Everything else is real: ultralytics training, the
pipeline, Prefect flows, the MLflow store."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from workloads import tiny

from yolo_mlops.analysis import Finding
from yolo_mlops.config import RunSpec
from yolo_mlops.run import pipeline
from yolo_mlops.sweeps import stats

pytestmark = pytest.mark.slow

TINY = tiny(profiler={"wait": 0, "warmup": 1, "active": 1})


def finding(rule: str, recommended: list[str]) -> Finding:
    return Finding(
        rule=rule,
        severity="medium",
        title=f"{rule} finding",
        evidence={"share_pct": 30.0},
        recommended_variants=recommended,
    )


@pytest.fixture
def diagnosis(monkeypatch):
    """Replace the pipeline's diagnosis step: returns `diagnosis.findings`, records what it was given."""

    class Injected:
        findings: list[Finding] = []
        inputs: list = []

    def fake_diagnose(inp):
        Injected.inputs.append(inp)
        return list(Injected.findings)

    monkeypatch.setattr(pipeline, "diagnose", fake_diagnose)
    return Injected


def _runs(mlflow_client, experiment):
    return mlflow_client.search_runs([mlflow_client.get_experiment_by_name(experiment).experiment_id])


def test_nothing_recommended_profiles_the_baseline_and_starts_no_sweep(
    prefect_server, mlflow_client, diagnosis, tmp_path
):
    from yolo_mlops.flows.optimize import optimize

    diagnosis.findings = [finding("fine", [])]
    result = optimize(base=RunSpec.model_validate({**TINY, "experiment": "optimize-none"}), repeats=1)

    assert result.recommended == [] and result.rows == [] and result.sweep_parent_run_id is None
    assert "recommended no variants: nothing to sweep" in result.markdown
    assert result.findings == diagnosis.findings
    (run,) = _runs(mlflow_client, "optimize-none")  # the profile run only: no sweep parent, no children
    assert run.info.run_id == result.profile_run_id and run.info.status == "FINISHED"
    assert run.data.tags["yolo_mlops.optimize"] == "baseline-profile"
    assert run.data.tags["yolo_mlops.run_kind"] == "profile"
    # the injected finding went through the real pipeline into the run's findings.json
    stored = json.loads(
        Path(mlflow_client.download_artifacts(run.info.run_id, "analysis/findings.json", str(tmp_path))).read_text()
    )
    assert [f["rule"] for f in stored] == ["fine"]
    # the diagnosis was given the applied settings of this CPU run, typed
    (inp,) = diagnosis.inputs
    assert inp.amp is False and inp.cudnn_benchmark is False
    assert run.data.tags["yolo_mlops.applied.amp"] == "False"


def test_recommended_variants_are_swept_and_judged(prefect_server, mlflow_client, diagnosis, tmp_path):
    from yolo_mlops.flows.optimize import optimize

    diagnosis.findings = [
        finding("data_wait_high", ["batch_2", "persistent_workers"]),
        finding("fp32_matmuls", ["amp_bf16", "batch_2"]),
    ]
    result = optimize(base=RunSpec.model_validate({**TINY, "experiment": "optimize-some"}), repeats=1)

    assert result.recommended == ["batch_2", "amp_bf16"]
    assert set(result.rejected) == {"persistent_workers"}
    parent = mlflow_client.get_run(result.sweep_parent_run_id)
    tags = parent.data.tags
    assert parent.info.status == "FINISHED"
    assert tags["yolo_mlops.optimize.profile_run_id"] == result.profile_run_id
    assert tags["yolo_mlops.optimize.recommended"] == "batch_2,amp_bf16"
    assert tags["yolo_mlops.sweep.variants"] == "baseline,batch_2,amp_bf16"
    assert tags["yolo_mlops.sweep.skipped"] == "amp_bf16"  # GPU-only: skipped on CPU, never run as something else
    assert tags["yolo_mlops.sweep.best_variant"] == result.best_variant
    children = [
        r
        for r in _runs(mlflow_client, "optimize-some")
        if r.data.tags.get("mlflow.parentRunId") == result.sweep_parent_run_id
    ]
    assert sorted(c.data.tags["yolo_mlops.variant"] for c in children) == ["baseline", "batch_2"]

    rows = {r.variant: r for r in result.rows}
    assert list(rows) == ["batch_2", "amp_bf16", "persistent_workers"]
    assert rows["amp_bf16"].outcome == "skipped" and rows["amp_bf16"].recommended_by == "fp32_matmuls"
    rejected = rows["persistent_workers"]
    assert rejected.outcome == "not swept" and "InfiniteDataLoader" in rejected.reason
    # batch_2: judged from the comparison the sweep logged, at full precision (not the rounded display copy)
    b2 = rows["batch_2"]
    assert b2.recommended_by == "data_wait_high,fp32_matmuls"
    metrics = parent.data.metrics
    assert b2.reason == "", b2.reason  # both children counted: steady steps, variant in effect
    assert b2.speedup == metrics["sweep/speedup_batch_2"]
    assert b2.ci_low == metrics["sweep/speedup_ci_low_batch_2"]
    assert b2.ci_high == metrics["sweep/speedup_ci_high_batch_2"]
    table = mlflow_client.load_table(
        parent.info.experiment_id, "sweep/comparison.json", run_ids=[result.sweep_parent_run_id]
    )
    logged = {r["variant"]: r for r in table.to_dict("records")}["batch_2"]
    assert b2.verdict == logged["verdict"] == stats.verdict(b2.ci_low, b2.ci_high)
    expected = (
        "did not hold"
        if logged["verdict"] != stats.FASTER
        else "faster but accuracy changed"
        if logged["loss_flag"] or logged["map_flag"]
        else "held"
    )
    assert b2.outcome == expected
    logged_report = Path(
        mlflow_client.download_artifacts(result.sweep_parent_run_id, "sweep/recommendations.md", str(tmp_path))
    ).read_text()
    assert logged_report == result.markdown and "`batch_2`" in logged_report
