"""Call-sequence tests of the real backend against autospec'd pynvml functions (no GPU)."""

from __future__ import annotations

import ctypes
from contextlib import ExitStack
from types import SimpleNamespace
from unittest.mock import patch

import pynvml
import pytest

from yolo_mlops.nvml import BackendUnavailableError, GpuLostError, NvmlSampler, devices, make_backend, real
from yolo_mlops.nvml.backend import DRIVER_UTIL_METRICS, GPM_METRICS
from yolo_mlops.nvml.devices import parse_cuda_visible_devices
from yolo_mlops.nvml.real import (
    FIELD_POWER_INSTANT,
    FIELD_TOTAL_ENERGY,
    GPM_METRIC_IDS,
    SAMPLE_TYPES,
    PynvmlBackend,
    gpm_sample_address,
)

PATCHED = [
    "nvmlInit",
    "nvmlDeviceGetCount",
    "nvmlDeviceGetHandleByIndex",
    "nvmlDeviceGetHandleByUUID",
    "nvmlDeviceGetHandleByPciBusId",
    "nvmlDeviceGetUUID",
    "nvmlGpmQueryDeviceSupport",
    "nvmlGpmSampleAlloc",
    "nvmlGpmSampleGet",
    "nvmlGpmMetricsGet",
    "nvmlGpmSampleFree",
    "nvmlDeviceGetSamples",
    "nvmlDeviceGetUtilizationRates",
    "nvmlDeviceGetFieldValues",
    "nvmlDeviceGetPowerUsage",
    "nvmlDeviceGetMemoryInfo",
    "nvmlDeviceGetClockInfo",
    "nvmlDeviceGetTemperature",
    "nvmlDeviceGetCurrentClocksEventReasons",
    "nvmlDeviceGetPcieThroughput",
    "nvmlDeviceGetMaxClockInfo",
    "nvmlDeviceGetEnforcedPowerLimit",
    "nvmlDeviceGetCurrPcieLinkGeneration",
    "nvmlDeviceGetCurrPcieLinkWidth",
]
UUIDS = {"h0": "GPU-aaaa0000-1111", "h1": "GPU-bbbb0000-2222"}
GIB = 1 << 30


def _error(code: int) -> pynvml.NVMLError:
    return pynvml.NVMLError(code)


def _field_values(values_by_id: dict[int, tuple[int, int, int]]):
    """side_effect for nvmlDeviceGetFieldValues: {field id: (nvmlReturn, valueType, value)}."""

    def get(handle, field_ids):
        array = (pynvml.c_nvmlFieldValue_t * len(field_ids))()
        for i, field_id in enumerate(field_ids):
            ret, value_type, value = values_by_id[field_id]
            array[i].fieldId, array[i].nvmlReturn, array[i].valueType = field_id, ret, value_type
            setattr(array[i].value, {1: "uiVal", 3: "ullVal"}[value_type], value)
        return array

    return get


