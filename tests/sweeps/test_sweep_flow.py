"""End to end on CPU: two `sweep` flows at once on one Prefect concurrency limit of 1 (real test server),
real YOLO11n training for every child, a real SQLite MLflow store.

Sweep A: baseline + batch_2 + amp_bf16 (GPU-only: skipped) + bad_optimizer (a custom variant whose
ultralytics optimizer does not exist: a real ultralytics error) x 2 repeats, interleaved.
Sweep B: baseline x 1, started while A runs, on the same limit.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np
import pytest
from workloads import tiny

from yolo_mlops.config import RunSpec, SweepRequest
from yolo_mlops.errors import ConfigError
from yolo_mlops.run import pipeline, preflight
from yolo_mlops.sweeps import stats

pytestmark = pytest.mark.slow

LIMIT = "sweep-test-slot"
TINY = tiny()
BAD = {"bad_optimizer": {"train_args": {"optimizer": "NoSuchOptimizer"}}}


def _create_limit(name: str, limit: int) -> None:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import GlobalConcurrencyLimitCreate

    with get_client(sync_client=True) as client:
        client.create_global_concurrency_limit(GlobalConcurrencyLimitCreate(name=name, limit=limit))


@pytest.fixture(scope="module")
def sweeps_done(prefect_server, mlflow_client):
    from yolo_mlops.flows.sweep import sweep

    _create_limit(LIMIT, 1)
    base_a = RunSpec.model_validate({**TINY, "experiment": "sweep-a"})
    base_b = RunSpec.model_validate({**TINY, "experiment": "sweep-b"})
    # build the shared synthetic dataset once, before two threads want it
    pipeline.resolve_dataset(base_a, preflight.check(base_a))
    results, errors = {}, {}

    def run(key, **kwargs):
        try:
            results[key] = sweep(SweepRequest(**kwargs))
        except BaseException as exc:  # noqa: BLE001 - surfaced by the assertion below
            errors[key] = exc

    a = threading.Thread(
        target=run,
        args=("a",),
        kwargs=dict(
            base=base_a,
            variants=["batch_2", "amp_bf16", "bad_optimizer"],
            repeats=2,
            order="interleaved",
            warmup_steps=1,
            concurrency_limit=LIMIT,
            custom_variants=BAD,
        ),
    )
    b = threading.Thread(
        target=run, args=("b",), kwargs=dict(base=base_b, variants=[], repeats=1, concurrency_limit=LIMIT)
    )
    a.start()
    time.sleep(3.0)
    b.start()
    a.join(timeout=600)
    b.join(timeout=600)
    assert not errors, errors
    return results


def _children(mlflow_client, parent_id):
    exp = mlflow_client.get_run(parent_id).info.experiment_id
    return mlflow_client.search_runs([exp], filter_string=f"tags.`mlflow.parentRunId` = '{parent_id}'")


def test_parent_and_children_structure(sweeps_done, mlflow_client):
    res = sweeps_done["a"]
    parent = mlflow_client.get_run(res.parent_run_id)
    assert parent.info.status == "FINISHED"  # although two children failed
    tags = parent.data.tags
    assert tags["yolo_mlops.run_kind"] == "sweep"
    assert tags["yolo_mlops.sweep.failed_children"] == "2"
    assert tags["yolo_mlops.sweep.skipped"] == "amp_bf16"
    assert tags["yolo_mlops.sweep.concurrency_limit"] == LIMIT
    assert parent.data.params["sweep.repeats"] == "2"
    children = _children(mlflow_client, res.parent_run_id)
    assert len(children) == 6  # (baseline, batch_2, bad_optimizer) x 2; the skipped variant never ran
    by = {(c.data.tags["yolo_mlops.variant"], c.data.tags["yolo_mlops.sweep.repeat"]): c for c in children}
    assert set(by) == {(v, r) for v in ("baseline", "batch_2", "bad_optimizer") for r in ("1", "2")}
    for child in children:
        assert child.data.tags["yolo_mlops.run_kind"] == "variant"
        assert child.info.experiment_id == parent.info.experiment_id
    assert by[("batch_2", "1")].data.params["train.batch"] == "2"
    assert by[("baseline", "1")].data.params["train.batch"] == "4"


def test_children_record_the_applied_settings_the_sweep_reads_back(sweeps_done, mlflow_client):
    from yolo_mlops.run.training import AppliedSettings

    for child in _children(mlflow_client, sweeps_done["a"].parent_run_id):
        if child.info.status != "FINISHED":
            continue
        applied_tags = {k: v for k, v in child.data.tags.items() if k.startswith("yolo_mlops.applied.")}
        applied = AppliedSettings.from_tags(child.data.tags)
        assert applied is not None and applied.tags() == applied_tags  # one parser, lossless
        assert applied_tags["yolo_mlops.applied.amp"] == "False"  # CPU: AMP off, said so
        assert (applied.compiled, applied.channels_last_effective, applied.mixed_precision) == (False, False, False)


def test_interleaved_order(sweeps_done, mlflow_client):
    children = _children(mlflow_client, sweeps_done["a"].parent_run_id)
    ordered = sorted(children, key=lambda c: c.info.start_time)
    assert [int(c.data.tags["yolo_mlops.sweep.position"]) for c in ordered] == list(range(6))
    assert [c.data.tags["yolo_mlops.variant"] for c in ordered] == ["baseline", "batch_2", "bad_optimizer"] * 2


def test_failing_variant_is_isolated_and_reported(sweeps_done, mlflow_client):
    res = sweeps_done["a"]
    children = _children(mlflow_client, res.parent_run_id)
    for child in children:
        bad = child.data.tags["yolo_mlops.variant"] == "bad_optimizer"
        assert child.info.status == ("FAILED" if bad else "FINISHED")
        if bad:
            assert "NoSuchOptimizer" in child.data.tags["yolo_mlops.error"]
    row = {r.variant: r for r in res.rows}["bad_optimizer"]
    assert row.status == "failed" and row.repeats_failed == 2 and "NoSuchOptimizer" in row.reason
    assert res.failed_children == 2 and res.total_children == 6


def test_comparison_table_in_mlflow(sweeps_done, mlflow_client):
    res = sweeps_done["a"]
    parent = mlflow_client.get_run(res.parent_run_id)
    table = mlflow_client.load_table(parent.info.experiment_id, "sweep/comparison.json", run_ids=[res.parent_run_id])
    rows = {r["variant"]: r for r in table.to_dict("records")}
    assert list(rows) == ["baseline", "batch_2", "amp_bf16", "bad_optimizer"]
    assert rows["baseline"]["speedup"] == 1.0 and rows["baseline"]["repeats_ok"] == 2
    b2 = rows["batch_2"]
    assert b2["status"] == "ok" and b2["repeats_ok"] == 2
    assert b2["ci_low"] <= b2["speedup"] <= b2["ci_high"]
    assert b2["verdict"] in (stats.FASTER, stats.SLOWER, stats.SAME)
    assert b2["verdict"] == stats.verdict(b2["ci_low"], b2["ci_high"])
    assert np.isfinite(b2["loss_delta"])
    skipped = rows["amp_bf16"]
    assert skipped["status"] == "skipped" and "CUDA" in skipped["reason"]
    # the speed-up agrees with the children's own images/s (same steady steps: warm-up 1, profiler window out)
    ips = {
        v: [
            c.data.metrics["perf/images_per_s"]
            for c in _children(mlflow_client, res.parent_run_id)
            if c.data.tags["yolo_mlops.variant"] == v
        ]
        for v in ("baseline", "batch_2")
    }
    expected = np.median(ips["batch_2"]) / np.median(ips["baseline"])
    # val: false is no validation pass at all, not even ultralytics' one after the last epoch: no val/* number
    assert not [k for c in _children(mlflow_client, res.parent_run_id) for k in c.data.metrics if k.startswith("val/")]
    assert np.isnan(b2["map_delta"])
    assert b2["speedup"] == pytest.approx(expected, rel=1e-6)
    assert parent.data.metrics["sweep/speedup_batch_2"] == pytest.approx(expected, rel=1e-6)
    assert parent.data.metrics["sweep/speedup_ci_low_batch_2"] == pytest.approx(b2["ci_low"])
    assert parent.data.metrics["sweep/children_failed"] == 2


def test_report_artifacts(sweeps_done, mlflow_client, tmp_path):
    res = sweeps_done["a"]
    files = {a.path for a in mlflow_client.list_artifacts(res.parent_run_id, "sweep")}
    assert {"sweep/comparison.json", "sweep/comparison.md", "sweep/comparison.csv", "sweep/speedup.png"} <= files
    png = Path(mlflow_client.download_artifacts(res.parent_run_id, "sweep/speedup.png", str(tmp_path)))
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5000
    md = Path(mlflow_client.download_artifacts(res.parent_run_id, "sweep/comparison.md", str(tmp_path))).read_text()
    assert "`batch_2`" in md and "needs a CUDA device" in md and f"**Best: `{res.best_variant}`**" in md
    tags = mlflow_client.get_run(res.parent_run_id).data.tags
    assert tags["yolo_mlops.sweep.best_variant"] == res.best_variant and res.best_evidence


def test_prefect_artifacts(sweeps_done):
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

    with get_client(sync_client=True) as client:
        tables = client.read_artifacts(artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=["sweep-comparison"])))
        reports = client.read_artifacts(artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=["sweep-report"])))
    assert any(a.type == "table" and "batch_2" in str(a.data) for a in tables)
    assert any(sweeps_done["a"].parent_run_id in (a.data or "") for a in reports)


def test_concurrency_limit_serialises_children_of_two_sweeps(sweeps_done, mlflow_client):
    parents = [mlflow_client.get_run(sweeps_done[k].parent_run_id) for k in ("a", "b")]
    # the two sweeps really ran at the same time ...
    assert parents[0].info.start_time < parents[1].info.end_time
    assert parents[1].info.start_time < parents[0].info.end_time
    # ... yet no two children (of either sweep) overlapped: one slot, one child at a time
    children = [c for p in parents for c in _children(mlflow_client, p.info.run_id)]
    assert len(children) == 7
    spans = sorted((c.info.start_time, c.info.end_time) for c in children)
    for (_, end), (start, _) in zip(spans, spans[1:], strict=False):
        assert end <= start, spans
    b = sweeps_done["b"]
    assert b.failed_children == 0 and [r["variant"] for r in b.table] == ["baseline"]


def test_missing_concurrency_limit_is_an_error_not_unthrottled(prefect_server, mlflow_client):
    from yolo_mlops.flows.sweep import sweep

    with pytest.raises(ConfigError, match="concurrency limit 'no-such-limit' does not exist"):
        sweep(
            SweepRequest(
                base=RunSpec.model_validate({**TINY, "experiment": "sweep-nolimit"}),
                variants=["batch_2"],
                repeats=1,
                concurrency_limit="no-such-limit",
            )
        )
    assert mlflow_client.get_experiment_by_name("sweep-nolimit") is None  # failed before any run existed


def test_gpu_sweeps_default_to_the_gpu_limit(prefect_server):
    # gpu-<machine>-<index> is the default only against a Prefect server (PREFECT_API_URL, set by the fixture)
    from yolo_mlops import sweeps
    from yolo_mlops.run.environment import machine_name

    plan = sweeps.plan_sweep(RunSpec(device="1"), ["amp_bf16", "batch_8"], repeats=2, order="blocked")
    assert plan.concurrency_limit == f"gpu-{machine_name()}-1" and not plan.skipped
    assert [(c.variant, c.repeat) for c in plan.children] == [
        ("baseline", 1),
        ("baseline", 2),
        ("amp_bf16", 1),
        ("amp_bf16", 2),
        ("batch_8", 1),
        ("batch_8", 2),
    ]
    cpu = sweeps.plan_sweep(RunSpec(device="cpu"), ["amp_bf16"], repeats=1)
    assert cpu.concurrency_limit is None and "amp_bf16" in cpu.skipped and len(cpu.children) == 1
