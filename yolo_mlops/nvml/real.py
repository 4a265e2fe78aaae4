"""The real NVML backend on nvidia-ml-py (`import pynvml`); devices.py maps CUDA indices to handles.

Three utilisation paths, best first, chosen once at open():

- `gpm` (Hopper and newer): GPU Performance Monitoring. Two sample buffers per device;
  each poll fills the older one, asks nvmlGpmMetricsGet for the metrics between the two,
  then swaps them, so every poll yields averages over exactly the interval since the last
  poll. Samples must be more than GPM_MIN_SAMPLE_GAP_S apart (the sampler clamps its interval).
- `samples`: the driver's own ring of utilisation samples (nvmlDeviceGetSamples), read
  from the last-seen timestamp so every driver sample between polls is used once.
- `utilization`: nvmlDeviceGetUtilizationRates, the driver's last sample period only.

Memory, power, energy, clocks, temperature, clock-event reasons, the maximum SM clock, the
enforced power limit and the PCIe link generation and width are read on every path; power and
energy in one nvmlDeviceGetFieldValues call. nvmlDeviceGetPcieThroughput
is deliberately never called: it blocks for a while on every call (docs/nvml.md).

Every pynvml function is looked up as `pynvml.<name>` at call time so tests can patch it.
"""

from __future__ import annotations

import ctypes
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from yolo_mlops.compat import nvml as nvml_compat
from yolo_mlops.nvml.backend import (
    DRIVER_UTIL_METRICS,
    GPM_METRICS,
    BackendUnavailableError,
    DeviceReading,
    GpuLostError,
    mean_of_new_samples,
    min_interval_for_mode,
)
from yolo_mlops.nvml.devices import ERR_NOT_FOUND as _ERR_NOT_FOUND
from yolo_mlops.nvml.devices import map_cuda_devices

try:  # nvidia-ml-py is optional at import time: without it, auto falls back to `none`.
    import pynvml
except ImportError:  # pragma: no cover - exercised only where nvidia-ml-py is absent
    pynvml = None

_GIB = float(1 << 30)

# GPM metric ids of the GPM_METRICS columns (ids from pynvml's NVML_GPM_METRIC_* constants).
GPM_METRIC_IDS: dict[str, int] = {
    "gpu_util_pct": 1,  # NVML_GPM_METRIC_GRAPHICS_UTIL
    "sm_util_pct": 2,  # NVML_GPM_METRIC_SM_UTIL
    "sm_occupancy_pct": 3,  # NVML_GPM_METRIC_SM_OCCUPANCY
    "tensor_util_pct": 5,  # NVML_GPM_METRIC_ANY_TENSOR_UTIL
    "dram_bw_util_pct": 10,  # NVML_GPM_METRIC_DRAM_BW_UTIL
    "pcie_tx_mib_s": 20,  # NVML_GPM_METRIC_PCIE_TX_PER_SEC
    "pcie_rx_mib_s": 21,  # NVML_GPM_METRIC_PCIE_RX_PER_SEC
    "nvlink_rx_mib_s": 60,  # NVML_GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC
    "nvlink_tx_mib_s": 61,  # NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC
}

# Driver sample types of the DRIVER_UTIL_METRICS columns
# (NVML_GPU_UTILIZATION_SAMPLES, NVML_MEMORY_UTILIZATION_SAMPLES).
SAMPLE_TYPES: dict[str, int] = {"gpu_util_pct": 1, "mem_util_pct": 2}

FIELD_POWER_INSTANT = 186  # NVML_FI_DEV_POWER_INSTANT, milliwatts
FIELD_TOTAL_ENERGY = 83  # NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION, millijoules

_ERR_NOT_SUPPORTED = 3
_ERR_FUNCTION_NOT_FOUND = nvml_compat.ERR_FUNCTION_NOT_FOUND
_GPU_LOST_CODES = frozenset({15, 16, 28})  # GPU_IS_LOST, RESET_REQUIRED, GPU_NOT_FOUND

_VALUE_FIELD_BY_TYPE = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal", 6: "usVal"}


# ---------------------------------------------------------------------------
# nvmlInit once per process
# ---------------------------------------------------------------------------

_init_lock = threading.Lock()
_init_state: dict[str, object] = {"done": False, "error": None}


