"""compat.ultralytics: its overrides and patches, against a fake trainer and the installed ultralytics."""

from __future__ import annotations

import inspect
from typing import Any

from yolo_mlops.compat import ultralytics as ultralytics_compat


class _Trainer:
    """The shape of ultralytics' private set-up methods across the declared range."""

    def __init__(self):
        self.calls: list[tuple] = []

    def _setup_ddp(self):
        self.calls.append(("ddp",))

    def _setup_train(self):
        self.calls.append(("train",))
        return "set up"


def test_set_up_hooks_run_around_ultralytics_own():
    base: Any = ultralytics_compat.seam_trainer(_Trainer)

    class Trainer(base):
        joined = False

        def join_cpu_process_group(self):
            return self.joined

        def setup_train(self, original):
            self.calls.append(("before",))
            result = original()
            self.calls.append(("after",))
            return result

    trainer = Trainer()
    assert trainer._setup_train() == "set up"
    trainer._setup_ddp()
    trainer.joined = True
    trainer._setup_ddp()  # joined by the hook: ultralytics' own is not called
    assert trainer.calls == [("before",), ("train",), ("after",), ("ddp",)]


def test_the_installed_trainer_has_the_methods_the_seam_overrides():
    from ultralytics.models.yolo.detect import DetectionTrainer

    for name in ("_setup_ddp", "_setup_train", "get_dataloader", "preprocess_batch", "optimizer_step", "final_eval"):
        assert callable(getattr(DetectionTrainer, name)), name
    assert issubclass(ultralytics_compat.trainer_base(), DetectionTrainer)


def test_results_csv_read_with_pandas(tmp_path):
    class Base:
        pass

    trainer = ultralytics_compat.seam_trainer(Base)()
    trainer.csv = tmp_path / "results.csv"
    assert trainer.read_results_csv() == {}  # none yet
    trainer.csv.write_text("epoch,loss\n1,0.5\n2,0.25\n")
    assert trainer.read_results_csv() == {"epoch": [1, 2], "loss": [0.5, 0.25]}


def test_amp_check_skipped_while_open_and_restored():
    import ultralytics.engine.trainer as engine_trainer

    original = engine_trainer.check_amp
    with ultralytics_compat.amp_check_skipped():
        assert engine_trainer.check_amp(object()) is True
    assert engine_trainer.check_amp is original


def test_pin_memory_passed_to_build_dataloader():
    import ultralytics.models.yolo.detect.train as detect_train

    original = detect_train.build_dataloader
    assert "pin_memory" in inspect.signature(original).parameters
    with ultralytics_compat.train_loader_pin_memory(False):
        patched: Any = detect_train.build_dataloader
        assert patched.keywords == {"pin_memory": False}
    assert detect_train.build_dataloader is original


def test_ddp_wrap_hands_ultralytics_call_to_the_wrapper_and_puts_the_class_back():
    import torch.nn.parallel as parallel

    original = parallel.DistributedDataParallel
    seen = []

    def wrap(ddp_class, module, device_ids, **kwargs):
        seen.append((ddp_class, module, device_ids, kwargs))
        return "wrapped"

    with ultralytics_compat.ddp_wrap(wrap):
        assert parallel.DistributedDataParallel("model", device_ids=[0], find_unused_parameters=True) == "wrapped"
    assert parallel.DistributedDataParallel is original
    assert seen == [(original, "model", [0], {"find_unused_parameters": True})]
