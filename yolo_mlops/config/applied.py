"""The settings a run really trained with, as recorded on its MLflow run and read back by sweeps.

Torch-free so that reading a run's tags (sweeps/collect.py) does not import the training stack; the
training code (run/training.py) fills it in from what ultralytics and torch resolved.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields

from yolo_mlops import names


@dataclass(frozen=True)
class AppliedSettings:
    """The settings a run really trained with, after ultralytics resolved its arguments.

    Recorded as tags `yolo_mlops.applied.<field>` = `str(value)` (`pin_memory` only when the run set it);
    `from_tags` is the one parser of those tags.
    """

    cudnn_benchmark: bool
    matmul_tf32: bool
    cudnn_tf32: bool
    amp: bool | str  # ultralytics' amp argument: True/False, or a precision such as "bf16"
    channels_last: bool | None  # ultralytics' channels_last argument (None: its choice, on for CUDA)
    compile: bool | str  # ultralytics' compile argument: False, True or a torch.compile mode
    compiled: bool  # the model really is compiled (ultralytics falls back to eager silently)
    channels_last_effective: bool  # the model's weights really are in channels_last memory format
    pin_memory: bool | None = None  # train-loader override; None: ultralytics' choice

    @property
    def mixed_precision(self) -> bool:
        return self.amp not in (False, "False", "fp32")

    def tags(self) -> dict[str, str]:
        return {
            names.APPLIED_PREFIX + f.name: str(getattr(self, f.name))
            for f in fields(self)
            if not (f.name == "pin_memory" and self.pin_memory is None)
        }

    @classmethod
    def from_tags(cls, tags: Mapping[str, str]) -> AppliedSettings | None:
        """The settings a run's tags record; None when it has none (it ended before they were logged)."""
        prefix = names.APPLIED_PREFIX
        values = {k.removeprefix(prefix): v for k, v in tags.items() if k.startswith(prefix)}
        required = [f.name for f in fields(cls) if f.name != "pin_memory"]
        if not all(name in values for name in required):
            return None
        return cls(
            cudnn_benchmark=_flag(values["cudnn_benchmark"]),
            matmul_tf32=_flag(values["matmul_tf32"]),
            cudnn_tf32=_flag(values["cudnn_tf32"]),
            amp=_flag_or_text(values["amp"]),
            channels_last=None if values["channels_last"] == "None" else _flag(values["channels_last"]),
            compile=_flag_or_text(values["compile"]),
            compiled=_flag(values["compiled"]),
            channels_last_effective=_flag(values["channels_last_effective"]),
            pin_memory=_flag(values["pin_memory"]) if "pin_memory" in values else None,
        )


def _flag(text: str) -> bool:
    if text not in ("True", "False"):
        raise ValueError(f"expected 'True' or 'False' in an applied-settings tag, got {text!r}")
    return text == "True"


def _flag_or_text(text: str) -> bool | str:
    return _flag(text) if text in ("True", "False") else text
