"""NVML sampling for profiled training runs (issue 3).

Typical use by the training code:

    backend, reason = make_backend("auto", devices=[0])      # tag yolo_mlops.nvml_backend = backend.name
    with NvmlSampler(backend, interval_s=0.2) as sampler:
        train()                                              # steps timed with perf_counter_ns
    aligned = align(sampler.timeline(), step_start_ns, step_end_ns, profiler_active)
    metrics = summary_metrics(aligned, images_per_step)      # {"gpu/sm_util_pct_mean": ...}
    history = step_history(aligned)                          # [(step, "gpu/sm_util_pct", v), ...]
    paths = write_timeline(aligned, out_dir)                 # CSV + PNG + JSON -> artifacts nvml/
"""

from yolo_mlops.nvml.backend import (
    METRIC_NAMES,
    METRIC_SPECS,
    BackendUnavailableError,
    DeviceReading,
    GpuLostError,
    NullNvmlBackend,
    NvmlBackend,
    make_backend,
)
from yolo_mlops.nvml.fake import FakeNvmlBackend, FakeScript
from yolo_mlops.nvml.real import torch_pci_bus_ids
from yolo_mlops.nvml.sampler import DEFAULT_CAPACITY, DEFAULT_INTERVAL_S, NvmlSampler, Timeline
from yolo_mlops.nvml.summary import (
    AlignedTimeline,
    align,
    step_history,
    summary_metrics,
    write_timeline,
)

__all__ = [
    "METRIC_NAMES", "METRIC_SPECS", "BackendUnavailableError", "DeviceReading", "GpuLostError",
    "NullNvmlBackend", "NvmlBackend", "make_backend", "FakeNvmlBackend", "FakeScript",
    "DEFAULT_CAPACITY", "DEFAULT_INTERVAL_S", "NvmlSampler", "Timeline", "AlignedTimeline",
    "align", "step_history", "summary_metrics", "write_timeline", "torch_pci_bus_ids",
]