@pytest.fixture
def nvml():
    """Every pynvml function the backend uses, autospec'd, answering like one Hopper GPU."""
    real._forget_nvml_init_for_tests()
    with ExitStack() as stack:
        mocks = SimpleNamespace(
            **{name: stack.enter_context(patch(f"pynvml.{name}", autospec=True)) for name in PATCHED}
        )
        mocks.nvmlDeviceGetCount.return_value = 2
        mocks.nvmlDeviceGetHandleByIndex.side_effect = lambda index: f"h{index}"
        mocks.nvmlDeviceGetUUID.side_effect = lambda handle: UUIDS[handle]

        def by_uuid(uuid):
            for handle, full in UUIDS.items():
                if full == uuid:
                    return handle
            raise _error(pynvml.NVML_ERROR_NOT_FOUND)

        mocks.nvmlDeviceGetHandleByUUID.side_effect = by_uuid
        support = pynvml.c_nvmlGpmSupport_t()
        support.isSupportedDevice = 1
        mocks.nvmlGpmQueryDeviceSupport.return_value = support
        addresses = iter(range(0x1000, 0x100000, 0x1000))
        mocks.nvmlGpmSampleAlloc.side_effect = lambda: ctypes.cast(next(addresses), pynvml.c_nvmlGpmSample_t)
        mocks.gpm_pairs = []
        mocks.gpm_unsupported = set()

        def metrics_get(request):
            mocks.gpm_pairs.append((gpm_sample_address(request.sample1), gpm_sample_address(request.sample2)))
            for i in range(request.numMetrics):
                metric = request.metrics[i]
                metric.nvmlReturn = 3 if metric.metricId in mocks.gpm_unsupported else 0
                metric.value = float(metric.metricId) + 0.5
            return request

        mocks.nvmlGpmMetricsGet.side_effect = metrics_get
        mocks.nvmlDeviceGetFieldValues.side_effect = _field_values(
            {
                FIELD_POWER_INSTANT: (0, 1, 250_000),  # mW
                FIELD_TOTAL_ENERGY: (0, 3, 5_000_000),  # mJ
            }
        )
        memory = pynvml.c_nvmlMemory_t()
        memory.total, memory.used, memory.free = 80 * GIB, 10 * GIB, 70 * GIB
        mocks.nvmlDeviceGetMemoryInfo.return_value = memory
        clocks = {pynvml.NVML_CLOCK_SM: 1980, pynvml.NVML_CLOCK_MEM: 2619}
        mocks.nvmlDeviceGetClockInfo.side_effect = lambda h, t: clocks[t]
        mocks.nvmlDeviceGetTemperature.return_value = 55
        mocks.nvmlDeviceGetCurrentClocksEventReasons.return_value = 0x04
        mocks.nvmlDeviceGetMaxClockInfo.side_effect = lambda h, t: {pynvml.NVML_CLOCK_SM: 1980}[t]
        mocks.nvmlDeviceGetEnforcedPowerLimit.return_value = 700_000  # mW
        mocks.nvmlDeviceGetCurrPcieLinkGeneration.return_value = 5
        mocks.nvmlDeviceGetCurrPcieLinkWidth.return_value = 16
        yield mocks
    real._forget_nvml_init_for_tests()


def _no_gpm(nvml) -> None:
    unsupported = pynvml.c_nvmlGpmSupport_t()
    unsupported.isSupportedDevice = 0
    nvml.nvmlGpmQueryDeviceSupport.return_value = unsupported


def test_gpm_buffers_are_swapped_each_poll(nvml):
    backend = PynvmlBackend.open([0], environ={})
    assert backend.name == "gpm" and backend.min_interval_s > 0.1
    backend.start()
    readings = [backend.read() for _ in range(3)]
    backend.close()

    a, b = 0x1000, 0x2000
    filled = [gpm_sample_address(c.args[1]) for c in nvml.nvmlGpmSampleGet.call_args_list]
    assert filled == [a, b, a, b]  # start() primes A; each poll fills the older buffer
    assert nvml.gpm_pairs == [(a, b), (b, a), (a, b)]  # always (older, newer)
    assert {gpm_sample_address(c.args[0]) for c in nvml.nvmlGpmSampleFree.call_args_list} == {a, b}
    values = readings[-1][0].values
    assert values["sm_util_pct"] == 2.5 and values["dram_bw_util_pct"] == 10.5
    assert values["nvlink_tx_mib_s"] == 61.5
    assert values["mem_used_gib"] == 10.0 and values["mem_total_gib"] == 80.0
    assert values["sm_clock_mhz"] == 1980.0 and values["mem_clock_mhz"] == 2619.0
    assert values["temp_c"] == 55.0 and values["clocks_event_mask"] == 4.0
    assert values["sm_clock_max_mhz"] == 1980.0 and values["power_limit_w"] == 700.0
    assert values["pcie_gen"] == 5.0 and values["pcie_width"] == 16.0
    nvml.nvmlDeviceGetPcieThroughput.assert_not_called()  # blocks ~20 ms: never polled
    nvml.nvmlDeviceGetSamples.assert_not_called()


