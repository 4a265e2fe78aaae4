import numpy as np
import pytest

from yolo_mlops.profiling.step_timer import PerfSummary, StepTimer, StepTimes, perf_summary


def _times(step_ms, wait_ms, profiled, images=8):
    start = np.cumsum([0] + [int(s * 1e6) for s in step_ms[:-1]]).astype(np.int64)
    return StepTimes(
        start_ns=start,
        batch_ns=start + (np.array(wait_ms) * 1e6).astype(np.int64),
        end_ns=start + (np.array(step_ms) * 1e6).astype(np.int64),
        profiled=np.array(profiled),
        images=np.full(len(step_ms), images),
    )


def test_perf_summary_on_known_steps():
    # step 0 is discarded (warm-up), steps 2-3 are profiled: steady steps are 1, 4, 5.
    times = _times([900, 100, 300, 300, 200, 300], [0, 10, 50, 50, 20, 30], [False, False, True, True, False, False])
    s = perf_summary(times, discard_first=1)
    assert s is not None
    assert s.step_time_ms_p50 == pytest.approx(200.0)
    assert s.step_time_ms_p90 == pytest.approx(280.0)  # numpy linear interpolation of 100, 200, 300
    assert s.images_per_s == pytest.approx(24 / 0.6)
    assert s.data_wait_pct == pytest.approx(100 * 60 / 600)
    assert s.step_time_ms_p50_profiled == pytest.approx(300.0)
    assert s.steps_measured == 3 and s.steps_total == 6
    m = s.as_metrics()
    assert m["perf/step_time_ms_p50"] == s.step_time_ms_p50 and m["perf/steps_measured"] == 3.0
    assert m["perf/step_time_ms_p50_profiled"] == s.step_time_ms_p50_profiled and len(m) == 9


def test_perf_summary_without_steps_or_profiled_steps():
    assert perf_summary(_times([], [], []), discard_first=1) is None
    s = perf_summary(_times([100, 200], [10, 20], [False, False]), discard_first=1)
    assert isinstance(s, PerfSummary) and s.step_time_ms_p50_profiled is None
    assert "perf/step_time_ms_p50_profiled" not in s.as_metrics()


def test_timer_records_every_step_and_round_trips_csv(tmp_path):
    timer = StepTimer()
    timer.iteration_start()
    for i in range(3):
        timer.batch_start()
        timer.batch_end(profiled=i == 1, images=4)
        timer.iteration_start()
    times = timer.result()
    assert len(times) == 3 and list(times.profiled) == [False, True, False]
    assert (times.end_ns >= times.batch_ns).all() and (times.batch_ns >= times.start_ns).all()
    loaded = StepTimes.load_csv(times.save_csv(tmp_path / "steps.csv"))
    assert np.array_equal(loaded.end_ns, times.end_ns) and np.array_equal(loaded.profiled, times.profiled)
