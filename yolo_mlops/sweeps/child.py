"""Per-child hygiene: children of a sweep share one process and one dataset, so each child starts clean."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import yaml

from yolo_mlops.config import RunSpec


@contextlib.contextmanager
def disk_cache_guard(spec: RunSpec, dataset_yaml: Path | None) -> Iterator[None]:
    """ultralytics reads existing image .npy files in every cache mode: remove the ones a cache_disk child
    wrote, so children after it are not sped up by its cache. Files that existed before are kept."""
    if spec.train_args.get("cache") != "disk" or dataset_yaml is None:
        yield
        return
    root = dataset_root(dataset_yaml)
    before = set(root.rglob("*.npy"))
    try:
        yield
    finally:
        for path in set(root.rglob("*.npy")) - before:
            path.unlink(missing_ok=True)


def release_device_memory(device: str) -> None:
    """Children share one process: return the previous child's cached CUDA blocks to the driver, so the
    NVML memory figures and torch's peak-memory stats of this child describe this child only."""
    if device == "cpu":
        return
    import gc

    import torch

    if not (torch.cuda.is_available() and torch.cuda.is_initialized()):
        return
    gc.collect()
    torch.cuda.empty_cache()
    for index in range(torch.cuda.device_count()):
        torch.cuda.reset_peak_memory_stats(index)


def dataset_root(dataset_yaml: Path) -> Path:
    spec = yaml.safe_load(Path(dataset_yaml).read_text()) or {}
    root = Path(spec.get("path") or Path(dataset_yaml).parent)
    return root if root.is_absolute() else (Path(dataset_yaml).parent / root).resolve()
