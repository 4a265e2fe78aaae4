"""Our analyzer against HTA 0.5.0's own numbers on three real GPU traces (hta_reference.json)."""

from __future__ import annotations

import json
import math

import pytest

from yolo_mlops.analysis import analyze_traces
from yolo_mlops.cli.analyze import analyze_command

FIXTURES = ["a100_nccl_rank0.json.gz", "v100_compute_rank0.json.gz", "small_comm_rank0.json.gz"]
PCT_TOLERANCE = 1.0  # percentage points
TOTAL_TOLERANCE = 0.01  # relative


@pytest.fixture(scope="module")
def analyses(gpu_traces_dir):
    return {name: analyze_traces(gpu_traces_dir / name) for name in FIXTURES}


@pytest.mark.parametrize("name", FIXTURES)
def test_temporal_breakdown_matches_hta(analyses, hta_reference, name):
    ours = analyses[name].ranks[0].gpu
    ref = hta_reference[name]["temporal_breakdown"]
    assert ours is not None
    assert ours.idle_pct == pytest.approx(ref["idle_time_pctg"], abs=PCT_TOLERANCE)
    assert ours.compute_pct == pytest.approx(ref["compute_time_pctg"], abs=PCT_TOLERANCE)
    assert ours.non_compute_pct == pytest.approx(ref["non_compute_time_pctg"], abs=PCT_TOLERANCE)
    assert ours.kernel_time_us == pytest.approx(ref["kernel_time(us)"], rel=TOTAL_TOLERANCE)
    assert ours.idle_time_us == pytest.approx(ref["idle_time(us)"], rel=TOTAL_TOLERANCE)
    assert ours.compute_time_us == pytest.approx(ref["compute_time(us)"], rel=TOTAL_TOLERANCE)


@pytest.mark.parametrize("name", FIXTURES)
def test_kernel_type_breakdown_matches_hta(analyses, hta_reference, name):
    ours = {k.kernel_type: k for k in analyses[name].ranks[0].kernel_types}
    ref_rows = hta_reference[name]["kernel_type_breakdown"]
    assert set(ours) == {r["kernel_type"] for r in ref_rows if r["sum"] > 0}
    for row in ref_rows:
        mine = ours[row["kernel_type"]]
        assert mine.pct == pytest.approx(row["percentage"], abs=PCT_TOLERANCE), row["kernel_type"]
        assert mine.time_us == pytest.approx(row["sum"], rel=TOTAL_TOLERANCE, abs=1.0), row["kernel_type"]


@pytest.mark.parametrize("name", FIXTURES)
def test_idle_breakdown_matches_hta(analyses, hta_reference, name):
    ours = {(i.stream, i.idle_category): i for i in analyses[name].ranks[0].idle_breakdown}
    for row in hta_reference[name]["idle_time_breakdown"]:
        mine = ours[(row["stream"], row["idle_category"])]
        assert mine.idle_time_us == pytest.approx(row["idle_time"], rel=TOTAL_TOLERANCE, abs=1.0)
        if math.isnan(row["idle_time_ratio"]):  # HTA divides 0 by 0 on a stream that never idles
            assert row["idle_time"] == 0 and mine.idle_ratio == 0.0
        else:
            assert mine.idle_ratio == pytest.approx(row["idle_time_ratio"], abs=0.01)


@pytest.mark.parametrize("name", FIXTURES)
def test_kernel_totals_match_hta(analyses, hta_reference, name):
    """HTA folds its tail into "others"; every kernel it names must have the same total with us."""
    ours = {k.name: k.time_us for k in analyses[name].ranks[0].top_kernels}
    named = [k for k in hta_reference[name]["top_kernels"] if k["name"] != "others"]
    assert named
    for kernel in named:
        assert kernel["name"] in ours, kernel["name"][:80]
        assert ours[kernel["name"]] == pytest.approx(kernel["sum (us)"], rel=TOTAL_TOLERANCE)


def test_top_kernels_are_sorted_and_typed(analyses):
    top = analyses["small_comm_rank0.json.gz"].ranks[0].top_kernels
    assert [k.time_us for k in top] == sorted((k.time_us for k in top), reverse=True)
    assert top[0].kernel_type == "COMMUNICATION" and top[0].name.startswith("ncclKernel")


def test_json_schema_per_rank(gpu_traces_dir):
    doc = json.loads(analyze_command(str(gpu_traces_dir / "v100_compute_rank0.json.gz"), fmt="json"))
    rank = doc["ranks"][0]
    assert rank["rank"] == 0
    for key in (
        "idle_time_us",
        "compute_time_us",
        "non_compute_time_us",
        "kernel_time_us",
        "idle_pct",
        "compute_pct",
        "non_compute_pct",
    ):
        assert isinstance(rank["gpu"][key], float), key
    assert {"kernel_type", "time_us", "pct"} <= set(rank["kernel_types"][0])
    assert {"name", "time_us"} <= set(rank["top_kernels"][0])
    assert rank["step_time"]["count"] == 5
    # distributedInfo.rank of the file, and the device from deviceProperties
    assert rank["device_name"] == "Tesla V100-SXM2-32GB"


def test_text_render_names_the_breakdown(gpu_traces_dir):
    text = analyze_command(str(gpu_traces_dir / "a100_nccl_rank0.json.gz"))
    assert "idle 77.78%" in text
    assert "COMPUTATION overlapping COMMUNICATION" in text