def ensure_nvml_initialised() -> None:
    """Call nvmlInit at most once per process; remember a failure instead of retrying.

    NVML is never shut down here: other libraries in the process (torch) may use it too.
    """
    if pynvml is None:
        raise BackendUnavailableError("nvidia-ml-py (pynvml) is not installed")
    with _init_lock:
        if _init_state["done"]:
            return
        if _init_state["error"] is not None:
            raise BackendUnavailableError(str(_init_state["error"]))
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as exc:
            _init_state["error"] = f"nvmlInit failed: {exc}"
            raise BackendUnavailableError(str(_init_state["error"])) from exc
        _init_state["done"] = True


def _forget_nvml_init_for_tests() -> None:
    with _init_lock:
        _init_state.update(done=False, error=None)


# ---------------------------------------------------------------------------
# Pure helpers
# ---------------------------------------------------------------------------


def _nvml(name: str, *older_names: str) -> Callable:
    """`pynvml.<name>` (or an older name of it), looked up at call time; a pynvml without it answers
    FUNCTION_NOT_FOUND, so the metric is dropped as unsupported instead of failing the whole poll."""
    return nvml_compat.function(pynvml, name, *older_names)


def sample_value(value_type: int, value) -> float:
    """A c_nvmlValue_t union (sample or field value) as float, read by its value type."""
    return float(getattr(value, _VALUE_FIELD_BY_TYPE.get(value_type, "uiVal")))


# ---------------------------------------------------------------------------
# The backend
# ---------------------------------------------------------------------------


@dataclass
class _Device:
    cuda_index: int
    handle: object
    gpm_older: object = None  # GPM sample taken at the previous poll (or at start())
    gpm_newer: object = None  # buffer the next poll fills
    gpm_request: Any = None  # reusable c_nvmlGpmMetricsGet_t (a ctypes struct, untyped)
    gpm_request_metrics: tuple[str, ...] = ()
    last_seen_us: dict[str, int] = field(default_factory=dict)
    power_from_usage: bool = False  # field POWER_INSTANT unsupported -> nvmlDeviceGetPowerUsage


def _gpm_supported(handle) -> bool:
    if nvml_compat.gpm_missing(pynvml):
        return False  # bindings older than the GPM API
    try:
        return bool(pynvml.nvmlGpmQueryDeviceSupport(handle).isSupportedDevice)
    except pynvml.NVMLError:
        return False  # old driver (FUNCTION_NOT_FOUND) or pre-Hopper GPU (NOT_SUPPORTED)


def _samples_supported(handle) -> bool:
    try:
        pynvml.nvmlDeviceGetSamples(handle, SAMPLE_TYPES["gpu_util_pct"], 0)
    except pynvml.NVMLError as exc:
        return exc.value == _ERR_NOT_FOUND  # supported, just no sample yet
    return True


