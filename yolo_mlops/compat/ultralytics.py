"""ultralytics: the trainer's private methods the project overrides, the arguments and parameters older releases
lack, and the patches of its module attributes, each put back when its work is done.

Checked against ultralytics 8.4.190 (run) and the sources of the releases in the declared range:
- `BaseTrainer._setup_ddp` and `_setup_train` (private) are overridden by `trainer_base()`'s class, which takes
  either shape (`(self)` and older `(self, world_size)`) and hands control to public hooks of the subclass;
- `BaseTrainer.read_results_csv` reads results.csv with polars, which only that method imports on the training
  path; the override reads it with pandas;
- `build_dataloader(..., pin_memory=...)` exists in newer releases only; older ones read the module global
  `PIN_MEMORY` of `ultralytics.data.build`;
- the `compile` and `channels_last` train arguments exist in newer releases only (`train_arg` reads a missing
  one as its default);
- `strip_optimizer(f, updates=...)`: `updates` is newer;
- `check_amp` (`ultralytics.engine.trainer`) downloads weights to compare AMP with FP32: replaced while training;
- ultralytics wraps the model as `torch.nn.parallel.DistributedDataParallel(model, device_ids=..., ...)` inside
  `_setup_train`; `ddp_wrap` replaces that name while it runs.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


@functools.cache
def trainer_base() -> Any:
    """ultralytics' DetectionTrainer as `seam_trainer` extends it."""
    from ultralytics.models.yolo.detect import DetectionTrainer

    return seam_trainer(DetectionTrainer)


def seam_trainer(base: type) -> Any:
    """`base` (a DetectionTrainer) with its private set-up methods overridden to call public hooks:
    `join_cpu_process_group()` (True when the subclass joined the process group itself) and
    `setup_train(original)` (runs `original()`, ultralytics' own set-up, and whatever it needs around it). Both
    take either shape of the private method: `(self)`, or `(self, world_size)` in older releases."""

    class SeamDetectionTrainer(base):
        def join_cpu_process_group(self) -> bool:
            return False

        def setup_train(self, original: Callable[[], Any]) -> Any:
            return original()

        def _setup_ddp(self, *args: Any) -> Any:
            if self.join_cpu_process_group():
                return None
            return super()._setup_ddp(*args)

        def _setup_train(self, *args: Any) -> Any:
            return self.setup_train(functools.partial(super()._setup_train, *args))

        def read_results_csv(self) -> dict[str, list[Any]]:
            """results.csv as column -> values, read with pandas (a dependency already) rather than polars, which
            ultralytics imports only here, when it writes the last checkpoint; {} when unreadable."""
            import pandas as pd

            try:
                return pd.read_csv(self.csv).to_dict(orient="list")
            except Exception:  # as ultralytics: no (or an unreadable) results.csv is no results
                return {}

    return SeamDetectionTrainer


def train_arg(trainer: Any, name: str, default: Any = None) -> Any:
    """A train argument of `trainer.args`; `default` on a release that does not know it."""
    return getattr(trainer.args, name, default)


@contextmanager
def amp_check_skipped() -> Iterator[None]:
    """ultralytics' AMP check off while training runs: offline it can only fail or hang (it downloads weights to
    compare outputs), and the run decides AMP itself."""
    import ultralytics.engine.trainer as engine_trainer

    original = engine_trainer.check_amp
    engine_trainer.check_amp = lambda *args, **kwargs: True
    try:
        yield
    finally:
        engine_trainer.check_amp = original


@contextmanager
def train_loader_pin_memory(pin: bool) -> Iterator[None]:
    """The train loader built while this is open pins memory as `pin` says (ultralytics decides it otherwise)."""
    import ultralytics.data.build as data_build
    import ultralytics.models.yolo.detect.train as detect_train

    original = detect_train.build_dataloader
    if "pin_memory" in inspect.signature(original).parameters:
        detect_train.build_dataloader = functools.partial(original, pin_memory=pin)
        try:
            yield
        finally:
            detect_train.build_dataloader = original
        return
    before = getattr(data_build, "PIN_MEMORY")  # noqa: B009  (older releases: a module global read when the loader is built)
    setattr(data_build, "PIN_MEMORY", pin)  # noqa: B010
    try:
        yield
    finally:
        setattr(data_build, "PIN_MEMORY", before)  # noqa: B010


@contextmanager
def ddp_wrap(wrap: Callable[..., Any]) -> Iterator[None]:
    """While open, ultralytics' `DistributedDataParallel(module, device_ids=..., **kwargs)` calls
    `wrap(original_class, module, device_ids, **kwargs)`."""
    import torch.nn.parallel as parallel

    original = parallel.DistributedDataParallel

    def factory(module: Any, device_ids: Any = None, **kwargs: Any) -> Any:
        return wrap(original, module, device_ids, **kwargs)

    setattr(parallel, "DistributedDataParallel", factory)  # noqa: B010  (a class replaced by a factory)
    try:
        yield
    finally:
        setattr(parallel, "DistributedDataParallel", original)  # noqa: B010


def strip_optimizer(path: Path, updates: dict[str, Any] | None = None) -> dict[str, Any]:
    """ultralytics' `strip_optimizer` (the checkpoint without its optimizer state); `updates` where it takes them."""
    from ultralytics.utils.torch_utils import strip_optimizer as strip

    if updates is not None and "updates" in inspect.signature(strip).parameters:
        return strip(path, updates=updates) or {}
    return strip(path) or {}
