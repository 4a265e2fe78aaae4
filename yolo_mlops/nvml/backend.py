"""The backend interface the sampler polls, the metric catalogue, and the null backend.

A backend answers one question per poll: "what did each watched GPU do since the last
poll?". Backends never sleep and never decide about dropping metrics; the sampler does
the scheduling and the bookkeeping, so every backend (real, fake, null) behaves the
same under the sampler.
"""

from __future__ import annotations

import time
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
    MetricSpec("gpu_util_pct", "interval",
               "share of time at least one kernel ran (GPM GRAPHICS_UTIL, driver samples or "
               "nvmlDeviceGetUtilizationRates().gpu); NOT the share of busy SMs"),
    MetricSpec("sm_util_pct", "interval", "share of SMs busy (GPM SM_UTIL)"),
    MetricSpec("sm_occupancy_pct", "interval",
               "resident warps vs theoretical maximum (GPM SM_OCCUPANCY)"),
    MetricSpec("tensor_util_pct", "interval",
               "share of time SMs ran any tensor-core instruction (GPM ANY_TENSOR_UTIL)"),
    MetricSpec("dram_bw_util_pct", "interval",
               "DRAM bandwidth used vs theoretical maximum (GPM DRAM_BW_UTIL)"),
    MetricSpec("mem_util_pct", "interval",
               "share of time the memory controller was busy (driver samples or "
               "nvmlDeviceGetUtilizationRates().memory); NOT a bandwidth share"),
    MetricSpec("pcie_tx_mib_s", "interval", "PCIe traffic from the GPU (GPM PCIE_TX_PER_SEC)"),
    MetricSpec("pcie_rx_mib_s", "interval", "PCIe traffic to the GPU (GPM PCIE_RX_PER_SEC)"),
    MetricSpec("nvlink_tx_mib_s", "interval", "NVLink TX, all links (GPM NVLINK_TOTAL_TX_PER_SEC)"),
    MetricSpec("nvlink_rx_mib_s", "interval", "NVLink RX, all links (GPM NVLINK_TOTAL_RX_PER_SEC)"),
    MetricSpec("mem_used_gib", "gauge", "device memory used (nvmlDeviceGetMemoryInfo().used)"),
    MetricSpec("mem_total_gib", "gauge", "device memory total (nvmlDeviceGetMemoryInfo().total)"),
    MetricSpec("power_w", "gauge",
               "instant board power (field NVML_FI_DEV_POWER_INSTANT; fallback "
               "nvmlDeviceGetPowerUsage, a 1 s average on Ampere and newer)"),
    MetricSpec("energy_j", "counter",
               "total energy since driver load (field NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION)"),
    MetricSpec("sm_clock_mhz", "gauge", "SM clock (nvmlDeviceGetClockInfo NVML_CLOCK_SM)"),
    MetricSpec("mem_clock_mhz", "gauge", "memory clock (nvmlDeviceGetClockInfo NVML_CLOCK_MEM)"),
    MetricSpec("temp_c", "gauge", "GPU die temperature (nvmlDeviceGetTemperature)"),
    MetricSpec("clocks_event_mask", "mask",
               "clock-event (throttle) reason bits (nvmlDeviceGetCurrentClocksEventReasons)"),
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

BackendKind = Literal["auto", "real", "fake", "none"]

GPM_MIN_SAMPLE_GAP_S = 0.1  # NVML: two GPM samples must be more than 100 ms apart.


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
    min_interval_s: float  # shortest allowed poll interval (GPM: > 100 ms)

    def start(self) -> int:
        """Prime counters (first GPM sample, last-seen driver timestamp); return perf_counter_ns."""

    def read(self) -> list[DeviceReading]:
        """One poll over all watched devices. Raises GpuLostError when a GPU is gone."""

    def disable(self, metric: str) -> None:
        """Stop querying `metric` (it answered NOT_SUPPORTED)."""

    def close(self) -> None:
        """Release per-run resources (GPM sample buffers). Never shuts NVML down."""


class NullNvmlBackend:
    """No GPU or no NVML: reports `none` and produces no samples at all (never zeros)."""

    name = "none"
    min_interval_s = 0.0

    def __init__(self, reason: str | None = None) -> None:
        self.devices: list[int] = []
        self.reason = reason

    def start(self) -> int:
        return time.perf_counter_ns()

    def read(self) -> list[DeviceReading]:
        return []

    def disable(self, metric: str) -> None:
        pass

    def close(self) -> None:
        pass


def make_backend(
    kind: BackendKind,
    devices: list[int] | None,
    *,
    fake_script: object | None = None,
    pci_bus_ids: dict[int, str] | None = None,
) -> tuple[NvmlBackend, str | None]:
    """Build the backend for `kind`; return it and, when it is not what was wished, why.

    auto: the real pynvml backend when the library loads and a GPU is there, else the null
    backend plus the reason. real: the real backend or BackendUnavailableError (the user
    asked for it explicitly, so silence would be wrong). fake: FakeNvmlBackend with
    `fake_script` (a FakeScript) or a default script. none: the null backend.
    `devices` are CUDA indices as the training process sees them (None: device 0).
    `pci_bus_ids` optionally maps CUDA index -> PCI bus id (e.g. from torch) for an exact
    mapping that does not depend on CUDA_DEVICE_ORDER.
    """
    cuda_devices = list(devices) if devices else [0]
    if kind == "none":
        return NullNvmlBackend("nvml backend 'none' requested"), "nvml backend 'none' requested"
    if kind == "fake":
        from yolo_mlops.nvml.fake import FakeNvmlBackend, FakeScript

        script = fake_script if fake_script is not None else FakeScript()
        return FakeNvmlBackend(script, devices=cuda_devices), None
    if kind not in ("auto", "real"):
        raise ValueError(f"unknown nvml backend kind {kind!r}; use auto, real, fake or none")

    from yolo_mlops.nvml.real import PynvmlBackend

    try:
        return PynvmlBackend.open(cuda_devices, pci_bus_ids=pci_bus_ids), None
    except BackendUnavailableError as exc:
        if kind == "real":
            raise
        reason = f"no NVML sampling: {exc}"
        return NullNvmlBackend(reason), reason