def test_gpm_metric_not_supported_is_reported_and_not_requested_after_disable(nvml):
    nvml.gpm_unsupported.add(GPM_METRIC_IDS["tensor_util_pct"])
    backend = PynvmlBackend.open([0], environ={})
    backend.start()
    reading = backend.read()[0]
    assert reading.unsupported == ("tensor_util_pct",)
    assert "tensor_util_pct" not in reading.values and reading.values["sm_util_pct"] == 2.5

    backend.disable("tensor_util_pct")
    backend.read()
    request = nvml.nvmlGpmMetricsGet.call_args.args[0]
    requested = [request.metrics[i].metricId for i in range(request.numMetrics)]
    assert GPM_METRIC_IDS["tensor_util_pct"] not in requested
    assert len(requested) == len(GPM_METRIC_IDS) - 1


def _driver_ring(samples_by_type: dict[int, list[tuple[int, int]]]):
    """side_effect for nvmlDeviceGetSamples: like NVML, samples newer than the timestamp,
    NVML_ERROR_NOT_FOUND when there are none."""

    def get(handle, sampling_type, timestamp):
        fresh = [(ts, v) for ts, v in samples_by_type[sampling_type] if ts > timestamp]
        if not fresh:
            raise _error(pynvml.NVML_ERROR_NOT_FOUND)
        out = []
        for ts, v in fresh:
            sample = pynvml.c_nvmlSample_t()
            sample.timeStamp = ts
            sample.sampleValue.uiVal = v
            out.append(sample)
        return pynvml.NVML_VALUE_TYPE_UNSIGNED_INT, out

    return get


def test_buffered_samples_read_from_the_last_seen_timestamp(nvml):
    _no_gpm(nvml)
    ring = {pynvml.NVML_GPU_UTILIZATION_SAMPLES: [(1000, 99)], pynvml.NVML_MEMORY_UTILIZATION_SAMPLES: [(1000, 7)]}
    nvml.nvmlDeviceGetSamples.side_effect = _driver_ring(ring)
    backend = PynvmlBackend.open([0], environ={})
    assert backend.name == "samples"
    backend.start()  # history before start (99 %) must not leak into the first poll

    ring[pynvml.NVML_GPU_UTILIZATION_SAMPLES] += [(1100, 40), (1200, 60)]
    first = backend.read()[0]
    second = backend.read()[0]  # nothing new
    ring[pynvml.NVML_GPU_UTILIZATION_SAMPLES] += [(1300, 10)]
    third = backend.read()[0]

    gpu_calls = [
        c.args[2] for c in nvml.nvmlDeviceGetSamples.call_args_list if c.args[1] == pynvml.NVML_GPU_UTILIZATION_SAMPLES
    ]
    assert gpu_calls == [0, 0, 1000, 1200, 1200]  # open probe, start, then last-seen each poll
    assert first.values["gpu_util_pct"] == 50.0
    assert "gpu_util_pct" not in second.values  # no sample: not measured, never 0
    assert third.values["gpu_util_pct"] == 10.0
    assert "mem_util_pct" not in first.values  # memory ring got nothing new since start
    assert not first.failed and not first.unsupported


def test_utilization_rates_are_the_last_fallback(nvml):
    _no_gpm(nvml)
    nvml.nvmlDeviceGetSamples.side_effect = _error(pynvml.NVML_ERROR_NOT_SUPPORTED)
    rates = pynvml.c_nvmlUtilization_t()
    rates.gpu, rates.memory = 70, 30
    nvml.nvmlDeviceGetUtilizationRates.return_value = rates
    backend = PynvmlBackend.open([0], environ={})
    assert backend.name == "utilization"
    backend.start()
    values = backend.read()[0].values
    assert values["gpu_util_pct"] == 70.0 and values["mem_util_pct"] == 30.0
    assert "sm_util_pct" not in values


