"""Sweep logic without Prefect: planning, disk-cache hygiene, ineffective variants, comparison rows."""

from __future__ import annotations

import numpy as np
import pytest
import yaml

from yolo_mlops import sweeps
from yolo_mlops.config import RunSpec
from yolo_mlops.errors import ConfigError
from yolo_mlops.run.training import AppliedSettings
from yolo_mlops.sweeps import Child, ChildOutcome, ChildRecord, VariantRow, stats, variants

CPU = RunSpec(device="cpu", imgsz=64, batch=4)


def test_plan_interleaves_and_puts_the_baseline_first_once():
    plan = sweeps.plan_sweep(CPU, ["batch_2", "baseline", "workers_1", "batch_2"], repeats=2)
    assert plan.variants == ["baseline", "batch_2", "workers_1"]
    assert [(c.variant, c.repeat) for c in plan.children] == [
        ("baseline", 1),
        ("batch_2", 1),
        ("workers_1", 1),
        ("baseline", 2),
        ("batch_2", 2),
        ("workers_1", 2),
    ]
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


CPU_APPLIED = AppliedSettings(
    cudnn_benchmark=False,
    matmul_tf32=False,
    cudnn_tf32=True,
    amp=False,
    channels_last=None,
    compile=False,
    compiled=False,
    channels_last_effective=False,
)


def test_applied_settings_tags_are_the_recorded_strings_and_parse_back():
    tags = CPU_APPLIED.tags()
    assert tags == {
        "yolo_mlops.applied.cudnn_benchmark": "False",
        "yolo_mlops.applied.matmul_tf32": "False",
        "yolo_mlops.applied.cudnn_tf32": "True",
        "yolo_mlops.applied.amp": "False",
        "yolo_mlops.applied.channels_last": "None",
        "yolo_mlops.applied.compile": "False",
        "yolo_mlops.applied.compiled": "False",
        "yolo_mlops.applied.channels_last_effective": "False",
    }
    assert AppliedSettings.from_tags({**tags, "yolo_mlops.variant": "baseline"}) == CPU_APPLIED
    gpu = AppliedSettings(
        cudnn_benchmark=True,
        matmul_tf32=False,
        cudnn_tf32=True,
        amp="bf16",
        channels_last=True,
        compile="max-autotune",
        compiled=True,
        channels_last_effective=True,
        pin_memory=False,
    )
    assert gpu.tags()["yolo_mlops.applied.pin_memory"] == "False"
    assert gpu.tags()["yolo_mlops.applied.amp"] == "bf16"
    assert AppliedSettings.from_tags(gpu.tags()) == gpu
    assert gpu.mixed_precision and not CPU_APPLIED.mixed_precision
    assert AppliedSettings.from_tags({"yolo_mlops.applied.compiled": "False"}) is None  # a run that never tracked
    with pytest.raises(ValueError, match="'maybe'"):
        AppliedSettings.from_tags({**tags, "yolo_mlops.applied.compiled": "maybe"})


def test_silent_ultralytics_fallbacks_make_a_child_not_count():
    from dataclasses import replace

    eager = sweeps.ineffective("compile", CPU_APPLIED)
    assert eager is not None and "eager" in eager
    assert sweeps.ineffective("compile_max-autotune", replace(CPU_APPLIED, compiled=True)) is None
    not_channels_last = sweeps.ineffective("amp_bf16+channels_last", CPU_APPLIED)
    assert not_channels_last is not None and "channels_last" in not_channels_last
    assert sweeps.ineffective("amp_bf16+channels_last", replace(CPU_APPLIED, channels_last_effective=True)) is None
    assert sweeps.ineffective("batch_2", CPU_APPLIED) is None
    assert sweeps.ineffective("compile", None) is None  # no recorded settings: nothing says it fell back


def _record(variant, repeat, step_ms=None, status="ok", problem=None, metrics=None, images=4):
    rep = None if step_ms is None else stats.Repeat(np.asarray(step_ms, float), images, metrics or {})
    return ChildRecord(ChildOutcome(Child(0, variant, repeat), status), rep, problem)


