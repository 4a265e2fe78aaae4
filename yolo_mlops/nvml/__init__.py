"""NVML sampling for profiled training runs.

    backend.py   protocol, readings, errors, metric catalogue, mode rules (imports no backend)
    devices.py   CUDA index -> NVML handle (PCI bus id, UUID, CUDA_VISIBLE_DEVICES)
    real.py      the pynvml backend (gpm | samples | utilization)
    fake.py      FakeNvmlBackend: scripted readings, backend name `fake`
    null.py      NullNvmlBackend: backend `none`, no samples
    sampler.py   the background thread that polls a backend into a bounded timeline
    alignment.py each sample's training step and profiler state (AlignedTimeline)
    summary.py   NvmlSummary (the gpu/* statistics) and the per-step history MLflow charts
    timeline_files.py  the aligned timeline as the run's nvml/ files: CSV, plot, JSON sidecar

`make_backend` picks the backend; how the training code uses them together: docs/nvml.md.
"""

from __future__ import annotations

from yolo_mlops.nvml.alignment import AlignedTimeline, align
from yolo_mlops.nvml.backend import (
    METRIC_NAMES,
    METRIC_SPECS,
    BackendKind,
    BackendUnavailableError,
    DeviceReading,
    GpuLostError,
    NvmlBackend,
)
from yolo_mlops.nvml.devices import torch_pci_bus_ids
from yolo_mlops.nvml.fake import FakeNvmlBackend, FakeScript
from yolo_mlops.nvml.null import NullNvmlBackend
from yolo_mlops.nvml.sampler import DEFAULT_CAPACITY, DEFAULT_INTERVAL_S, NvmlSampler, Timeline
from yolo_mlops.nvml.summary import NvmlSummary, step_history, summarise, summary_metrics
from yolo_mlops.nvml.timeline_files import write_timeline


def make_backend(
    kind: BackendKind,
    devices: list[int] | None,
    *,
    fake_script: FakeScript | None = None,
    pci_bus_ids: dict[int, str] | None = None,
) -> tuple[NvmlBackend, str | None]:
    """Build the backend for `kind`; return it and, when it is not what was wished, why.

    auto: the real pynvml backend when the library loads and a GPU is there, else the null
    backend plus the reason. real: the real backend or BackendUnavailableError (the user
    asked for it explicitly, so silence would be wrong). fake: FakeNvmlBackend with
    `fake_script` or a default script. none: the null backend.
    `devices` are CUDA indices as the training process sees them (None: device 0).
    `pci_bus_ids` optionally maps CUDA index -> PCI bus id (e.g. from torch) for an exact
    mapping that does not depend on CUDA_DEVICE_ORDER.
    """
    cuda_devices = list(devices) if devices else [0]
    if kind == "none":
        return NullNvmlBackend("nvml backend 'none' requested"), "nvml backend 'none' requested"
    if kind == "fake":
        return FakeNvmlBackend(fake_script, devices=cuda_devices), None
    if kind not in ("auto", "real"):
        raise ValueError(f"unknown nvml backend kind {kind!r}; use auto, real, fake or none")

    from yolo_mlops.nvml.real import PynvmlBackend  # imports pynvml: only when a real backend is wanted

    try:
        return PynvmlBackend.open(cuda_devices, pci_bus_ids=pci_bus_ids), None
    except BackendUnavailableError as exc:
        if kind == "real":
            raise
        reason = f"no NVML sampling: {exc}"
        return NullNvmlBackend(reason), reason


__all__ = [
    "METRIC_NAMES",
    "METRIC_SPECS",
    "BackendKind",
    "BackendUnavailableError",
    "DeviceReading",
    "GpuLostError",
    "NullNvmlBackend",
    "NvmlBackend",
    "make_backend",
    "FakeNvmlBackend",
    "FakeScript",
    "DEFAULT_CAPACITY",
    "DEFAULT_INTERVAL_S",
    "NvmlSampler",
    "Timeline",
    "AlignedTimeline",
    "NvmlSummary",
    "align",
    "step_history",
    "summarise",
    "summary_metrics",
    "write_timeline",
    "torch_pci_bus_ids",
]