def test_power_and_energy_are_batched_in_one_field_values_call(nvml):
    backend = PynvmlBackend.open([0, 1], environ={})
    backend.start()
    readings = backend.read()
    calls = nvml.nvmlDeviceGetFieldValues.call_args_list
    assert [c.args for c in calls] == [
        ("h0", [FIELD_POWER_INSTANT, FIELD_TOTAL_ENERGY]),
        ("h1", [FIELD_POWER_INSTANT, FIELD_TOTAL_ENERGY]),
    ]
    assert readings[0].values["power_w"] == 250.0 and readings[0].values["energy_j"] == 5000.0
    nvml.nvmlDeviceGetPowerUsage.assert_not_called()


def test_power_falls_back_to_power_usage_when_the_instant_field_is_not_supported(nvml):
    nvml.nvmlDeviceGetFieldValues.side_effect = _field_values(
        {
            FIELD_POWER_INSTANT: (pynvml.NVML_ERROR_NOT_SUPPORTED, 1, 0),
            FIELD_TOTAL_ENERGY: (0, 3, 5_000_000),
        }
    )
    nvml.nvmlDeviceGetPowerUsage.return_value = 300_000
    backend = PynvmlBackend.open([0], environ={})
    backend.start()
    first, second = backend.read()[0], backend.read()[0]
    assert first.values["power_w"] == 300.0 and second.values["power_w"] == 300.0
    assert not first.unsupported
    assert nvml.nvmlDeviceGetFieldValues.call_args.args[1] == [FIELD_TOTAL_ENERGY]  # not asked again


def test_parse_cuda_visible_devices_follows_cuda_rules():
    assert parse_cuda_visible_devices(None) is None
    assert parse_cuda_visible_devices("") == []
    assert parse_cuda_visible_devices("2, 0,-1,1") == ["2", "0"]  # stops at the first invalid entry
    assert parse_cuda_visible_devices("GPU-abc,1") == ["GPU-abc", "1"]


def test_cuda_visible_devices_index_maps_to_nvml_index(nvml):
    backend = PynvmlBackend.open([0], environ={"CUDA_VISIBLE_DEVICES": "1"})
    assert backend.devices == [0]
    assert backend._devices[0].handle == "h1"
    # two NVML GPUs, index form, CUDA_DEVICE_ORDER unset: the assumption is written down
    assert any("PCI_BUS_ID" in note for note in backend.notes)


def test_cuda_visible_devices_uuids_full_and_prefix(nvml):
    backend = PynvmlBackend.open([0, 1], environ={"CUDA_VISIBLE_DEVICES": "GPU-bbbb0000-2222,GPU-aaaa"})
    assert [d.handle for d in backend._devices] == ["h1", "h0"]
    assert [c.args[0] for c in nvml.nvmlDeviceGetHandleByUUID.call_args_list] == ["GPU-bbbb0000-2222", "GPU-aaaa"]
    assert not backend.notes


def test_pci_bus_id_mapping_wins_and_invisible_device_is_unavailable(nvml):
    nvml.nvmlDeviceGetHandleByPciBusId.return_value = "h1"
    backend = PynvmlBackend.open([0], pci_bus_ids={0: "00000000:65:00.0"}, environ={"CUDA_VISIBLE_DEVICES": "0"})
    nvml.nvmlDeviceGetHandleByPciBusId.assert_called_once_with("00000000:65:00.0")
    assert backend._devices[0].handle == "h1"
    with pytest.raises(BackendUnavailableError, match="not visible"):
        PynvmlBackend.open([1], environ={"CUDA_VISIBLE_DEVICES": "0"})


