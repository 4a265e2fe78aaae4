"""A data-parallel job's step times: each step its slowest rank's, with every rank's images."""

from __future__ import annotations

import numpy as np
import pytest

from yolo_mlops.profiling.job_pace import job_pace
from yolo_mlops.profiling.step_timer import StepTimes, perf_summary


def _times(step_ms: list[float], wait_ms: list[float], profiled: list[bool], images: int = 2) -> StepTimes:
    end = np.cumsum(np.asarray(step_ms) * 1e6).astype(np.int64)
    start = np.concatenate([[0], end[:-1]]).astype(np.int64)
    batch = start + (np.asarray(wait_ms) * 1e6).astype(np.int64)
    return StepTimes(start, batch, end, np.asarray(profiled), np.full(len(step_ms), images))


def test_each_step_is_its_slowest_ranks_with_every_ranks_images():
    a = _times([100, 200, 100, 100], [1, 50, 1, 1], [False, True, False, False])
    b = _times([150, 100, 120], [30, 1, 2], [False, False, False])  # a rank cut short: 3 steps
    pace = job_pace([a, b])
    assert pace.step_ms.tolist() == [150.0, 200.0, 120.0]
    assert pace.data_wait_ms.tolist() == [30.0, 50.0, 2.0]  # the slowest rank's own wait
    assert pace.images.tolist() == [4, 4, 4] and pace.profiled.tolist() == [False, True, False]
    summary = perf_summary(pace, discard_first=0)
    assert summary is not None
    # no rank's median is above the job's, and its throughput is every image at that pace
    assert summary.step_time_ms_p50 == pytest.approx(135.0)
    assert summary.images_per_s == pytest.approx(8 / 0.270)
    with pytest.raises(ValueError):
        job_pace([])
