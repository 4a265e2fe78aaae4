"""ultralytics: the trainer's private methods the project overrides and the patches of its module attributes, each
put back when its work is done.

Checked against ultralytics 8.4.105, 8.4.150 and 8.4.190 (run: short CPU trainings, a 2-rank gloo job) and the
sources of every release from 8.3.0 to 8.4.190. Across the declared range (8.4.105 to 8.4.x) every API used here
has one shape; what changed below it, and why the floor is where it is, is in docs/compatibility.md.
- `BaseTrainer._setup_ddp` and `_setup_train` (private) are overridden by `seam_trainer`'s class to hand control
  to public hooks of the subclass;
- `BaseTrainer.read_results_csv` reads results.csv with polars (from 8.3.187), which only that method imports on
  the training path; the override reads it with pandas;
- `build_dataloader(..., pin_memory=...)` decides pinning; `train_loader_pin_memory` passes the run's choice;
- `check_amp` (`ultralytics.engine.trainer`) downloads weights to compare AMP with FP32: replaced while training;
- ultralytics wraps the model as `torch.nn.parallel.DistributedDataParallel(model, device_ids=..., ...)` inside
  `_setup_train`; `ddp_wrap` replaces that name while it runs;
- `amp='fp16'` / `'bf16'` strings are taken from 8.4.129 (`AMP_PRECISION_FROM`); older releases fail on them.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any


@functools.cache
def trainer_base() -> Any:
    """ultralytics' DetectionTrainer as `seam_trainer` extends it."""
    from ultralytics.models.yolo.detect import DetectionTrainer

    return seam_trainer(DetectionTrainer)


def seam_trainer(base: type) -> Any:
    """`base` (a DetectionTrainer) with its private set-up methods overridden to call public hooks:
    `join_cpu_process_group()` (True when the subclass joined the process group itself) and
    `setup_train(original)` (runs `original()`, ultralytics' own set-up, and whatever it needs around it)."""

    class SeamDetectionTrainer(base):
        def join_cpu_process_group(self) -> bool:
            return False

        def setup_train(self, original: Callable[[], Any]) -> Any:
            return original()

        def _setup_ddp(self) -> Any:
            if self.join_cpu_process_group():
                return None
            return super()._setup_ddp()

        def _setup_train(self) -> Any:
            return self.setup_train(super()._setup_train)

        def read_results_csv(self) -> dict[str, list[Any]]:
            """results.csv as column -> values, read with pandas (a dependency already) rather than polars, which
            ultralytics imports only here, when it writes the last checkpoint; {} when unreadable."""
            import pandas as pd

            try:
                return pd.read_csv(self.csv).to_dict(orient="list")
            except Exception:  # as ultralytics: no (or an unreadable) results.csv is no results
                return {}

    return SeamDetectionTrainer


AMP_PRECISION_FROM = "8.4.129"  # the first release that takes amp='fp16' / 'bf16'


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
    import ultralytics.models.yolo.detect.train as detect_train

    original = detect_train.build_dataloader
    detect_train.build_dataloader = functools.partial(original, pin_memory=pin)
    try:
        yield
    finally:
        detect_train.build_dataloader = original


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
