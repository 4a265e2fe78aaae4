"""Everything about a run that can be checked before training, and before an MLflow run exists.

`check(spec)` raises `ConfigError` with one line, or returns what the checks learned (`Preflight`). It
writes nothing but ultralytics' isolated settings, which must exist before ultralytics is imported to look
up a bundled model config.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from yolo_mlops import tracking
from yolo_mlops.errors import ConfigError
from yolo_mlops.run.config import RunSpec, data_home
from yolo_mlops.run.datasets import DatasetInfo, inspect_dataset
from yolo_mlops.run.environment import resolve_device
from yolo_mlops.run.offline import configure_ultralytics
from yolo_mlops.run.training import steps_per_epoch


@dataclass(frozen=True)
class Preflight:
    device: str  # resolved: "cpu" or a CUDA device string
    train_images: int
    steps: int  # training steps the run will take (epochs x steps per epoch, capped by max_steps)
    dataset: DatasetInfo | None  # the user's dataset, inspected; None for the synthetic dataset


def check(spec: RunSpec) -> Preflight:
    configure_ultralytics(data_home())
    _check_model(spec.model)
    device = resolve_device(spec.device)
    _check_device(device)
    dataset = inspect_dataset(spec.data) if spec.data is not None else None
    train_images = dataset.train_images if dataset is not None else spec.synthetic_images
    steps = steps_per_epoch(train_images, spec.batch) * spec.epochs
    if spec.max_steps is not None:
        steps = min(steps, spec.max_steps)
    if spec.profiler.window_end_step > steps:
        raise ConfigError(
            f"profiler window needs {spec.profiler.window_end_step} steps but the run has only {steps} "
            f"({train_images} images / batch {spec.batch} x {spec.epochs} epochs"
            + (f", max_steps {spec.max_steps}" if spec.max_steps else "") + ")")
    if spec.nvml.backend == "real" and device == "cpu":
        raise ConfigError("nvml backend 'real' needs a GPU device; use --nvml-backend auto or none on CPU")
    tracking.check_reachable()
    return Preflight(device=device, train_images=train_images, steps=steps, dataset=dataset)


def _check_model(model: str) -> None:
    path = Path(model)
    if path.exists():
        return
    if path.suffix == ".pt":
        raise ConfigError(f"model checkpoint not found: {model} (weights are never downloaded; give a local .pt)")
    from ultralytics.utils.checks import check_yaml

    unified = re.sub(r"(\d+)([nslmx])(.+)?$", r"\1\3", path.name)  # how ultralytics maps yolo11n -> yolo11
    try:
        check_yaml(unified, hard=True)
    except FileNotFoundError:
        raise ConfigError(f"model config not found: {model} (not a file, and not a config bundled with "
                          "ultralytics such as yolo11n.yaml)") from None


def _check_device(device: str) -> None:
    import torch

    if device != "cpu" and not torch.cuda.is_available():
        raise ConfigError(f"device {device!r} requested but CUDA is not available here (use --device cpu)")
