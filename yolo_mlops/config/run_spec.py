"""The one validated configuration behind `yolo-mlops profile`, `--config run.yaml` and the Prefect flows.

Structure and value ranges are checked here (pydantic); checks that touch the file system or the network
(does the dataset exist, is the tracking server reachable) live in `run/preflight.py`, because a RunSpec may be
built on one machine (the Prefect UI) and run on another (a GPU worker). Part of the contracts layer: it
imports no torch and nothing of the project but `yolo_mlops.errors`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from yolo_mlops.errors import ConfigError

DEFAULT_EXPERIMENT = "yolo-mlops"


def data_home() -> Path:
    """Project data directory: MLflow SQLite store, artifacts, synthetic datasets, ultralytics settings."""
    return Path(os.environ.get("YOLO_MLOPS_HOME", Path.home() / ".yolo-mlops")).expanduser().resolve()


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ProfilerSettings(_Strict):
    """torch.profiler schedule and recording switches.

    The window is `skip_first` steps, then `repeat` cycles of wait -> warmup -> active steps.
    """

    skip_first: int = Field(default=0, ge=0)
    wait: int = Field(default=1, ge=0)
    warmup: int = Field(default=1, ge=0)
    active: int = Field(default=3, ge=1, description="profiled steps per cycle; must be >= 1")
    repeat: int = Field(default=1, ge=1, description="number of wait/warmup/active cycles")
    record_shapes: bool = True
    profile_memory: bool = True
    with_stack: bool = False
    with_modules: bool = False
    row_limit: int = Field(default=40, ge=1, description="rows kept in the text key_averages tables")

    @property
    def window_end_step(self) -> int:
        """Number of training steps the profiler window needs (1-based index of its last active step)."""
        return self.skip_first + (self.wait + self.warmup + self.active) * self.repeat


class NvmlSettings(_Strict):
    backend: Literal["auto", "real", "fake", "none"] = "auto"
    interval_ms: float = Field(default=200.0, ge=10.0, le=10_000.0)
    devices: list[int] | None = Field(default=None, description="CUDA device indices; default: the training device")


class TorchSettings(_Strict):
    """torch backend switches that are not ultralytics arguments (None = leave torch's default)."""

    cudnn_benchmark: bool | None = None
    tf32: bool | None = None
    pin_memory: bool | None = None


class DdpSettings(_Strict):
    """Data-parallel training (torch DistributedDataParallel), one process per rank.

    GPU jobs take one rank per device of `device` ('0,1,2,3', NCCL); CPU jobs take `ranks` processes (gloo), the
    twin that runs the same path without GPUs. The DDP switches left None keep what ultralytics passes."""

    ranks: int | None = Field(
        default=None,
        ge=1,
        le=64,
        description="CPU ranks (gloo) with device cpu; a GPU job has one rank per listed device",
    )
    backend: Literal["auto", "nccl", "gloo"] = Field(
        default="auto",
        description="auto: nccl on GPUs, gloo on CPU; named, a single device also trains as a one-rank DDP job",
    )
    bucket_cap_mb: float | None = Field(default=None, gt=0, le=4096, description="DDP gradient bucket size (MiB)")
    gradient_as_bucket_view: bool | None = None
    static_graph: bool | None = None
    broadcast_buffers: bool | None = None
    no_sync_accumulation: bool = Field(
        default=False,
        description="skip the gradient all-reduce on every "
        "micro-batch but the last of an accumulated optimizer step (DDP no_sync)",
    )


def device_list(device: str | None) -> list[str]:
    """The devices of an ultralytics device string: 'cpu' -> ['cpu'], '0,1' -> ['0', '1'], 'cuda:1' -> ['1'].

    Each part loses its own `cuda:` prefix, so '0,cuda:0' is ['0', '0']: one GPU named twice, which the
    duplicate check below refuses (two ranks on one GPU)."""
    if not device:
        return []
    parts = (part.strip().removeprefix("cuda:").strip() for part in device.split(","))
    return [part for part in parts if part]


class RunSpec(_Strict):
    """Everything that defines one profiled training run."""

    model: str = Field(default="yolo11n.yaml", description="yolo11{n,s,m,l,x}.yaml (from scratch) or a local .pt/.yaml")
    data: Path | None = Field(default=None, description="ultralytics dataset YAML; None = the synthetic demo dataset")
    imgsz: int = Field(default=640, ge=32, le=4096)
    batch: int = Field(default=16, ge=1)
    epochs: int | None = Field(default=None, ge=1, description="None: as many as max_steps needs, else 1")
    max_steps: int | None = Field(
        default=None,
        ge=1,
        description="train exactly this many steps (fewer only when epochs is also set and ends the run first)",
    )
    device: str | None = Field(default=None, description="'cpu', '0', 'cuda:0'; None = first GPU if any, else cpu")
    workers: int = Field(default=8, ge=0)
    seed: int = 0
    val: bool = Field(
        default=True,
        description="run ultralytics' validation after each epoch and after training "
        "(gives val/* mAP); false: no validation pass at all",
    )
    train_args: dict[str, Any] = Field(default_factory=dict, description="extra ultralytics train arguments")
    torch: TorchSettings = Field(default_factory=TorchSettings)
    profiler: ProfilerSettings = Field(default_factory=ProfilerSettings)
    nvml: NvmlSettings = Field(default_factory=NvmlSettings)
    ddp: DdpSettings = Field(default_factory=DdpSettings)
    experiment: str = DEFAULT_EXPERIMENT
    run_name: str | None = None
    run_kind: str = Field(default="profile", pattern=r"^[a-z][a-z0-9_-]*$")
    variant: str = "baseline"
    parent_run_id: str | None = None
    tags: dict[str, str] = Field(default_factory=dict)
    synthetic_images: int = Field(default=64, ge=4, description="training images of the synthetic dataset")

    @field_validator("model")
    @classmethod
    def _model_is_yolo_file(cls, value: str) -> str:
        if not value.endswith((".yaml", ".yml", ".pt")):
            raise ValueError(f"model must be a .yaml config or a .pt checkpoint, got {value!r}")
        return value

    @field_validator("train_args")
    @classmethod
    def _train_args_do_not_shadow_fields(cls, value: dict[str, Any]) -> dict[str, Any]:
        owned = {"model", "data", "imgsz", "batch", "epochs", "device", "workers", "seed", "val", "project", "name"}
        clash = sorted(owned & set(value))
        if clash:
            raise ValueError(f"train_args may not set {clash}: use the RunSpec fields of the same name")
        return value

    @model_validator(mode="after")
    def _window_fits_max_steps(self) -> RunSpec:
        if self.max_steps is not None and self.profiler.window_end_step > self.max_steps:
            raise ValueError(
                f"profiler window needs {self.profiler.window_end_step} steps "
                f"(skip_first + (wait + warmup + active) * repeat) but max_steps is {self.max_steps}"
            )
        return self

    @model_validator(mode="after")
    def _ranks_fit_the_devices(self) -> RunSpec:
        devices = device_list(self.device)
        if len(devices) != len(set(devices)):
            raise ValueError(f"device {self.device!r} names a device twice: one rank per device")
        on_cpu = devices == ["cpu"]
        if self.ddp.ranks is not None and devices and not on_cpu:
            raise ValueError(
                f"ddp.ranks (--ranks) is for CPU ranks; a GPU job takes one rank per device of "
                f"{self.device or 'the default GPU'!r} (give --device cpu, or list the GPUs)"
            )
        if self.ddp.backend == "nccl" and on_cpu:
            raise ValueError("ddp backend nccl needs GPUs; CPU ranks use gloo (--ddp-backend gloo or auto)")
        world = self.world_size
        if world > 1 and self.batch % world:
            raise ValueError(
                f"batch {self.batch} does not divide over {world} ranks (ultralytics would train "
                f"{self.batch // world} images per rank, {self.batch // world * world} per step in all): "
                f"give a multiple of {world}"
            )
        return self

    @property
    def data_parallel(self) -> bool:
        """Trained as a DDP job (torchrun, a process group, the model wrapped): several ranks, or one rank whose
        backend was asked for by name (a single GPU over NCCL checks the GPU path of a job on one device)."""
        return self.world_size > 1 or self.ddp.backend != "auto"

    @property
    def world_size(self) -> int:
        """Processes of the job: the CPU ranks, or one per listed GPU; 1 for a single-process run."""
        if self.ddp.ranks is not None:
            return self.ddp.ranks
        devices = device_list(self.device)
        return len(devices) if devices and devices != ["cpu"] else 1


def load_run_spec(path: Path, overrides: dict[str, Any] | None = None) -> RunSpec:
    """Read a run YAML (same fields as RunSpec) and apply CLI overrides on top."""
    try:
        raw = yaml.safe_load(Path(path).read_text()) or {}
    except FileNotFoundError:
        raise ConfigError(f"config file not found: {path}") from None
    except IsADirectoryError:
        raise ConfigError(f"config file {path} is a directory: give the run YAML file inside it") from None
    except OSError as exc:  # unreadable (permissions, a device): the reason, not a traceback
        raise ConfigError(f"config file {path} cannot be read: {exc.strerror or exc}") from None
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise ConfigError(f"config file {path} is not valid YAML: {yaml_error_line(exc)}") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"config file {path} must hold a mapping of RunSpec fields")
    return build_run_spec(deep_merge(raw, overrides or {}))


def yaml_error_line(exc: Exception) -> str:
    """PyYAML's multi-line message as one line: the problem and where it is."""
    problem = getattr(exc, "problem", None)
    if problem is None:
        return str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    mark = getattr(exc, "problem_mark", None)
    return problem + (f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else "")


def build_run_spec(fields: dict[str, Any]) -> RunSpec:
    try:
        return RunSpec.model_validate(fields)
    except ValidationError as exc:
        raise ConfigError(one_line_validation_error(exc)) from None


def one_line_validation_error(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors():
        message = err["msg"].removeprefix("Value error, ")
        where = ".".join(str(p) for p in err["loc"])
        parts.append(f"{where}: {message}" if where else message)
    return "invalid run config: " + "; ".join(parts)


def deep_merge(base: dict[str, Any], top: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in top.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged
