"""FakeNvmlBackend: scripted GPU readings for tests and `--nvml-backend fake`.

Its backend name is always `fake`, so a run that used it can never be mistaken for a
measured one. It imitates the three real paths at the level the sampler sees them:

- mode "gpm": GPM metric set; refuses (reports a failure) when polled less than
  GPM_MIN_SAMPLE_GAP_S after the previous poll, as NVML does;
- mode "samples": a fake driver produces utilisation samples every
  `driver_sample_period_s`; each poll averages the ones newer than the last-seen
  timestamp with the rule the real backend uses (backend.mean_of_new_samples), so
  nothing is lost or doubled;
- mode "utilization": gpu/mem utilisation read at the poll time.

Failures can be injected: init failure at start(), NOT_SUPPORTED for chosen metrics from
a chosen poll on, and GPU lost at a chosen poll.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from yolo_mlops.nvml.backend import (
    DRIVER_UTIL_METRICS,
    GPM_METRICS,
    GPM_MIN_SAMPLE_GAP_S,
    BackendUnavailableError,
    DeviceReading,
    GpuLostError,
    Mode,
    mean_of_new_samples,
    metrics_for_mode,
    min_interval_for_mode,
)

ValueScript = float | Callable[[float], float]  # constant, or f(seconds since start())


def _default_values() -> dict[str, ValueScript]:
    # A recognisable, clearly synthetic waveform: a square-ish load, high for a second, low for the next.
    def load(t: float) -> float:
        return 85.0 if math.sin(math.pi * t) >= 0 else 35.0

    return {
        "gpu_util_pct": lambda t: min(100.0, load(t) + 10.0),
        "sm_util_pct": load,
        "sm_occupancy_pct": lambda t: load(t) * 0.5,
        "tensor_util_pct": lambda t: load(t) * 0.4,
        "dram_bw_util_pct": lambda t: load(t) * 0.6,
        "mem_util_pct": lambda t: load(t) * 0.6,
        "pcie_tx_mib_s": 50.0,
        "pcie_rx_mib_s": 400.0,
        "nvlink_tx_mib_s": 0.0,
        "nvlink_rx_mib_s": 0.0,
        "mem_used_gib": lambda t: 4.0 + min(t, 10.0) * 0.2,
        "mem_total_gib": 80.0,
        "power_w": lambda t: 100.0 + 3.0 * load(t),
        "energy_j": lambda t: 1.0e6 + 300.0 * t,  # counter: rises at about the mean of power_w
        "sm_clock_mhz": 1980.0,
        "mem_clock_mhz": 2619.0,
        "temp_c": lambda t: 40.0 + min(t, 30.0),
        "clocks_event_mask": 0.0,
        "sm_clock_max_mhz": 1980.0,
        "power_limit_w": 700.0,
        "pcie_gen": 5.0,
        "pcie_width": 16.0,
    }


@dataclass
class FakeScript:
    mode: Mode = "gpm"
    values: dict[str, ValueScript] = field(default_factory=_default_values)
    fail_init: bool = False
    not_supported_from_poll: dict[str, int] = field(default_factory=dict)  # metric -> first poll (0-based)
    gpu_lost_at_poll: int | None = None
    driver_sample_period_s: float = 1.0 / 6.0


def _value_at(script: ValueScript, t_s: float) -> float:
    return float(script(t_s)) if callable(script) else float(script)


class FakeNvmlBackend:
    """Scripted, clearly-named fake NVML backend (tag value `fake`)."""

    name = "fake"

    def __init__(
        self,
        script: FakeScript | None = None,
        *,
        devices: list[int] | None = None,
        clock: Callable[[], int] = time.perf_counter_ns,
    ) -> None:
        self.script = script or FakeScript()
        self.devices = list(devices) if devices else [0]
        self.mode = self.script.mode
        self.min_interval_s = min_interval_for_mode(self.mode)
        self._clock = clock
        self._disabled: set[str] = set()
        self._start_ns: int | None = None
        self._prev_ns: int | None = None
        self._poll = 0
        self._last_seen_us: dict[tuple[int, str], int] = {}
        # (poll, metrics asked) for tests; bounded like the sampler, since `--nvml-backend fake` may run for hours
        self.queried: deque[tuple[int, tuple[str, ...]]] = deque(maxlen=4096)
        self.metrics = metrics_for_mode(self.mode)

    def start(self) -> int:
        if self.script.fail_init:
            raise BackendUnavailableError("fake NVML: injected init failure")
        self._start_ns = self._prev_ns = self._clock()
        self._last_seen_us = {(d, m): 0 for d in self.devices for m in DRIVER_UTIL_METRICS}
        return self._start_ns

    def disable(self, metric: str) -> None:
        self._disabled.add(metric)

    def close(self) -> None:
        pass

    def _seconds(self, t_ns: int) -> float:
        return (t_ns - (self._start_ns or 0)) / 1e9

    def _driver_samples(self, metric: str, since_us: int, now_ns: int) -> list[tuple[int, float]]:
        """Fake driver ring: samples at k * period after start(), timestamps in µs.

        Like nvmlDeviceGetSamples it returns the samples newer than `since_us` (plus the
        one at `since_us`, to prove the caller filters by the last-seen timestamp itself).
        """
        period_us = int(self.script.driver_sample_period_s * 1e6)
        now_us = int(self._seconds(now_ns) * 1e6)
        first = max(period_us, (since_us // period_us) * period_us)
        return [(ts, _value_at(self.script.values[metric], ts / 1e6)) for ts in range(first, now_us + 1, period_us)]

    def read(self) -> list[DeviceReading]:
        if self._start_ns is None or self._prev_ns is None:  # start() sets both together
            raise RuntimeError("FakeNvmlBackend.read() before start()")
        poll = self._poll
        self._poll += 1
        if self.script.gpu_lost_at_poll is not None and poll >= self.script.gpu_lost_at_poll:
            raise GpuLostError("fake NVML: injected GPU lost (NVML_ERROR_GPU_IS_LOST)")
        now_ns = self._clock()
        prev_ns, self._prev_ns = self._prev_ns, now_ns
        asked = tuple(m for m in self.metrics if m not in self._disabled and m in self.script.values)
        self.queried.append((poll, asked))
        readings = []
        for device in self.devices:
            reading = DeviceReading(device, now_ns)
            for metric in asked:
                first_unsupported = self.script.not_supported_from_poll.get(metric)
                if first_unsupported is not None and poll >= first_unsupported:
                    reading.unsupported += (metric,)
                elif self.mode == "gpm" and metric in GPM_METRICS:
                    if (now_ns - prev_ns) / 1e9 <= GPM_MIN_SAMPLE_GAP_S:
                        reading.failed[metric] = "GPM samples less than 100 ms apart"
                    else:  # average over the interval, taken at its midpoint
                        midpoint_s = self._seconds((prev_ns + now_ns) // 2)
                        reading.values[metric] = _value_at(self.script.values[metric], midpoint_s)
                elif self.mode == "samples" and (device, metric) in self._last_seen_us:
                    last_seen = self._last_seen_us[(device, metric)]
                    mean, self._last_seen_us[(device, metric)] = mean_of_new_samples(
                        self._driver_samples(metric, last_seen, now_ns), last_seen
                    )
                    if mean is not None:
                        reading.values[metric] = mean
                else:
                    reading.values[metric] = _value_at(self.script.values[metric], self._seconds(now_ns))
            readings.append(reading)
        return readings