def test_gpu_lost_during_read_raises_gpu_lost_and_the_sampler_stops(nvml):
    backend = PynvmlBackend.open([0], environ={})
    sampler = NvmlSampler(backend, interval_s=0.2).start(background=False)
    assert sampler.poll_once()
    nvml.nvmlDeviceGetMemoryInfo.side_effect = _error(pynvml.NVML_ERROR_GPU_IS_LOST)
    with pytest.raises(GpuLostError):
        backend.read()
    assert sampler.poll_once() is False
    sampler.stop()
    assert len(sampler.timeline()) == 1
    assert any("GPU lost" in r for r in sampler.reasons)
    assert nvml.nvmlGpmSampleFree.call_count == 2  # buffers freed on stop


def test_nvml_init_runs_once_per_process(nvml):
    first, reason = make_backend("auto", [0])
    second, _ = make_backend("real", [0])
    assert first.name == "gpm" and reason is None and second.name == "gpm"
    nvml.nvmlInit.assert_called_once_with()


def test_init_failure_auto_falls_back_to_none_and_real_raises(nvml):
    nvml.nvmlInit.side_effect = _error(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)
    backend, reason = make_backend("auto", None)
    assert backend.name == "none" and reason is not None and "NVML Shared Library Not Found" in reason
    with pytest.raises(BackendUnavailableError):
        make_backend("real", None)
    assert nvml.nvmlInit.call_count == 1  # failure remembered, not retried


def test_no_gpu_gives_null_backend_with_reason(nvml):
    nvml.nvmlDeviceGetCount.return_value = 0
    backend, reason = make_backend("auto", [0])
    assert backend.name == "none" and reason is not None and "no GPU" in reason


def test_torch_pci_bus_ids_format_matches_nvml_bus_id_strings():
    props = SimpleNamespace(pci_domain_id=0, pci_bus_id=0x65, pci_device_id=0)
    with (
        patch("torch.cuda.is_available", return_value=True),
        patch("torch.cuda.get_device_properties", return_value=props),
    ):
        assert devices.torch_pci_bus_ids([0]) == {0: "00000000:65:00.0"}
    with patch("torch.cuda.is_available", return_value=False):
        assert devices.torch_pci_bus_ids([0]) is None


def test_pynvml_ids_cover_exactly_the_mode_rules_metrics():
    # the fake imitates the real backend through backend.py's mode rules; the ids must name the same columns
    assert tuple(GPM_METRIC_IDS) == GPM_METRICS
    assert tuple(SAMPLE_TYPES) == DRIVER_UTIL_METRICS


def test_limit_and_link_queries_unsupported_or_missing_are_dropped_not_fatal(nvml, monkeypatch):
    nvml.nvmlDeviceGetEnforcedPowerLimit.side_effect = _error(pynvml.NVML_ERROR_NOT_SUPPORTED)
    nvml.nvmlDeviceGetCurrPcieLinkWidth.side_effect = _error(pynvml.NVML_ERROR_UNKNOWN)  # transient
    monkeypatch.delattr(pynvml, "nvmlDeviceGetCurrPcieLinkGeneration")  # an older nvidia-ml-py
    backend = PynvmlBackend.open([0], environ={})
    sampler = NvmlSampler(backend, interval_s=0.2)
    sampler.start(background=False)
    assert sampler.poll_once() and sampler.poll_once()
    sampler.stop()
    assert {"power_limit_w", "pcie_gen"} <= sampler.dropped_metrics
    assert "pcie_width" not in sampler.dropped_metrics and any("pcie_width" in r for r in sampler.reasons)
    timeline = sampler.timeline()
    assert "power_limit_w" not in timeline.columns and "pcie_gen" not in timeline.columns
    assert timeline.columns["sm_clock_max_mhz"].tolist() == [1980.0, 1980.0]
    assert nvml.nvmlDeviceGetEnforcedPowerLimit.call_count == 1  # not asked again once unsupported
