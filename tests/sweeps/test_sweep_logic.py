"""Sweep logic without Prefect: planning, disk-cache hygiene, ineffective variants, comparison rows."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml

from yolo_mlops import sweeps
from yolo_mlops.sweeps import stats, variants
from yolo_mlops.run.config import ConfigError, RunSpec
from yolo_mlops.sweeps import Child, ChildOutcome, ChildRecord

CPU = RunSpec(device="cpu", imgsz=64, batch=4)


def test_plan_interleaves_and_puts_the_baseline_first_once():
    plan = sweeps.plan_sweep(CPU, ["batch_2", "baseline", "workers_1", "batch_2"], repeats=2)
    assert plan.variants == ["baseline", "batch_2", "workers_1"]
    assert [(c.variant, c.repeat) for c in plan.children] == [
        ("baseline", 1), ("batch_2", 1), ("workers_1", 1), ("baseline", 2), ("batch_2", 2), ("workers_1", 2)]
    assert [c.position for c in plan.children] == list(range(6))


def test_plan_rejects_bad_input_before_anything_runs():
    with pytest.raises(ConfigError, match="conflicts"):
        sweeps.plan_sweep(CPU, ["batch_2+batch_8"])
    with pytest.raises(ConfigError, match="repeats"):
        sweeps.plan_sweep(CPU, [], repeats=0)
    base = RunSpec(device="cpu", max_steps=5)
    sweeps.plan_sweep(base, [])  # the base alone is valid ...
    with pytest.raises(ConfigError, match="profiler window"):  # ... but this child's RunSpec is not
        sweeps.plan_sweep(base, ["big_window"], custom_variants={"big_window": {"profiler": {"active": 9}}})


def test_child_spec_carries_parent_kind_and_position():
    plan = sweeps.plan_sweep(CPU, ["batch_2"], repeats=1)
    spec = plan.child_spec(plan.children[1], "parent123")
    assert (spec.variant, spec.batch, spec.run_kind, spec.parent_run_id) == ("batch_2", 2, "variant", "parent123")
    assert spec.tags == {"yolo_mlops.sweep.repeat": "1", "yolo_mlops.sweep.position": "1"}
    assert spec.run_name == "batch_2 r1"


def test_disk_cache_guard_removes_only_the_npy_files_the_child_created(tmp_path):
    images = tmp_path / "ds" / "images" / "train"
    images.mkdir(parents=True)
    (images / "old.npy").write_bytes(b"x")
    data = tmp_path / "ds" / "data.yaml"
    data.write_text(yaml.safe_dump({"path": str(tmp_path / "ds"), "train": "images/train", "val": "images/train"}))
    spec = variants.apply_variant(CPU, "cache_disk")
    with sweeps.disk_cache_guard(spec, data):
        (images / "new.npy").write_bytes(b"y")
    assert sorted(p.name for p in images.iterdir()) == ["old.npy"]
    with sweeps.disk_cache_guard(CPU, data):  # other variants: nothing touched
        (images / "kept.npy").write_bytes(b"z")
    assert (images / "kept.npy").exists()


def test_silent_ultralytics_fallbacks_make_a_child_not_count():
    assert "eager" in sweeps.ineffective("compile", {"yolo_mlops.applied.compiled": "False"})
    assert sweeps.ineffective("compile_max-autotune", {"yolo_mlops.applied.compiled": "True"}) is None
    assert "channels_last" in sweeps.ineffective("amp_bf16+channels_last",
                                                 {"yolo_mlops.applied.channels_last_effective": "False"})
    assert sweeps.ineffective("batch_2", {}) is None


def _record(variant, repeat, step_ms=None, status="ok", problem=None, metrics=None, images=4):
    rep = None if step_ms is None else stats.Repeat(np.asarray(step_ms, float), images, metrics or {})
    return ChildRecord(ChildOutcome(Child(0, variant, repeat), status), rep, problem)


def test_compare_builds_rows_for_ok_partial_failed_and_skipped_variants(tmp_path):
    plan = sweeps.plan_sweep(CPU, ["batch_2", "workers_1", "amp_bf16", "imgsz_96"], repeats=2)
    loss = {"train/loss_total": 5.0}
    records = [
        _record("baseline", 1, [100, 102, 98, 101], metrics=loss), _record("baseline", 2, [99, 100, 103], metrics=loss),
        _record("batch_2", 1, [50, 51, 49], metrics={"train/loss_total": 9.0}, images=2),
        _record("batch_2", 2, [52, 50, 48], metrics={"train/loss_total": 9.2}, images=2),
        _record("workers_1", 1, [70, 71, 69], metrics=loss),
        _record("workers_1", 2, status="failed", problem="failed: OOM"),
        _record("imgsz_96", 1, status="failed", problem="failed: boom"),
        _record("imgsz_96", 2, status="failed", problem="failed: boom"),
    ]
    report = sweeps.compare(plan, records)
    rows = {r["variant"]: r for r in report.table.to_dict("records")}
    assert rows["baseline"]["speedup"] == 1.0 and rows["baseline"]["status"] == "ok"
    # half the images in half the time: the same throughput, although every step is twice as fast
    assert rows["batch_2"]["speedup"] == pytest.approx(1.0, abs=0.03)
    assert rows["batch_2"]["step_time_ratio"] == pytest.approx(0.5, rel=0.03)
    assert rows["batch_2"]["verdict"] == stats.SAME
    assert rows["batch_2"]["loss_flag"] and rows["batch_2"]["loss_delta"] == pytest.approx(4.1)
    assert rows["workers_1"]["status"] == "partial" and rows["workers_1"]["verdict"] == stats.FASTER
    assert "OOM" in rows["workers_1"]["reason"]
    assert rows["imgsz_96"]["status"] == "failed" and "boom" in rows["imgsz_96"]["reason"]
    assert rows["amp_bf16"]["status"] == "skipped" and "CUDA" in rows["amp_bf16"]["reason"]
    assert report.failed_children == 3 and report.total_children == 8
    assert report.best == "workers_1" and "workers_1" in report.best_evidence
    assert report.metrics["sweep/speedup_workers_1"] == pytest.approx(rows["workers_1"]["speedup"])
    png = sweeps.chart(report, tmp_path / "s.png")
    assert png.read_bytes()[:4] == b"\x89PNG"
    assert "| `amp_bf16` | skipped |" in report.markdown
    # workers_1 was compared on one repeat: the footer names both CI methods that were actually used
    assert "step-level bootstrap (one repeat" in report.markdown and "two-level bootstrap" in report.markdown
