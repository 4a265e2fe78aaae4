"""The sampler driven by FakeNvmlBackend: the three utilisation paths, failures, bounds."""

from __future__ import annotations

import time

import numpy as np
import pytest

from yolo_mlops.nvml import (
    FakeNvmlBackend,
    FakeScript,
    NullNvmlBackend,
    NvmlSampler,
    align,
    make_backend,
    step_history,
    summary_metrics,
)


def _poll(sampler: NvmlSampler, clock, times: int, every_s: float) -> None:
    for _ in range(times):
        clock.advance(every_s)
        sampler.poll_once()


def test_gpm_path_records_interval_averages_with_their_intervals(clock):
    script = FakeScript(
        mode="gpm",
        values={"sm_util_pct": lambda t: 50.0 if t < 0.5 else 90.0, "dram_bw_util_pct": 30.0, "mem_used_gib": 2.0},
    )
    sampler = NvmlSampler(FakeNvmlBackend(script, clock=clock), interval_s=0.2).start(background=False)
    _poll(sampler, clock, 4, 0.2)
    sampler.stop()
    tl = sampler.timeline()

    assert tl.backend == "fake"
    # GPM values average the interval that ends at the poll: midpoints 0.1, 0.3, 0.5, 0.7 s
    assert tl.columns["sm_util_pct"].tolist() == [50.0, 50.0, 90.0, 90.0]
    assert tl.interval_ns.tolist() == [200_000_000] * 4
    assert set(tl.columns) == {"sm_util_pct", "dram_bw_util_pct", "mem_used_gib"}
    assert sampler.reasons == []


def test_gpm_interval_is_clamped_above_100ms_and_fake_refuses_closer_polls(clock):
    backend = FakeNvmlBackend(FakeScript(mode="gpm", values={"sm_util_pct": 70.0}), clock=clock)
    sampler = NvmlSampler(backend, interval_s=0.05)
    assert sampler.interval_s > 0.1
    assert any("interval raised" in r for r in sampler.reasons)

    # Polled by hand 50 ms apart, the fake behaves like NVML: no GPM value, a failure noted once.
    sampler.start(background=False)
    _poll(sampler, clock, 3, 0.05)
    sampler.stop()
    assert "sm_util_pct" not in sampler.timeline().columns
    assert sum("less than 100 ms" in r for r in sampler.reasons) == 1


def test_gpm_background_thread_never_polls_closer_than_100ms():
    backend = FakeNvmlBackend(FakeScript(mode="gpm", values={"sm_util_pct": 70.0}))
    with NvmlSampler(backend, interval_s=0.02) as sampler:
        time.sleep(0.5)
    tl = sampler.timeline()
    assert len(tl) >= 2
    assert np.diff(tl.t_ns).min() > 100_000_000
    assert np.all(tl.columns["sm_util_pct"] == 70.0)
    assert not any("less than 100 ms" in r for r in sampler.reasons)
    assert sampler.thread_cpu_s > 0.0
    assert not sampler.running


def test_buffered_samples_path_uses_every_driver_sample_exactly_once(clock):
    # Driver samples every 100 ms, value = 100 * seconds since start.
    script = FakeScript(
        mode="samples", values={"gpu_util_pct": lambda t: 100.0 * t, "mem_util_pct": 5.0}, driver_sample_period_s=0.1
    )
    sampler = NvmlSampler(FakeNvmlBackend(script, clock=clock), interval_s=0.25).start(background=False)
    _poll(sampler, clock, 2, 0.25)  # t=0.25: samples 0.1, 0.2; t=0.5: samples 0.3, 0.4, 0.5
    _poll(sampler, clock, 1, 0.05)  # t=0.55: no new driver sample
    sampler.stop()
    util = sampler.timeline().columns["gpu_util_pct"]

    assert util[0] == pytest.approx(15.0)
    assert util[1] == pytest.approx(40.0)  # 0.2 (at the last-seen timestamp) not counted again
    assert np.isnan(util[2])  # nothing new is "not measured", never 0
    assert "sm_util_pct" not in sampler.timeline().columns


