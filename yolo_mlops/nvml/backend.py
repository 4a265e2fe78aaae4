"""What every NVML backend shares: the protocol the sampler polls, readings, errors, the metric
catalogue and the mode rules (which metrics each utilisation path reads, how often it may poll).

A backend answers one question per poll: "what did each watched GPU do since the last
poll?". Backends never sleep and never decide about dropping metrics; the sampler does
the scheduling and the bookkeeping, so every backend (real, fake, null) behaves the
same under the sampler. This module imports no backend; the backends import it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Protocol, runtime_checkable

# ---------------------------------------------------------------------------
# Metric catalogue: every timeline column, with unit in the name.
#
# kind:
#   "interval" - an average over the interval (t_prev, t] that ends at the sample time
#                (GPM metrics, averaged driver samples);
#   "gauge"    - an instantaneous reading taken at the sample time;
#   "counter"  - a monotonically increasing counter (energy), read at the sample time;
#   "mask"     - a bit mask (clock-event reasons), stored exactly in a float64 column.
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class MetricSpec:
    name: str
    kind: Literal["interval", "gauge", "counter", "mask"]
    description: str


METRIC_SPECS: tuple[MetricSpec, ...] = (
    MetricSpec(
        "gpu_util_pct",
        "interval",
        "share of time at least one kernel ran (GPM GRAPHICS_UTIL, driver samples or "
        "nvmlDeviceGetUtilizationRates().gpu); NOT the share of busy SMs",
    ),
    MetricSpec("sm_util_pct", "interval", "share of SMs busy (GPM SM_UTIL)"),
    MetricSpec("sm_occupancy_pct", "interval", "resident warps vs theoretical maximum (GPM SM_OCCUPANCY)"),
    MetricSpec(
        "tensor_util_pct", "interval", "share of time SMs ran any tensor-core instruction (GPM ANY_TENSOR_UTIL)"
    ),
    MetricSpec("dram_bw_util_pct", "interval", "DRAM bandwidth used vs theoretical maximum (GPM DRAM_BW_UTIL)"),
    MetricSpec(
        "mem_util_pct",
        "interval",
        "share of time the memory controller was busy (driver samples or "
        "nvmlDeviceGetUtilizationRates().memory); NOT a bandwidth share",
    ),
    MetricSpec("pcie_tx_mib_s", "interval", "PCIe traffic from the GPU (GPM PCIE_TX_PER_SEC)"),
    MetricSpec("pcie_rx_mib_s", "interval", "PCIe traffic to the GPU (GPM PCIE_RX_PER_SEC)"),
    MetricSpec("nvlink_tx_mib_s", "interval", "NVLink TX, all links (GPM NVLINK_TOTAL_TX_PER_SEC)"),
    MetricSpec("nvlink_rx_mib_s", "interval", "NVLink RX, all links (GPM NVLINK_TOTAL_RX_PER_SEC)"),
    MetricSpec("mem_used_gib", "gauge", "device memory used (nvmlDeviceGetMemoryInfo().used)"),
    MetricSpec("mem_total_gib", "gauge", "device memory total (nvmlDeviceGetMemoryInfo().total)"),
    MetricSpec(
        "power_w",
        "gauge",
        "instant board power (field NVML_FI_DEV_POWER_INSTANT; fallback "
        "nvmlDeviceGetPowerUsage, a 1 s average on Ampere and newer)",
    ),
    MetricSpec("energy_j", "counter", "total energy since driver load (field NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION)"),
    MetricSpec("sm_clock_mhz", "gauge", "SM clock (nvmlDeviceGetClockInfo NVML_CLOCK_SM)"),
    MetricSpec("mem_clock_mhz", "gauge", "memory clock (nvmlDeviceGetClockInfo NVML_CLOCK_MEM)"),
    MetricSpec("temp_c", "gauge", "GPU die temperature (nvmlDeviceGetTemperature)"),
    MetricSpec(
        "clocks_event_mask", "mask", "clock-event (throttle) reason bits (nvmlDeviceGetCurrentClocksEventReasons)"
    ),
    MetricSpec("sm_clock_max_mhz", "gauge", "maximum SM clock of the GPU (nvmlDeviceGetMaxClockInfo NVML_CLOCK_SM)"),
    MetricSpec("power_limit_w", "gauge", "enforced power limit (nvmlDeviceGetEnforcedPowerLimit)"),
    MetricSpec("pcie_gen", "gauge", "current PCIe link generation (nvmlDeviceGetCurrPcieLinkGeneration)"),
    MetricSpec("pcie_width", "gauge", "current PCIe link width, lanes (nvmlDeviceGetCurrPcieLinkWidth)"),
)

METRIC_NAMES: tuple[str, ...] = tuple(spec.name for spec in METRIC_SPECS)

# Clock-event reason bits (same values as pynvml.nvmlClocksEventReason*), repeated here so
# the summaries work without pynvml installed.
CLOCKS_EVENT_SW_POWER_CAP = 0x04
CLOCKS_EVENT_HW_SLOWDOWN = 0x08
CLOCKS_EVENT_SW_THERMAL = 0x20
CLOCKS_EVENT_HW_THERMAL = 0x40
CLOCKS_EVENT_HW_POWER_BRAKE = 0x80
CLOCKS_EVENT_POWER_BITS = CLOCKS_EVENT_SW_POWER_CAP | CLOCKS_EVENT_HW_POWER_BRAKE
CLOCKS_EVENT_THERMAL_BITS = CLOCKS_EVENT_SW_THERMAL | CLOCKS_EVENT_HW_THERMAL
# Every reason bit by name (nvmlClocksEventReason*): the per-reason shares `gpu/clocks_event_<name>_pct`.
CLOCKS_EVENT_REASONS: dict[str, int] = {
    "gpu_idle": 0x01,
    "applications_clocks_setting": 0x02,
    "sw_power_cap": CLOCKS_EVENT_SW_POWER_CAP,
    "hw_slowdown": CLOCKS_EVENT_HW_SLOWDOWN,
    "sync_boost": 0x10,
    "sw_thermal_slowdown": CLOCKS_EVENT_SW_THERMAL,
    "hw_thermal_slowdown": CLOCKS_EVENT_HW_THERMAL,
    "hw_power_brake_slowdown": CLOCKS_EVENT_HW_POWER_BRAKE,
    "display_clock_setting": 0x100,
}


BackendKind = Literal["auto", "real", "fake", "none"]

GPM_MIN_SAMPLE_GAP_S = 0.1  # NVML: two GPM samples must be more than this many seconds apart.


@dataclass
class DeviceReading:
    """What one poll saw on one GPU.

    `values` holds only metrics that were measured in this poll; a metric with nothing
    new (e.g. no driver sample since the last poll) is simply absent, never zero.
    `unsupported` names metrics NVML answered NOT_SUPPORTED for (the sampler drops them);
    `failed` maps a metric to a transient error message (the sampler records it once).
    """

    device: int  # CUDA device index as the training process sees it
    t_ns: int  # time.perf_counter_ns() when the reading was taken
    values: dict[str, float] = field(default_factory=dict)
    unsupported: tuple[str, ...] = ()
    failed: dict[str, str] = field(default_factory=dict)


class GpuLostError(RuntimeError):
    """The GPU fell off the bus / needs a reset: sampling must stop."""


class BackendUnavailableError(RuntimeError):
    """A backend explicitly asked for cannot run here (no library, no GPU, init failed)."""


@runtime_checkable
class NvmlBackend(Protocol):
    """What the sampler needs from a backend."""

    name: str  # value of the MLflow tag yolo_mlops.nvml_backend
    devices: list[int]  # CUDA device indices being watched
    min_interval_s: float  # shortest allowed poll interval (GPM: > GPM_MIN_SAMPLE_GAP_S)

    def start(self) -> int:
        """Prime counters (first GPM sample, last-seen driver timestamp); return perf_counter_ns."""

    def read(self) -> list[DeviceReading]:
        """One poll over all watched devices. Raises GpuLostError when a GPU is gone."""

    def disable(self, metric: str) -> None:
        """Stop querying `metric` (it answered NOT_SUPPORTED)."""

    def close(self) -> None:
        """Release per-run resources (GPM sample buffers). Never shuts NVML down."""


# ---------------------------------------------------------------------------
# Mode rules, shared by the pynvml backend and the fake that imitates it.
#
# gpm:         GPU Performance Monitoring (Hopper and newer), interval averages;
# samples:     the driver's ring of utilisation samples (nvmlDeviceGetSamples);
# utilization: nvmlDeviceGetUtilizationRates, the driver's last sample period only.
# ---------------------------------------------------------------------------

Mode = Literal["gpm", "samples", "utilization"]

GPM_METRICS: tuple[str, ...] = (
    "gpu_util_pct",
    "sm_util_pct",
    "sm_occupancy_pct",
    "tensor_util_pct",
    "dram_bw_util_pct",
    "pcie_tx_mib_s",
    "pcie_rx_mib_s",
    "nvlink_rx_mib_s",
    "nvlink_tx_mib_s",
)
DRIVER_UTIL_METRICS: tuple[str, ...] = ("gpu_util_pct", "mem_util_pct")  # samples and utilization paths
COMMON_METRICS: tuple[str, ...] = (
    "mem_used_gib",
    "mem_total_gib",
    "power_w",
    "energy_j",
    "sm_clock_mhz",
    "mem_clock_mhz",
    "temp_c",
    "clocks_event_mask",
    "sm_clock_max_mhz",
    "power_limit_w",
    "pcie_gen",
    "pcie_width",
)


def metrics_for_mode(mode: str) -> tuple[str, ...]:
    """The columns a backend in `mode` (gpm | samples | utilization) reads."""
    if mode == "gpm":
        return GPM_METRICS + COMMON_METRICS
    return DRIVER_UTIL_METRICS + COMMON_METRICS


def min_interval_for_mode(mode: str) -> float:
    """GPM needs more than GPM_MIN_SAMPLE_GAP_S between samples; a small margin keeps timer jitter out."""
    return GPM_MIN_SAMPLE_GAP_S + 0.005 if mode == "gpm" else 0.0


def mean_of_new_samples(samples: list[tuple[int, float]], last_seen_us: int) -> tuple[float | None, int]:
    """Mean of the driver samples newer than `last_seen_us` and the new last-seen timestamp.

    Driver samples come at a fixed rate, so their plain mean is the time-weighted mean of
    the interval they cover. None when there is nothing new (never a made-up zero).
    """
    fresh = [(ts, v) for ts, v in samples if ts > last_seen_us]
    if not fresh:
        return None, last_seen_us
    return sum(v for _, v in fresh) / len(fresh), max(ts for ts, _ in fresh)
