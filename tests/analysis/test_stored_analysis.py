"""A stored trace_analysis.json reads back into TraceAnalysis, older files (fewer fields) included, and the
trends attribution takes a run's step phases from it."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from yolo_mlops.analysis.model import RankAnalysis, StepSummary, TraceAnalysis
from yolo_mlops.analysis.stored import StoredAnalysisError, trace_analysis_from_json
from yolo_mlops.analysis.trace_analysis import analyze_traces
from yolo_mlops.labels import PHASE_LABEL_PREFIX as PHASE_PREFIX
from yolo_mlops.trends.attribution import profile_from_tables


@pytest.fixture(scope="module")
def stored(gpu_traces_dir) -> TraceAnalysis:
    return analyze_traces(gpu_traces_dir / "v100_compute_rank0.json.gz")


def test_round_trip_gives_the_same_analysis(stored):
    back = trace_analysis_from_json(stored.to_json())
    assert isinstance(back, TraceAnalysis) and isinstance(back.ranks[0], RankAnalysis)
    assert back.ranks[0].steps and isinstance(back.ranks[0].steps[0], StepSummary)
    assert back.to_json() == stored.to_json()


def test_an_older_file_reads_with_its_missing_fields_as_not_measured(stored):
    old = json.loads(stored.to_json())
    for rank in old["ranks"]:
        for key in (
            "steps",
            "gpu_idle_by_cause",
            "step_by_phase",
            "device_compute_capability",
            "memory",
            "window_steps",
        ):
            rank.pop(key)
    rank = trace_analysis_from_json(json.dumps(old)).ranks[0]
    assert rank.steps == [] and rank.gpu_idle_by_cause == [] and rank.window_steps == 0
    assert rank.device_compute_capability is None and rank.memory is None


def test_a_file_without_required_fields_is_unreadable():
    with pytest.raises(StoredAnalysisError):
        trace_analysis_from_json('{"ranks": []}')  # no source
    with pytest.raises(StoredAnalysisError):
        trace_analysis_from_json("not json")


def test_attribution_reads_the_phases_of_a_stored_analysis(stored):
    rank = stored.ranks[0]
    rank.steps = [
        StepSummary(0, 0.0, 10_000.0, {PHASE_PREFIX + "forward_loss": 4_000.0}, None, None, None),
        StepSummary(
            1,
            10_000.0,
            20_000.0,
            {PHASE_PREFIX + "forward_loss": 2_000.0, PHASE_PREFIX + "backward": 6_000.0},
            None,
            None,
            None,
        ),
    ]
    host = pd.DataFrame(
        {"name": ["ProfilerStep*", "aten::conv2d"], "calls": [2, 8], "self_cpu_time_us": [0.0, 4_000.0]}
    )
    profile = profile_from_tables("run", host, None, stored.to_json(), None, 99.0)
    assert profile is not None
    assert profile.steps == 2 and profile.step_ms == pytest.approx(15.0)
    assert profile.entries[("phase", "forward_loss")] == pytest.approx(3.0)
    assert profile.entries[("phase", "backward")] == pytest.approx(3.0)  # absent in step 0: 0 there
    assert profile.entries[("operator", "aten::conv2d")] == pytest.approx(2.0)
    # an unreadable analysis leaves the phases out, the tables still count
    broken = profile_from_tables("run", host, None, "{}", None, 99.0)
    assert broken is not None
    assert broken.step_ms == 99.0 and ("operator", "aten::conv2d") in broken.entries
