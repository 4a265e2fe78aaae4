"""CUDA device index (as the training process sees it) -> NVML device handle.

CUDA and NVML number GPUs differently: CUDA_VISIBLE_DEVICES renumbers and reorders them, and CUDA
enumerates fastest-first unless CUDA_DEVICE_ORDER=PCI_BUS_ID, while NVML always uses PCI bus order.
The exact mapping goes through an identity both sides know: a PCI bus id (from torch) or a UUID
(from CUDA_VISIBLE_DEVICES). Every pynvml function is looked up as `pynvml.<name>` at call time so
tests can patch it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from yolo_mlops.nvml.backend import BackendUnavailableError

try:  # nvidia-ml-py is optional at import time: without it, auto falls back to `none`.
    import pynvml
except ImportError:  # pragma: no cover - exercised only where nvidia-ml-py is absent
    pynvml = None

ERR_NOT_FOUND = 6  # NVML_ERROR_NOT_FOUND


def parse_cuda_visible_devices(value: str | None) -> list[str] | None:
    """Entries of CUDA_VISIBLE_DEVICES in CUDA order; None when unset (all devices visible).

    Like the CUDA runtime, stops at the first entry that is neither an index nor a
    GPU-/MIG- UUID, so "0,2,-1,1" exposes devices 0 and 2.
    """
    if value is None:
        return None
    entries: list[str] = []
    for raw in value.split(","):
        entry = raw.strip()
        if entry.isdigit() or entry.startswith(("GPU-", "MIG-")):
            entries.append(entry)
        else:
            break
    return entries


def _decode(text: str | bytes) -> str:
    return text.decode() if isinstance(text, bytes) else text


def _handle_by_uuid_prefix(prefix: str):
    """CUDA accepts unambiguous UUID prefixes; NVML wants the full UUID."""
    matches = []
    for nvml_index in range(pynvml.nvmlDeviceGetCount()):
        handle = pynvml.nvmlDeviceGetHandleByIndex(nvml_index)
        if _decode(pynvml.nvmlDeviceGetUUID(handle)).startswith(prefix):
            matches.append(handle)
    if len(matches) != 1:
        raise BackendUnavailableError(f"CUDA_VISIBLE_DEVICES entry {prefix!r} matches {len(matches)} NVML devices")
    return matches[0]


def resolve_nvml_handle(cuda_index: int, visible: list[str] | None, pci_bus_id: str | None = None):
    """The NVML handle of CUDA device `cuda_index` of this process.

    Preference: an explicit PCI bus id (exact whatever CUDA_DEVICE_ORDER says); a UUID
    from CUDA_VISIBLE_DEVICES; an index from CUDA_VISIBLE_DEVICES; the index itself.
    Integer entries assume CUDA enumerates in PCI bus order like NVML does
    (CUDA_DEVICE_ORDER=PCI_BUS_ID, or identical GPUs); pass pci_bus_ids otherwise.
    """
    if pci_bus_id:
        return pynvml.nvmlDeviceGetHandleByPciBusId(pci_bus_id)
    if visible is None:
        return pynvml.nvmlDeviceGetHandleByIndex(cuda_index)
    if cuda_index >= len(visible):
        raise BackendUnavailableError(
            f"CUDA device {cuda_index} is not visible (CUDA_VISIBLE_DEVICES has {len(visible)} usable entries)"
        )
    entry = visible[cuda_index]
    if entry.startswith("MIG-"):
        raise BackendUnavailableError(f"MIG device {entry} cannot be sampled per device")
    if entry.isdigit():
        return pynvml.nvmlDeviceGetHandleByIndex(int(entry))
    try:
        return pynvml.nvmlDeviceGetHandleByUUID(entry)
    except pynvml.NVMLError as exc:
        if exc.value != ERR_NOT_FOUND:
            raise
        return _handle_by_uuid_prefix(entry)


@dataclass(frozen=True)
class DeviceMapping:
    """NVML handles of the watched CUDA devices, in the order asked, and caveats of the mapping."""

    handles: dict[int, object]  # CUDA index -> NVML handle
    notes: tuple[str, ...] = ()


def map_cuda_devices(
    cuda_devices: list[int], environ: Mapping[str, str], pci_bus_ids: Mapping[int, str] | None = None
) -> DeviceMapping:
    """Handles of `cuda_devices`; NVML must be initialised. Raises NVMLError or BackendUnavailableError."""
    if pynvml.nvmlDeviceGetCount() == 0:
        raise BackendUnavailableError("NVML sees no GPU")
    visible = parse_cuda_visible_devices(environ.get("CUDA_VISIBLE_DEVICES"))
    handles = {i: resolve_nvml_handle(i, visible, (pci_bus_ids or {}).get(i)) for i in cuda_devices}
    notes: tuple[str, ...] = ()
    if (
        visible
        and visible[0].isdigit()
        and environ.get("CUDA_DEVICE_ORDER") != "PCI_BUS_ID"
        and not pci_bus_ids
        and pynvml.nvmlDeviceGetCount() > 1
    ):
        notes = (
            "CUDA_VISIBLE_DEVICES holds indices and CUDA_DEVICE_ORDER is not "
            "PCI_BUS_ID: the NVML mapping assumes PCI bus order",
        )
    return DeviceMapping(handles, notes)


def torch_pci_bus_ids(cuda_devices: list[int]) -> dict[int, str] | None:
    """PCI bus ids of CUDA devices as torch sees them, for make_backend(pci_bus_ids=...).

    The exact mapping, whatever CUDA_DEVICE_ORDER and CUDA_VISIBLE_DEVICES say. Needs
    CUDA (it initialises it); None when torch or CUDA is not there.
    """
    try:
        import torch

        if not torch.cuda.is_available():
            return None
        ids = {}
        for index in cuda_devices:
            # typed Any: torch's stubs for _CudaDeviceProperties lack the pci_* attributes
            props: Any = torch.cuda.get_device_properties(index)
            ids[index] = f"{props.pci_domain_id:08x}:{props.pci_bus_id:02x}:{props.pci_device_id:02x}.0"
        return ids
    except Exception:  # no torch, no driver, odd device: fall back to the environment mapping
        return None
