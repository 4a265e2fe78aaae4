"""Everything about a run that can be checked before training, and before an MLflow run exists.

`check(spec)` raises `ConfigError` with one line, or returns what the checks learned (`Preflight`). It
writes nothing but ultralytics' isolated settings, which must exist before ultralytics is imported to look
up a bundled model config, and the tables of a new SQLite MLflow store (`connection.check_reachable`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from yolo_mlops.compat import versions
from yolo_mlops.config import RunSpec, data_home, resolve_steps
from yolo_mlops.errors import ConfigError
from yolo_mlops.run import prefect_server
from yolo_mlops.run.datasets import DatasetInfo, inspect_dataset
from yolo_mlops.run.environment import cuda_indices, machine_name, resolve_device
from yolo_mlops.run.offline import configure_ultralytics
from yolo_mlops.tracking import connection


@dataclass(frozen=True)
class Preflight:
    device: str  # resolved: "cpu" or a CUDA device string
    train_images: int
    epochs: int  # the user's epochs, else as many as max_steps needs, else 1
    steps: int  # training steps the run will take (epochs x steps per epoch, capped by max_steps)
    dataset: DatasetInfo | None  # the user's dataset, inspected; None for the synthetic dataset


def check(spec: RunSpec) -> Preflight:
    versions.check_installed()  # a flow started by a worker, not the command line, is checked here
    configure_ultralytics(data_home())
    machine_name()  # a name that cannot key a series or a limit is refused before anything runs
    _check_model(spec.model)
    _check_train_args(spec.train_args)
    device = "cpu" if spec.ddp.ranks is not None and not spec.device else resolve_device(spec.device)
    _check_device(device, spec)
    dataset = inspect_dataset(spec.data) if spec.data is not None else None
    train_images = dataset.train_images if dataset is not None else spec.synthetic_images
    world = spec.world_size
    # each rank trains on its share of the images (DistributedSampler pads them to equal shares) in batch/world
    epochs, steps = resolve_steps(-(-train_images // world), spec.batch // world, spec.epochs, spec.max_steps)
    if spec.profiler.window_end_step > steps:
        raise ConfigError(
            f"profiler window needs {spec.profiler.window_end_step} steps but the run has only {steps} "
            f"({train_images} images / batch {spec.batch} x {epochs} epochs"
            + (f", max_steps {spec.max_steps}" if spec.max_steps else "")
            + ")"
        )
    if spec.data_parallel:
        _check_rank_setup()
    if spec.nvml.backend == "real" and device == "cpu":
        raise ConfigError("nvml backend 'real' needs a GPU device; use --nvml-backend auto or none on CPU")
    if spec.nvml.devices and device == "cpu":
        shown = ",".join(str(d) for d in spec.nvml.devices)
        raise ConfigError(
            f"nvml devices {shown} (--nvml-devices) are GPUs to sample, but the run trains on the CPU; "
            "leave --nvml-devices out on CPU"
        )
    check_servers(spec.experiment)
    return Preflight(device=device, train_images=train_images, epochs=epochs, steps=steps, dataset=dataset)


def check_servers(experiment: str, prefect_context: str = "") -> None:
    """The servers a run talks to, each asked once with a bounded request: the Prefect API when PREFECT_API_URL
    names one (its line starts with `prefect_context`), the tracking store, the store of the experiment's
    artifacts."""
    prefect_server.check_api(prefect_context)
    connection.check_reachable()
    connection.check_experiment_store(experiment)


def _check_model(model: str) -> None:
    path = Path(model)
    if path.exists():
        if path.suffix == ".pt":
            _check_checkpoint(path)
        return
    if path.suffix == ".pt":
        raise ConfigError(f"model checkpoint not found: {model} (weights are never downloaded; give a local .pt)")
    from ultralytics.utils.checks import check_yaml

    unified = re.sub(r"(\d+)([nslmx])(.+)?$", r"\1\3", path.name)  # how ultralytics maps yolo11n -> yolo11
    try:
        check_yaml(unified, hard=True)
    except FileNotFoundError:
        raise ConfigError(
            f"model config not found: {model} (not a file, and not a config bundled with "
            "ultralytics such as yolo11n.yaml)"
        ) from None


def _check_checkpoint(path: Path) -> None:
    """An ultralytics checkpoint: a torch.save zip archive whose pickle holds an ultralytics model object.

    Read without unpickling (pickletools only parses the opcodes), so checking a file runs none of its code.
    """
    import pickletools
    import zipfile

    try:
        with zipfile.ZipFile(path) as archive:
            pickles = [name for name in archive.namelist() if name.rsplit("/", 1)[-1] == "data.pkl"]
            damaged = archive.testzip()  # CRC of every member: a truncated or corrupted download fails here
            pickled = archive.read(pickles[0]) if pickles else b""
    except (zipfile.BadZipFile, OSError):
        raise ConfigError(f"model {path} is not a PyTorch checkpoint (not a torch.save archive)") from None
    if not pickled or damaged is not None:
        raise ConfigError(f"model {path} is a damaged checkpoint (bad member: {damaged or 'data.pkl missing'})")
    try:
        strings = {arg for _, arg, _ in pickletools.genops(pickled) if isinstance(arg, str)}
    except ValueError as exc:  # a truncated or corrupt pickle stream
        raise ConfigError(f"model {path} is a damaged checkpoint: {exc}") from None
    if not any(s.startswith("ultralytics.") for s in strings):
        raise ConfigError(
            f"model {path} is a PyTorch file but not an ultralytics checkpoint (no ultralytics "
            "model inside, e.g. a bare state_dict); give a .pt saved by ultralytics"
        )


def _check_train_args(train_args: dict) -> None:
    """Every train_args key is an ultralytics train argument: ultralytics itself would refuse an unknown one only
    when training starts, after the MLflow run exists (ended FAILED), so a typo is caught here instead."""
    if not train_args:
        return
    import difflib

    from ultralytics.cfg import DEFAULT_CFG_DICT

    unknown = sorted(set(train_args) - set(DEFAULT_CFG_DICT))
    if not unknown:
        return
    hints = []
    for key in unknown:
        close = difflib.get_close_matches(key, DEFAULT_CFG_DICT, n=1)
        hints.append(f"{key!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
    what = "is not an ultralytics train argument" if len(unknown) == 1 else "are not ultralytics train arguments"
    raise ConfigError(f"train_args: {', '.join(hints)} {what} (ultralytics would refuse it once training started)")


def _check_rank_setup() -> None:
    """YOLO_MLOPS_RANK_SETUP (module:function, called in every rank) must name an importable module."""
    import importlib.util
    import os

    target = os.environ.get("YOLO_MLOPS_RANK_SETUP")
    if not target:
        return
    module, _, function = target.partition(":")
    try:
        found = bool(module) and bool(function) and importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        raise ConfigError(
            f"YOLO_MLOPS_RANK_SETUP={target!r} must be module:function with the module importable "
            "here and in the ranks (PYTHONPATH)"
        )


def _check_device(device: str, spec: RunSpec) -> None:
    import torch

    if device != "cpu" and not torch.cuda.is_available():
        raise ConfigError(f"device {device!r} requested but CUDA is not available here (use --device cpu)")
    if device == "cpu":
        if spec.data_parallel and not torch.distributed.is_available():
            raise ConfigError("CPU ranks need torch.distributed, which this torch build lacks")
        return
    count = torch.cuda.device_count()
    missing = [d for d in cuda_indices(device) if d >= count]
    if missing:
        raise ConfigError(f"device {device!r} names GPU(s) {missing} but this machine has {count} (0 to {count - 1})")
    if spec.ddp.backend == "gloo":
        raise ConfigError("ddp backend gloo is the CPU twin; a GPU job trains over nccl (--ddp-backend auto)")