class PynvmlBackend:
    """Real NVML backend; construct with PynvmlBackend.open()."""

    def __init__(self, devices: list[_Device], mode: str, notes: list[str]) -> None:
        self._devices = devices
        self.devices = [d.cuda_index for d in devices]
        self.name = mode  # gpm | samples | utilization
        self.notes = notes
        self.min_interval_s = min_interval_for_mode(mode)
        self._disabled: set[str] = set()

    @classmethod
    def open(
        cls,
        cuda_devices: list[int],
        *,
        pci_bus_ids: dict[int, str] | None = None,
        environ: dict[str, str] | None = None,
    ) -> PynvmlBackend:
        """Init NVML, map CUDA devices to handles, pick the best utilisation path."""
        ensure_nvml_initialised()
        env = os.environ if environ is None else environ
        try:
            mapping = map_cuda_devices(cuda_devices, env, pci_bus_ids)
            devices = [_Device(i, handle) for i, handle in mapping.handles.items()]
            if all(_gpm_supported(d.handle) for d in devices):
                mode = "gpm"
            elif all(_samples_supported(d.handle) for d in devices):
                mode = "samples"
            else:
                mode = "utilization"
        except pynvml.NVMLError as exc:
            raise BackendUnavailableError(f"NVML device lookup failed: {exc}") from exc
        notes = list(mapping.notes)
        return cls(devices, mode, notes)

    # -- lifecycle -----------------------------------------------------------

    def start(self) -> int:
        for dev in self._devices:
            if self.name == "gpm":
                if dev.gpm_older is None:
                    dev.gpm_older = pynvml.nvmlGpmSampleAlloc()
                    dev.gpm_newer = pynvml.nvmlGpmSampleAlloc()
                pynvml.nvmlGpmSampleGet(dev.handle, dev.gpm_older)
            elif self.name == "samples":
                for metric, sample_type in SAMPLE_TYPES.items():
                    dev.last_seen_us[metric] = self._latest_sample_ts(dev.handle, sample_type)
        return time.perf_counter_ns()

    def close(self) -> None:
        for dev in self._devices:
            for sample in (dev.gpm_older, dev.gpm_newer):
                if sample is not None:
                    try:
                        pynvml.nvmlGpmSampleFree(sample)
                    except pynvml.NVMLError:
                        pass  # the GPU may be gone; nothing left to free then
            dev.gpm_older = dev.gpm_newer = None

    def disable(self, metric: str) -> None:
        self._disabled.add(metric)

    @staticmethod
    def _latest_sample_ts(handle, sample_type: int) -> int:
        """Newest driver sample timestamp, so the first poll does not average old history."""
        try:
            _, samples = pynvml.nvmlDeviceGetSamples(handle, sample_type, 0)
        except pynvml.NVMLError as exc:
            if exc.value == _ERR_NOT_FOUND:
                return 0
            raise
        return max((s.timeStamp for s in samples), default=0)

    # -- polling ---------------------------------------------------------------

    def read(self) -> list[DeviceReading]:
        readings = []
        for dev in self._devices:
            reading = DeviceReading(dev.cuda_index, time.perf_counter_ns())
            if self.name == "gpm":
                self._guard(reading, GPM_METRICS, partial(self._read_gpm, dev))
            elif self.name == "samples":
                for metric, sample_type in SAMPLE_TYPES.items():
                    self._guard(reading, (metric,), partial(self._read_samples, dev, metric, sample_type))
            else:
                self._guard(reading, DRIVER_UTIL_METRICS, partial(self._read_utilization, dev))
            self._guard(reading, ("power_w", "energy_j"), partial(self._read_fields, dev))
            self._guard(reading, ("mem_used_gib", "mem_total_gib"), partial(self._read_memory, dev))
            for metric, query in (
                ("sm_clock_mhz", lambda h: pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM)),
                ("mem_clock_mhz", lambda h: pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_MEM)),
                ("temp_c", lambda h: pynvml.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU)),
                (
                    "clocks_event_mask",
                    lambda h: _nvml(
                        "nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons"
                    )(h),
                ),
                ("sm_clock_max_mhz", lambda h: _nvml("nvmlDeviceGetMaxClockInfo")(h, pynvml.NVML_CLOCK_SM)),
                ("power_limit_w", lambda h: _nvml("nvmlDeviceGetEnforcedPowerLimit")(h) / 1000.0),  # mW
                ("pcie_gen", lambda h: _nvml("nvmlDeviceGetCurrPcieLinkGeneration")(h)),
                ("pcie_width", lambda h: _nvml("nvmlDeviceGetCurrPcieLinkWidth")(h)),
            ):
                self._guard(reading, (metric,), partial(self._read_query, dev, metric, query))
            readings.append(reading)
        return readings

    def _wanted(self, metrics: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(m for m in metrics if m not in self._disabled)

    def _put(self, reading: DeviceReading, metric: str, value: float) -> None:
        if metric not in self._disabled:
            reading.values[metric] = float(value)

    def _read_query(self, dev: _Device, metric: str, query: Callable[[Any], float], reading: DeviceReading) -> None:
        """One scalar NVML query of the device handle, stored as `metric`."""
        self._put(reading, metric, query(dev.handle))

    def _guard(
        self, reading: DeviceReading, metrics: tuple[str, ...], read_fn: Callable[[DeviceReading], None]
    ) -> None:
        """Run one NVML query group; turn its NVML errors into reading bookkeeping."""
        wanted = self._wanted(metrics)
        if not wanted:
            return
        try:
            read_fn(reading)
        except pynvml.NVMLError as exc:
            if exc.value in _GPU_LOST_CODES:
                raise GpuLostError(f"GPU {reading.device}: {exc}") from exc
            if exc.value in (_ERR_NOT_SUPPORTED, _ERR_FUNCTION_NOT_FOUND):
                reading.unsupported += tuple(m for m in wanted if m not in reading.unsupported)
            else:
                reading.failed.update({m: f"{exc} (NVML error {exc.value})" for m in wanted})

    def _read_gpm(self, dev: _Device, reading: DeviceReading) -> None:
        wanted = self._wanted(GPM_METRICS)
        if dev.gpm_request is None or dev.gpm_request_metrics != wanted:
            request = pynvml.c_nvmlGpmMetricsGet_t()
            request.version = pynvml.NVML_GPM_METRICS_GET_VERSION
            request.numMetrics = len(wanted)
            for i, metric in enumerate(wanted):
                request.metrics[i].metricId = GPM_METRIC_IDS[metric]
            dev.gpm_request, dev.gpm_request_metrics = request, wanted
        pynvml.nvmlGpmSampleGet(dev.handle, dev.gpm_newer)
        # The new sample is the newest whatever happens next: swap before computing so a
        # failed nvmlGpmMetricsGet costs one interval, not a stale pair forever.
        older, newer = dev.gpm_older, dev.gpm_newer
        dev.gpm_older, dev.gpm_newer = newer, older
        request = dev.gpm_request
        request.sample1 = older
        request.sample2 = newer
        pynvml.nvmlGpmMetricsGet(request)
        for i, metric in enumerate(wanted):
            result = request.metrics[i]
            if result.nvmlReturn == 0:
                reading.values[metric] = float(result.value)
            elif result.nvmlReturn == _ERR_NOT_SUPPORTED:
                reading.unsupported += (metric,)
            else:
                reading.failed[metric] = f"nvmlGpmMetricsGet returned {result.nvmlReturn}"

    def _read_samples(self, dev: _Device, metric: str, sample_type: int, reading: DeviceReading) -> None:
        last_seen = dev.last_seen_us.get(metric, 0)
        try:
            value_type, samples = pynvml.nvmlDeviceGetSamples(dev.handle, sample_type, last_seen)
        except pynvml.NVMLError as exc:
            if exc.value == _ERR_NOT_FOUND:
                return  # no driver sample since last poll: nothing measured, nothing logged
            raise
        pairs = [(s.timeStamp, sample_value(value_type, s.sampleValue)) for s in samples]
        mean, dev.last_seen_us[metric] = mean_of_new_samples(pairs, last_seen)
        if mean is not None:
            reading.values[metric] = mean

    def _read_utilization(self, dev: _Device, reading: DeviceReading) -> None:
        rates = pynvml.nvmlDeviceGetUtilizationRates(dev.handle)
        self._put(reading, "gpu_util_pct", rates.gpu)
        self._put(reading, "mem_util_pct", rates.memory)

    def _read_fields(self, dev: _Device, reading: DeviceReading) -> None:
        fields: list[tuple[str, int]] = []
        if "power_w" not in self._disabled and not dev.power_from_usage:
            fields.append(("power_w", FIELD_POWER_INSTANT))
        if "energy_j" not in self._disabled:
            fields.append(("energy_j", FIELD_TOTAL_ENERGY))
        if fields:
            values = pynvml.nvmlDeviceGetFieldValues(dev.handle, [field_id for _, field_id in fields])
            for (metric, _), fv in zip(fields, values, strict=True):
                if fv.nvmlReturn == 0:
                    # both fields are in milli-units (mW, mJ)
                    reading.values[metric] = sample_value(fv.valueType, fv.value) / 1000.0
                elif fv.nvmlReturn in _GPU_LOST_CODES:
                    raise GpuLostError(f"GPU {reading.device}: field {metric} returned {fv.nvmlReturn}")
                elif fv.nvmlReturn == _ERR_NOT_SUPPORTED and metric == "power_w":
                    dev.power_from_usage = True
                elif fv.nvmlReturn == _ERR_NOT_SUPPORTED:
                    reading.unsupported += (metric,)
                else:
                    reading.failed[metric] = f"nvmlDeviceGetFieldValues returned {fv.nvmlReturn}"
        if dev.power_from_usage and "power_w" not in self._disabled:
            try:
                reading.values["power_w"] = pynvml.nvmlDeviceGetPowerUsage(dev.handle) / 1000.0
            except pynvml.NVMLError as exc:
                if exc.value in _GPU_LOST_CODES:
                    raise
                if exc.value == _ERR_NOT_SUPPORTED:
                    reading.unsupported += ("power_w",)
                else:
                    reading.failed["power_w"] = str(exc)

    def _read_memory(self, dev: _Device, reading: DeviceReading) -> None:
        memory = pynvml.nvmlDeviceGetMemoryInfo(dev.handle)
        self._put(reading, "mem_used_gib", memory.used / _GIB)
        self._put(reading, "mem_total_gib", memory.total / _GIB)


def gpm_sample_address(sample) -> int | None:
    """Address held by a c_nvmlGpmSample_t (lets tests check which buffer went where)."""
    return ctypes.cast(sample, ctypes.c_void_p).value