def test_compare_builds_rows_for_ok_partial_failed_and_skipped_variants(tmp_path):
    plan = sweeps.plan_sweep(CPU, ["batch_2", "workers_1", "amp_bf16", "imgsz_96"], repeats=2)
    loss = {"train/loss_total": 5.0}
    records = [
        _record("baseline", 1, [100, 102, 98, 101], metrics=loss),
        _record("baseline", 2, [99, 100, 103], metrics=loss),
        _record("batch_2", 1, [50, 51, 49], metrics={"train/loss_total": 9.0}, images=2),
        _record("batch_2", 2, [52, 50, 48], metrics={"train/loss_total": 9.2}, images=2),
        _record("workers_1", 1, [70, 71, 69], metrics=loss),
        _record("workers_1", 2, status="failed", problem="failed: OOM"),
        _record("imgsz_96", 1, status="failed", problem="failed: boom"),
        _record("imgsz_96", 2, status="failed", problem="failed: boom"),
    ]
    report = sweeps.compare(plan, records)
    assert all(isinstance(r, VariantRow) for r in report.rows)
    rows = {r.variant: r for r in report.rows}
    assert list(rows) == plan.variants
    assert rows["baseline"].speedup == 1.0 and rows["baseline"].status == "ok"
    # half the images in half the time: the same throughput, although every step is twice as fast
    assert rows["batch_2"].speedup == pytest.approx(1.0, abs=0.03)
    assert rows["batch_2"].step_time_ratio == pytest.approx(0.5, rel=0.03)
    assert rows["batch_2"].verdict == stats.SAME
    assert rows["batch_2"].loss_flag and rows["batch_2"].loss_delta == pytest.approx(4.1)
    assert rows["workers_1"].status == "partial" and rows["workers_1"].verdict == stats.FASTER
    assert "OOM" in rows["workers_1"].reason
    assert rows["imgsz_96"].status == "failed" and "boom" in rows["imgsz_96"].reason
    assert rows["amp_bf16"].status == "skipped" and "CUDA" in rows["amp_bf16"].reason
    assert np.isnan(rows["amp_bf16"].speedup) and np.isnan(rows["imgsz_96"].images_per_s)
    assert report.failed_children == 3 and report.total_children == 8
    assert report.best == "workers_1" and "workers_1" in report.best_evidence
    assert report.metrics["sweep/speedup_workers_1"] == rows["workers_1"].speedup
    assert "sweep/speedup_amp_bf16" not in report.metrics  # nothing measured, nothing logged
    png = sweeps.chart(report, tmp_path / "s.png")
    assert png.read_bytes()[:4] == b"\x89PNG"
    markdown = sweeps.markdown(plan, report)
    assert "| `amp_bf16` | skipped |" in markdown
    # workers_1 was compared on one repeat: the footer names both CI methods that were actually used
    assert "step-level bootstrap (one repeat" in markdown and "two-level bootstrap" in markdown


def test_the_mlflow_table_and_the_prefect_rows_are_the_typed_rows_at_the_edge():
    plan = sweeps.plan_sweep(CPU, ["workers_1", "amp_bf16"], repeats=1)
    report = sweeps.compare(
        plan, [_record("baseline", 1, [100, 102, 98, 101]), _record("workers_1", 1, [70.123456, 71, 69])]
    )
    frame = sweeps.frame(report.rows)
    assert list(frame.columns) == [
        "variant",
        "status",
        "repeats_ok",
        "repeats_failed",
        "steps",
        "median_step_ms",
        "images_per_s",
        "speedup",
        "ci_low",
        "ci_high",
        "step_time_ratio",
        "verdict",
        "loss_delta",
        "loss_flag",
        "map_delta",
        "map_flag",
        "gpu_util_delta_pct",
        "peak_mem_delta_gib",
        "reason",
        "note",
        "method",
    ]
    assert frame["speedup"].dtype == float and frame["loss_flag"].dtype == bool
    table = {r["variant"]: r for r in sweeps.prefect_table(report)}
    workers = {r.variant: r for r in report.rows}["workers_1"]
    assert table["workers_1"]["speedup"] == round(workers.speedup, 4) != workers.speedup
    assert table["amp_bf16"]["speedup"] is None and table["amp_bf16"]["status"] == "skipped"


def test_over_lanes_the_comparison_is_paired_within_blocks():
    """Two machines, one 1.5x slower, blocks round-robin; a failed baseline child unbalances the groups.
    The true speed-up of batch_2 is 1.2 on both machines: pairing within blocks recovers it, per lane too."""
    plan = sweeps.plan_sweep(CPU, ["batch_2"], repeats=6, pool="gpus", machines=["fast", "slow"])
    rng = np.random.default_rng(3)
    records = []
    for child in plan.children:
        lane_factor = 1.5 if child.lane.startswith("slow") else 1.0
        speed = 1.2 if child.variant == "batch_2" else 1.0
        steps = 100.0 * lane_factor / speed * rng.normal(1.0, 0.03) * rng.normal(1.0, 0.01, 20)  # run, step
        failed = child.variant == "baseline" and child.block == 0  # a fast-lane baseline lost
        outcome = ChildOutcome(child, "failed" if failed else "ok", run_id=f"r{child.position}")
        repeat = None if failed else stats.Repeat(step_ms=steps, images=np.full(20, 4.0))
        records.append(ChildRecord(outcome, repeat, "failed: lost" if failed else None))
    report = sweeps.compare(plan, records)
    row = next(r for r in report.rows if r.variant == "batch_2")
    assert row.speedup == pytest.approx(1.2, rel=0.03) and row.ci_low < 1.2 < row.ci_high
    assert row.verdict == stats.FASTER and row.method.startswith("paired by block on 2 lanes, 5 blocks")
    assert [(lane.lane, lane.blocks, lane.disagrees) for lane in row.lanes] == [
        ("fast/cpu", 2, False),
        ("slow/cpu", 3, False),
    ]
    # the groups pooled without pairing: 2 fast + 3 slow baselines against 3 + 3 variants -> biased
    naive = stats.compare(
        [r.repeat for r in records if r.repeat and r.outcome.child.variant == "baseline"],
        [r.repeat for r in records if r.repeat and r.outcome.child.variant == "batch_2"],
    )
    assert abs(naive.speedup - 1.2) > 0.05
    text = sweeps.markdown(plan, report)
    assert "## Per lane" in text and "`slow/cpu`" not in text and "slow/cpu" in text
    assert "sweep/comparison" not in text and "lanes `fast/cpu, slow/cpu` of work pool `gpus`" in text
    assert "lanes" not in sweeps.prefect_table(report)[0] and "method" in sweeps.prefect_table(report)[0]


