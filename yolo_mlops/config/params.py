"""One codec for a run's MLflow params, both directions.

Written: what a RunSpec, the training arguments it resolved to and the environment record as `train.*`,
`train.torch.*`, `profiler.*`, `sampler.*`, `ddp.*` and `env.*` params (`spec_params`, `environment_params`).
Read: `LoggedParams`, a typed view of a logged run's params that every reader goes through (the series identity
of old runs, the software versions of trends, the RunSpec bisect rebuilds).

MLflow params are strings. A value that does not apply is written `NONE`; the text Python's `str(None)` gives,
which some earlier writes used, reads the same. Runs of every earlier layout read back:
tests/config/test_params_codec.py holds one stored fixture per layout.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from yolo_mlops import names
from yolo_mlops.config.run_spec import RunSpec

NONE = "none"  # the text of a value that does not apply (no GPU driver, no max_steps, ...)
_NONE_TEXTS = frozenset({NONE, "None", ""})

# The profiler window: the fields that say which steps are profiled; part of a series' identity.
PROFILER_WINDOW_FIELDS = ("skip_first", "wait", "warmup", "active", "repeat")

# Software versions, recorded on every run as `env.<field>` and never part of the series key: name -> field.
VERSION_FIELDS = {
    "commit": "git_commit",
    "torch": "torch",
    "cuda": "torch_cuda",
    "cudnn": "cudnn",
    "ultralytics": "ultralytics",
    "driver": "nvidia_driver",
    "python": "python",
}
UNLOGGED = "?"  # a version the run's layout did not record

# training arguments that name where a run writes its files: machine-local, never params
_LOCAL_TRAIN_ARGS = frozenset({"project", "name"})


def param_text(value: object) -> str:
    """A value as an MLflow param: `NONE` for None, else its text."""
    return NONE if value is None else str(value)


def spec_params(spec: RunSpec, training_args: Mapping[str, Any], steps_expected: int | None) -> dict[str, str]:
    """The params a run of `spec` writes. `training_args` are the ultralytics arguments it resolved to (model,
    data, device, epochs, ... and `spec.train_args`); `steps_expected` the optimizer steps it plans."""
    train = names.TRAIN_PARAM
    values: dict[str, object] = {f"{train}{k}": v for k, v in training_args.items() if k not in _LOCAL_TRAIN_ARGS}
    values.update(
        {f"{train}max_steps": spec.max_steps, f"{train}variant": spec.variant, f"{train}steps_expected": steps_expected}
    )
    values.update(_section(names.TORCH_PARAM, spec.torch.model_dump()))
    values.update(_section(names.PROFILER_PARAM, spec.profiler.model_dump()))
    values.update(_section(names.SAMPLER_PARAM, spec.nvml.model_dump()))
    if spec.data_parallel:
        values.update(_section(names.DDP_PARAM, spec.ddp.model_dump()))
        values[names.DDP_WORLD_SIZE] = spec.world_size
    return {key: param_text(value) for key, value in values.items()}


def environment_params(fields: Mapping[str, object]) -> dict[str, str]:
    """`env.*` params of an environment's fields; a missing value is written `NONE`, never left out."""
    return {key: param_text(value) for key, value in _section(names.ENV_PARAM, fields).items()}


def _section(prefix: str, fields: Mapping[str, object]) -> dict[str, object]:
    return {f"{prefix}{key}": value for key, value in fields.items()}


@dataclass(frozen=True)
class LoggedParams:
    """A logged run's params, read back by field. Every accessor gives None where the run's layout did not
    record the field or recorded `NONE`; a value that does not parse raises ValueError."""

    values: Mapping[str, str]

    def text(self, key: str) -> str | None:
        value = self.values.get(key)
        return None if value is None or value in _NONE_TEXTS else value

    def integer(self, key: str) -> int | None:
        value = self.text(key)
        return None if value is None else int(value)

    def flag(self, key: str) -> bool | None:
        value = self.text(key)
        if value is None:
            return None
        if value not in ("True", "False"):
            raise ValueError(f"param {key}={value!r} is not True or False")
        return value == "True"

    def train(self, field: str) -> str | None:
        return self.text(names.TRAIN_PARAM + field)

    def env(self, field: str) -> str | None:
        return self.text(names.ENV_PARAM + field)

    @property
    def profiler_window(self) -> tuple[int, ...] | None:
        """(skip_first, wait, warmup, active, repeat), None when any is missing."""
        window = tuple(self.integer(names.PROFILER_PARAM + f) for f in PROFILER_WINDOW_FIELDS)
        return None if any(v is None for v in window) else tuple(v for v in window if v is not None)

    @property
    def profiled_steps(self) -> int | None:
        """Profiled steps per run: active x repeat."""
        active, repeat = self.integer(names.PROFILER_PARAM + "active"), self.integer(names.PROFILER_PARAM + "repeat")
        return None if active is None or repeat is None else active * repeat

    @property
    def machine(self) -> str | None:
        """The machine's name: `env.machine`, else (runs logged before it existed) the host name it had then."""
        return self.text(names.ENV_MACHINE) or self.env("hostname")

    @property
    def has_machine(self) -> bool:
        """Whether the run's layout records `env.machine` (whose series key includes the machine)."""
        return names.ENV_MACHINE in self.values

    @property
    def world_size(self) -> int:
        """Ranks of a data-parallel job; 0 for a single-process run (and runs logged before DDP existed)."""
        return self.integer(names.DDP_WORLD_SIZE) or 0

    def versions(self) -> dict[str, str]:
        """Software versions by name: `NONE` where one does not apply, `UNLOGGED` where the layout lacks it."""
        return {name: self.values.get(names.ENV_PARAM + field, UNLOGGED) for name, field in VERSION_FIELDS.items()}

    def model_name(self) -> str | None:
        model = self.train("model")
        return None if model is None else Path(model).name

    def run_spec_fields(self, synthetic_data: bool) -> dict[str, Any]:
        """The RunSpec fields these params hold, for `build_run_spec`: the workload (model, data unless
        synthetic, imgsz, batch, workers, seed, steps, device, variant, val) and the profiler window. Fields the
        params do not hold (train_args, torch settings of old layouts, ...) are left out to take their defaults.
        KeyError when the model is not recorded."""
        model = self.train("model")
        if model is None:
            raise KeyError(names.TRAIN_PARAM + "model")
        fields: dict[str, Any] = {
            "model": model,
            "imgsz": self.integer(names.TRAIN_PARAM + "imgsz"),
            "batch": self.integer(names.TRAIN_PARAM + "batch"),
            "workers": self.integer(names.TRAIN_PARAM + "workers"),
            "seed": self.integer(names.TRAIN_PARAM + "seed") or 0,
            "max_steps": self.integer(names.TRAIN_PARAM + "max_steps"),
            "device": self.train("device"),
            "variant": self.train("variant") or "baseline",
            "val": self.flag(names.TRAIN_PARAM + "val") is not False,
        }
        if not synthetic_data:
            fields["data"] = self.train("data")
        profiler = {f: self.integer(names.PROFILER_PARAM + f) for f in PROFILER_WINDOW_FIELDS}
        fields["profiler"] = {k: v for k, v in profiler.items() if v is not None}
        return {k: v for k, v in fields.items() if v is not None}