def test_utilization_fallback_path_reports_gpu_util_not_sm_util(clock):
    script = FakeScript(mode="utilization", values={"gpu_util_pct": 80.0, "mem_util_pct": 40.0, "power_w": 200.0})
    backend = FakeNvmlBackend(script, clock=clock)
    assert backend.min_interval_s == 0.0
    sampler = NvmlSampler(backend, interval_s=0.2).start(background=False)
    _poll(sampler, clock, 3, 0.2)
    sampler.stop()
    metrics = summary_metrics(align(sampler.timeline(), [], [], []), None)

    assert metrics["gpu/gpu_util_pct_mean"] == pytest.approx(80.0)
    assert metrics["gpu/mem_util_pct_mean"] == pytest.approx(40.0)
    assert not any(k.startswith(("gpu/sm_util", "gpu/dram_bw")) for k in metrics)


def test_not_supported_mid_run_drops_the_metric_after_the_first_time(clock):
    script = FakeScript(
        mode="gpm",
        values={"sm_util_pct": 60.0, "tensor_util_pct": 20.0},
        not_supported_from_poll={"tensor_util_pct": 2},
    )
    backend = FakeNvmlBackend(script, clock=clock)
    sampler = NvmlSampler(backend, interval_s=0.2).start(background=False)
    _poll(sampler, clock, 5, 0.2)
    sampler.stop()
    tl = sampler.timeline()

    tensor = tl.columns["tensor_util_pct"]
    assert tensor[:2].tolist() == [20.0, 20.0] and np.all(np.isnan(tensor[2:]))
    assert tl.columns["sm_util_pct"].tolist() == [60.0] * 5
    assert sum("tensor_util_pct" in r and "NOT_SUPPORTED" in r for r in sampler.reasons) == 1
    assert sampler.dropped_metrics == {"tensor_util_pct"}
    asked_after_drop = [asked for poll, asked in backend.queried if poll >= 3]
    assert asked_after_drop and all("tensor_util_pct" not in asked for asked in asked_after_drop)


def test_gpu_lost_stops_sampling_cleanly_and_keeps_what_was_recorded(clock):
    backend = FakeNvmlBackend(FakeScript(mode="gpm", gpu_lost_at_poll=3), clock=clock)
    sampler = NvmlSampler(backend, interval_s=0.2).start(background=False)
    results = []
    for _ in range(5):
        clock.advance(0.2)
        results.append(sampler.poll_once())
    sampler.stop()

    assert results == [True, True, True, False, False]
    assert len(sampler.timeline()) == 3
    assert sum("GPU lost" in r for r in sampler.reasons) == 1


def test_gpu_lost_in_background_thread_ends_the_thread_on_its_own():
    backend = FakeNvmlBackend(FakeScript(mode="utilization", gpu_lost_at_poll=2))
    sampler = NvmlSampler(backend, interval_s=0.01).start()
    deadline = time.monotonic() + 3.0
    while sampler.running and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not sampler.running
    sampler.stop()
    assert len(sampler.timeline()) == 2
    assert any("GPU lost" in r for r in sampler.reasons)


def test_init_failure_is_recorded_and_produces_no_samples():
    sampler = NvmlSampler(FakeNvmlBackend(FakeScript(fail_init=True)), interval_s=0.2)
    with sampler:  # must not raise into training
        pass
    assert len(sampler.timeline()) == 0
    assert any("injected init failure" in r for r in sampler.reasons)


def test_unexpected_backend_errors_never_raise_and_stop_after_repeated_failures(clock):
    class BrokenBackend(FakeNvmlBackend):
        def read(self):
            raise ValueError("driver said something odd")

    sampler = NvmlSampler(BrokenBackend(clock=clock), interval_s=0.2).start(background=False)
    results = [sampler.poll_once() for _ in range(7)]
    sampler.stop()
    assert results == [True, True, True, True, False, False, False]
    assert sum("driver said something odd" in r for r in sampler.reasons) == 1
    assert any("failed polls in a row" in r for r in sampler.reasons)


def test_null_backend_produces_nothing_at_all():
    backend, reason = make_backend("none", None)
    assert isinstance(backend, NullNvmlBackend) and backend.name == "none" and reason
    with NvmlSampler(backend, interval_s=0.01) as sampler:
        time.sleep(0.05)
    assert any("requested" in r for r in sampler.reasons)  # the null backend says why
    aligned = align(sampler.timeline(), [1, 2], [2, 3], [False, True])
    assert len(aligned.timeline) == 0
    assert summary_metrics(aligned, 16) == {}
    assert step_history(aligned) == []


def test_ring_is_bounded_and_keeps_the_newest_rows(clock):
    script = FakeScript(mode="utilization", values={"gpu_util_pct": lambda t: round(t * 10)})
    sampler = NvmlSampler(FakeNvmlBackend(script, clock=clock), interval_s=0.1, capacity=4).start(background=False)
    _poll(sampler, clock, 10, 0.1)
    sampler.stop()
    tl = sampler.timeline()
    assert len(tl) == 4
    assert tl.columns["gpu_util_pct"].tolist() == [7.0, 8.0, 9.0, 10.0]
    assert np.all(np.diff(tl.t_ns) > 0)
    assert tl.dropped_rows == 6
    assert any("overwritten" in r for r in tl.reasons)


def test_only_one_sampler_thread_per_process():
    first = NvmlSampler(FakeNvmlBackend(FakeScript(mode="utilization")), interval_s=0.05).start()
    try:
        second = NvmlSampler(FakeNvmlBackend(FakeScript(mode="utilization")), interval_s=0.05).start()
        assert not second.running
        assert any("already running" in r for r in second.reasons)
        second.stop()  # must not free the first sampler's slot
        third = NvmlSampler(FakeNvmlBackend(FakeScript(mode="utilization")), interval_s=0.05).start()
        assert not third.running
    finally:
        first.stop()
    fourth = NvmlSampler(FakeNvmlBackend(FakeScript(mode="utilization")), interval_s=0.05).start()
    assert fourth.running
    fourth.stop()


def test_two_devices_get_separate_rows_and_intervals(clock):
    backend = FakeNvmlBackend(
        FakeScript(mode="utilization", values={"gpu_util_pct": 50.0}), devices=[0, 1], clock=clock
    )
    sampler = NvmlSampler(backend, interval_s=0.2).start(background=False)
    _poll(sampler, clock, 2, 0.2)
    sampler.stop()
    tl = sampler.timeline()
    assert tl.gpu.tolist() == [0, 1, 0, 1]
    assert tl.interval_ns.tolist() == [200_000_000] * 4


def test_stop_wakes_the_thread_without_waiting_for_the_next_poll():
    # an hour's interval: a stop that waited for the next poll would take the hour, one that wakes the thread
    # returns at once; the bound between the two leaves room for any load on the machine
    sampler = NvmlSampler(FakeNvmlBackend(FakeScript(mode="utilization")), interval_s=3600.0).start()
    started = time.perf_counter()
    sampler.stop()
    sampler.stop()  # idempotent
    assert time.perf_counter() - started < 600
    assert not sampler.running and len(sampler.timeline()) == 0


def test_fake_reports_a_power_capped_gpu_on_a_narrow_link_and_leaves_out_what_it_does_not_script(clock):
    from yolo_mlops.nvml.fake import _default_values

    values = {
        **_default_values(),
        "clocks_event_mask": float(0x04 | 0x01),
        "power_limit_w": 450.0,
        "pcie_width": 8.0,
        "sm_clock_mhz": 1410.0,
    }
    del values["pcie_gen"]  # a GPU that does not report its link generation
    backend = FakeNvmlBackend(FakeScript(mode="utilization", values=values), clock=clock)
    with NvmlSampler(backend, interval_s=0.2).start(background=False) as sampler:
        _poll(sampler, clock, 5, 0.2)
    metrics = summary_metrics(align(sampler.timeline(), [], [], []), images_per_step=None)
    assert metrics["gpu/clocks_event_sw_power_cap_pct"] == 100.0 and metrics["gpu/clocks_event_gpu_idle_pct"] == 100.0
    assert metrics["gpu/power_limit_w"] == 450.0 and metrics["gpu/pcie_width"] == 8.0
    assert metrics["gpu/sm_clock_max_mhz"] == 1980.0 and metrics["gpu/sm_clock_mhz_mean"] == 1410.0
    assert "gpu/pcie_gen" not in metrics and "gpu/clocks_event_hw_slowdown_pct" not in metrics