def test_a_sweep_of_ddp_only_variants_on_a_single_process_is_refused():
    """Every requested variant a DistributedDataParallel switch and one process: only the baseline would train."""
    with pytest.raises(ConfigError, match="ddp_no_sync_accumulate: DistributedDataParallel switches, and the base"):
        sweeps.plan_sweep(CPU, ["ddp_no_sync_accumulate"])
    plan = sweeps.plan_sweep(CPU, ["ddp_no_sync_accumulate", "workers_1"])  # something else runs: skipped, said why
    assert "ddp_no_sync_accumulate" in plan.skipped
    ddp = RunSpec.model_validate({"device": "cpu", "max_steps": 5, "ddp": {"ranks": 2}})
    assert sweeps.plan_sweep(ddp, ["ddp_no_sync_accumulate"]).skipped == {}


def test_no_best_is_named_when_nothing_was_measured():
    plan = sweeps.plan_sweep(CPU, ["workers_1"], repeats=1)
    unread = "failed: no step times: MlflowException: Failed to download artifacts from path 'step_times.csv'"
    records = [
        _record("baseline", 1, status="failed", problem=unread),
        _record("workers_1", 1, status="failed", problem=unread),
    ]
    report = sweeps.compare(plan, records)
    assert report.best == "none" and report.best_evidence.startswith("no best: the baseline measured nothing")
    assert report.failed_children == 2 and [r.repeats_failed for r in report.rows] == [1, 1]
    records = [_record("baseline", 1, [100, 101, 99]), _record("workers_1", 1, status="failed", problem=unread)]
    report = sweeps.compare(plan, records)
    assert report.best == "none" and "no variant was measured" in report.best_evidence


def _steps_csv(path, step_ms: list[int], images: int = 2):
    from yolo_mlops.profiling.step_timer import StepTimes

    end = np.cumsum(np.asarray(step_ms) * 1e6).astype(np.int64)
    start = np.concatenate([[0], end[:-1]]).astype(np.int64)
    path.parent.mkdir(parents=True, exist_ok=True)
    n = len(step_ms)
    return StepTimes(start, start, end, np.zeros(n, dtype=bool), np.full(n, images)).save_csv(path)


def test_children_are_read_at_a_data_parallel_jobs_pace_and_unreadable_ones_fail(mlflow_client, tmp_path):
    """A FINISHED child without step times failed (it measured nothing); a 2-rank child logged with only its
    ranks' step times is read at its pace: each step its slowest rank's, every rank's images."""
    from yolo_mlops import names

    experiment = mlflow_client.create_experiment("collect-ddp-pace")
    parent = mlflow_client.create_run(experiment).info.run_id
    plan = sweeps.plan_sweep(
        RunSpec.model_validate({"device": "cpu", "max_steps": 5, "ddp": {"ranks": 2}}), ["workers_1"], repeats=1
    )
    outcomes = []
    for child, folder in zip(plan.children, ("baseline", "workers_1"), strict=True):
        tags = {names.PARENT_RUN_TAG: parent, names.VARIANT: child.variant, names.SWEEP_REPEAT: str(child.repeat)}
        run_id = mlflow_client.create_run(experiment, tags=tags).info.run_id
        mlflow_client.log_param(run_id, names.DDP_WORLD_SIZE, "2")
        if folder == "baseline":
            for rank, times in ((0, [50, 100, 100, 130]), (1, [60, 120, 90, 140])):
                local = _steps_csv(tmp_path / folder / f"rank{rank}" / "step_times.csv", times)
                mlflow_client.log_artifact(run_id, str(local), f"analysis/rank{rank}")
        mlflow_client.set_terminated(run_id, "FINISHED")
        outcomes.append(sweeps.ChildOutcome(child, "ok"))
    records = sweeps.collect(mlflow_client, plan, parent, outcomes)
    mlflow_client.set_terminated(parent, "FINISHED")
    base, variant = records
    assert base.repeat is not None and base.problem is None
    assert base.repeat.step_ms.tolist() == [120.0, 100.0, 140.0] and base.repeat.images.tolist() == [4, 4, 4]
    assert variant.repeat is None and variant.outcome.status == "failed"
    assert variant.problem is not None and variant.problem.startswith("failed: no step times")
    report = sweeps.compare(plan, records)
    assert report.failed_children == 1 and report.best == "none"
