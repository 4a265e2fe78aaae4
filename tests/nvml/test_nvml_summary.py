"""Alignment, time-weighted statistics (hand-computed expectations) and timeline files."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest

from yolo_mlops.nvml import NvmlSummary, Timeline, align, step_history, summarise, summary_metrics, write_timeline
from yolo_mlops.nvml.summary import weighted_mean, weighted_quantile

S = 1_000_000_000  # ns per second
NAN = float("nan")


def _timeline(columns: dict[str, list[float]], gpu: list[int] | None = None) -> Timeline:
    """Five samples at t = 1, 2, 4, 5, 7 s covering intervals of 1, 1, 2, 1, 2 s.

    Interval midpoints: 0.5, 1.5, 3.0, 4.5, 6.0 s.
    """
    t_ns = np.array([1, 2, 4, 5, 7], np.int64) * S
    interval_ns = np.array([1, 1, 2, 1, 2], np.int64) * S
    return Timeline(
        backend="fake",
        start_ns=0,
        t_ns=t_ns,
        gpu=np.array(gpu or [0] * 5, np.int16),
        interval_ns=interval_ns,
        columns={k: np.array(v, np.float64) for k, v in columns.items()},
    )


# Step 0 = [0.5 s, 2.5 s] without profiler, step 1 = [2.5 s, 5.5 s] profiled.
STEP_START = [S // 2, 5 * S // 2]
STEP_END = [5 * S // 2, 11 * S // 2]
PROFILED = [False, True]

COLUMNS: dict[str, list[float]] = {
    "sm_util_pct": [10, 20, 40, 80, 100],  # last sample is outside training (midpoint 6 s)
    "tensor_util_pct": [5, NAN, 15, 25, 0],
    "power_w": [100, 100, 200, 300, 50],
    "energy_j": [1000, 1100, 1500, 1800, 1900],
    "mem_used_gib": [1, 2, 3, 2.5, 9],
    "clocks_event_mask": [0, 0x04, 0x20, 0, 0x40],  # sw power cap at row 1, sw thermal at row 2
}


def test_weighted_helpers_on_known_inputs():
    values = np.array([10.0, 20.0, 40.0, 80.0])
    weights = np.array([1.0, 1.0, 2.0, 1.0])
    assert weighted_mean(values, weights) == pytest.approx(38.0)  # plain mean would be 37.5
    assert weighted_quantile(values, weights, 0.95) == 80.0
    assert weighted_quantile(values, weights, 0.5) == 40.0  # cumulative shares .2 .4 .8 1
    assert weighted_quantile(values, weights, 0.4) == 20.0
    assert weighted_mean(np.array([NAN]), np.array([1.0])) is None


def test_align_marks_steps_outside_samples_and_profiler_window():
    aligned = align(_timeline(COLUMNS), STEP_START, STEP_END, PROFILED)
    assert aligned.step.tolist() == [0, 0, 1, 1, -1]
    assert aligned.profiler_active.tolist() == [False, False, True, True, False]
    assert aligned.in_training.tolist() == [True, True, True, True, False]


def test_align_counts_gaps_inside_a_profiled_run_as_profiled():
    tl = Timeline(
        "fake",
        0,
        np.array([16, 36, 56], np.int64),
        np.zeros(3, np.int16),
        np.array([2, 2, 2], np.int64),
        {"sm_util_pct": np.array([1.0, 2.0, 3.0])},
    )
    # steps [0,10] [20,30] profiled, [40,50] not; midpoints 15 (gap in window), 35 (gap outside), 55
    aligned = align(tl, [0, 20, 40], [10, 30, 50], [True, True, False])
    assert aligned.step.tolist() == [-1, -1, -1]
    assert aligned.profiler_active.tolist() == [True, False, False]


def test_align_accepts_steps_in_any_order_and_rejects_ragged_input():
    aligned = align(_timeline(COLUMNS), STEP_START[::-1], STEP_END[::-1], PROFILED[::-1])
    assert aligned.step.tolist() == [1, 1, 0, 0, -1]  # indices into the sequences as given
    with pytest.raises(ValueError):
        align(_timeline(COLUMNS), STEP_START, STEP_END[:1], PROFILED)


def test_summary_metrics_time_weighted_over_training_span():
    metrics = summary_metrics(align(_timeline(COLUMNS), STEP_START, STEP_END, PROFILED), images_per_step=10)

    # training rows 0-3, weights 1,1,2,1 s; row 4 (outside training) is ignored
    assert metrics["gpu/sm_util_pct_mean"] == pytest.approx(38.0)
    assert metrics["gpu/sm_util_pct_p95"] == 80.0
    assert metrics["gpu/sm_util_pct_max"] == 80.0
    assert metrics["gpu/sm_util_pct_mean_profiled"] == pytest.approx(160.0 / 3.0)  # (40*2 + 80) / 3
    assert metrics["gpu/sm_util_pct_mean_unprofiled"] == pytest.approx(15.0)
    assert metrics["gpu/tensor_util_pct_mean"] == pytest.approx(15.0)  # NaN row skipped: 60 / 4
    assert metrics["gpu/power_w_mean"] == pytest.approx(180.0)  # 900 / 5
    assert metrics["gpu/mem_used_gib_max"] == 3.0
    assert metrics["gpu/clocks_event_power_pct"] == pytest.approx(20.0)  # 1 s of 5
    assert metrics["gpu/clocks_event_thermal_pct"] == pytest.approx(40.0)  # 2 s of 5
    # energy counter: 800 J over t = 1..5 s -> 200 W, times the 5 s training span
    assert metrics["gpu/energy_j"] == pytest.approx(1000.0)
    assert metrics["gpu/energy_per_image_j"] == pytest.approx(50.0)  # 1000 J / (2 steps * 10)
    # only measured metrics appear
    assert not any(k.startswith(("gpu/dram_bw", "gpu/gpu_util", "gpu/temp")) for k in metrics)
    assert all(type(v) is float for v in metrics.values())


def test_energy_falls_back_to_integrated_power_and_sums_devices():
    columns = {k: v for k, v in COLUMNS.items() if k != "energy_j"}
    metrics = summary_metrics(align(_timeline(columns), STEP_START, STEP_END, PROFILED), images_per_step=[8, 12])
    assert metrics["gpu/energy_j"] == pytest.approx(900.0)  # 100*1 + 100*1 + 200*2 + 300*1
    assert metrics["gpu/energy_per_image_j"] == pytest.approx(45.0)

    # two GPUs with the same counter readings: energies add up
    two = _timeline({"energy_j": [1000, 1000, 1100, 1100, 0]}, gpu=[0, 1, 0, 1, 0])
    two.t_ns = np.array([1, 1, 3, 3, 7], np.int64) * S
    metrics = summary_metrics(align(two, [0], [4 * S], [False]), None)
    assert metrics["gpu/energy_j"] == pytest.approx(2 * 50.0 * 4)  # 100 J / 2 s = 50 W each, 4 s span
    assert "gpu/energy_per_image_j" not in metrics


def test_step_history_gives_per_step_time_weighted_means():
    history = step_history(align(_timeline(COLUMNS), STEP_START, STEP_END, PROFILED))
    sm = [(step, value) for step, name, value in history if name == "gpu/sm_util_pct"]
    assert sm == [(0, pytest.approx(15.0)), (1, pytest.approx(160.0 / 3.0))]
    assert {name for _, name, _ in history} == {
        "gpu/sm_util_pct",
        "gpu/tensor_util_pct",
        "gpu/power_w",
        "gpu/mem_used_gib",
    }


def test_write_timeline_csv_png_and_meta(tmp_path):
    tl = _timeline(COLUMNS)
    tl.reasons.append("tensor_util_pct: NVML answered NOT_SUPPORTED on GPU 0; metric dropped")
    paths = write_timeline(align(tl, STEP_START, STEP_END, PROFILED), tmp_path / "nvml")
    csv_path, png_path, meta_path = paths

    with csv_path.open() as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == 5
    assert list(rows[0])[:6] == ["t_s", "t_ns", "gpu", "interval_s", "step", "profiler_active"]
    assert rows[2]["t_s"] == "4.000000" and rows[2]["step"] == "1" and rows[2]["profiler_active"] == "1"
    assert rows[4]["step"] == "-1"
    assert rows[1]["tensor_util_pct"] == ""  # not measured stays empty, never 0
    assert float(rows[3]["sm_util_pct"]) == 80.0 and float(rows[0]["mem_used_gib"]) == 1.0
    assert "dram_bw_util_pct" not in rows[0]

    assert png_path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png_path.stat().st_size > 10_000
    meta = json.loads(meta_path.read_text())
    assert meta["backend"] == "fake" and meta["rows"] == 5 and "NOT_SUPPORTED" in meta["reasons"][0]


def test_write_timeline_of_an_empty_run_still_writes_files(tmp_path):
    paths = write_timeline(align(Timeline.empty("none"), [], [], []), tmp_path)
    assert [p.name for p in paths] == ["nvml_timeline.csv", "nvml_timeline.png", "nvml_meta.json"]
    assert paths[0].read_text().strip() == "t_s,t_ns,gpu,interval_s,step,profiler_active"


def test_end_to_end_with_a_real_thread_and_perf_counter_steps(tmp_path):
    import time

    from yolo_mlops.nvml import FakeNvmlBackend, FakeScript, NvmlSampler

    script = FakeScript(mode="utilization", values={"gpu_util_pct": 75.0, "power_w": 200.0})
    starts, ends, profiled = [], [], []
    with NvmlSampler(FakeNvmlBackend(script), interval_s=0.01) as sampler:
        for step in range(12):
            starts.append(time.perf_counter_ns())
            time.sleep(0.03)
            ends.append(time.perf_counter_ns())
            profiled.append(4 <= step < 8)
    aligned = align(sampler.timeline(), starts, ends, profiled)

    assert (aligned.step >= 0).any() and aligned.profiler_active.any()
    metrics = summary_metrics(aligned, images_per_step=4)
    assert metrics["gpu/gpu_util_pct_mean"] == pytest.approx(75.0)
    assert metrics["gpu/gpu_util_pct_mean_profiled"] == pytest.approx(75.0)
    assert metrics["gpu/energy_j"] > 0 and metrics["gpu/energy_per_image_j"] > 0
    assert {p.name for p in write_timeline(aligned, tmp_path)} == {
        "nvml_timeline.csv",
        "nvml_timeline.png",
        "nvml_meta.json",
    }


def test_summarise_gives_typed_fields_that_agree_with_the_metric_dict():
    columns: dict[str, list[float]] = {**COLUMNS, "dram_bw_util_pct": [50, 50, 25, 0, 100], "mem_total_gib": [16] * 5}
    aligned = align(_timeline(columns), STEP_START, STEP_END, PROFILED)
    summary = summarise(aligned, images_per_step=4)
    # rows 0-3 lie in the training span [0.5 s, 5.5 s], weighted by their intervals 1, 1, 2, 1 s
    assert summary.backend == "fake" and summary.samples == 5
    assert summary.sm_util_pct_mean == pytest.approx((10 + 20 + 2 * 40 + 80) / 5)
    assert summary.dram_bw_util_pct_mean == pytest.approx((50 + 50 + 2 * 25 + 0) / 5)
    assert summary.tensor_util_pct_mean == pytest.approx((5 + 2 * 15 + 25) / 4)  # the NaN row is not measured
    assert summary.mem_used_gib_max == 3.0 and summary.mem_total_gib == 16.0
    assert summary.gpu_util_pct_mean is None  # never sampled: unknown, not zero
    assert summary.as_metrics() == summary_metrics(aligned, images_per_step=4)
    assert summary.energy_j == summary.as_metrics()["gpu/energy_j"]
    assert summary.stats["sm_util_pct"].p95 == 80.0 and summary.stat("mem_total_gib") == 16.0
    assert summary.energy_per_image_j == pytest.approx(summary.energy_j / 8)


def test_summarise_of_a_run_without_samples_knows_nothing():
    summary = summarise(align(Timeline.empty("none"), [], [], []), images_per_step=4)
    assert summary == NvmlSummary(backend="none")
    assert summary.sm_util_pct_mean is None and summary.as_metrics() == {}


def test_clock_limit_link_and_reasons_seen_while_training():
    columns: dict[str, list[float]] = {
        **COLUMNS,
        "sm_clock_mhz": [1400, 1500, 1600, 1700, 1980],
        "sm_clock_max_mhz": [1980, 1980, 1980, 1980, 1980],
        "power_limit_w": [700, 500, 700, 700, 300],  # row 4 is outside training
        "pcie_gen": [5, 5, 4, 5, 1],
        "pcie_width": [16, 16, 16, 8, 1],
        "temp_c": [60, 70, 80, 75, 90],
    }
    summary = summarise(align(_timeline(columns), STEP_START, STEP_END, PROFILED), images_per_step=10)
    metrics = summary.as_metrics()
    assert metrics["gpu/sm_clock_mhz_mean"] == pytest.approx((1400 + 1500 + 2 * 1600 + 1700) / 5)
    assert metrics["gpu/sm_clock_max_mhz"] == 1980.0
    assert metrics["gpu/power_limit_w"] == 500.0  # the tightest enforced limit seen while training
    assert metrics["gpu/pcie_gen"] == 4.0 and metrics["gpu/pcie_width"] == 8.0  # the narrowest link
    assert metrics["gpu/temp_c_max"] == 80.0
    # each reason seen, by name, as a share of the training time (sw power cap 1 s, sw thermal 2 s of 5)
    assert metrics["gpu/clocks_event_sw_power_cap_pct"] == pytest.approx(20.0)
    assert metrics["gpu/clocks_event_sw_thermal_slowdown_pct"] == pytest.approx(40.0)
    assert "gpu/clocks_event_hw_thermal_slowdown_pct" not in metrics  # only outside training
    assert summary.clocks_events == ("sw_power_cap", "sw_thermal_slowdown")
    assert (summary.sm_clock_max_mhz, summary.power_limit_w, summary.pcie_gen, summary.pcie_width) == (
        1980.0,
        500.0,
        4.0,
        8.0,
    )


def test_reasons_not_measured_are_none_not_an_empty_list():
    columns = {k: v for k, v in COLUMNS.items() if k != "clocks_event_mask"}
    summary = summarise(align(_timeline(columns), STEP_START, STEP_END, PROFILED), images_per_step=10)
    metrics = summary.as_metrics()
    assert summary.clocks_events is None and summary.power_limit_w is None and summary.pcie_gen is None
    assert not [k for k in metrics if k.startswith(("gpu/clocks_event", "gpu/pcie_gen", "gpu/power_limit"))]
    quiet = summarise(
        align(_timeline({**COLUMNS, "clocks_event_mask": [0] * 5}), STEP_START, STEP_END, PROFILED), images_per_step=10
    )
    assert quiet.clocks_events == ()  # measured, none seen
