"""compat.ultralytics against fakes of the older and the newer shape of each API it bridges, and the installed
ultralytics."""

from __future__ import annotations

import inspect
import types
from pathlib import Path

import pytest

from yolo_mlops.compat import ultralytics as ultralytics_compat


class _NewTrainer:
    """ultralytics >= the release that dropped world_size from the private set-up methods."""

    def __init__(self):
        self.calls: list[tuple] = []

    def _setup_ddp(self):
        self.calls.append(("ddp",))

    def _setup_train(self):
        self.calls.append(("train",))
        return "set up"


class _OldTrainer(_NewTrainer):
    """Older releases: both private set-up methods take the world size."""

    def _setup_ddp(self, world_size):  # type: ignore[override]
        self.calls.append(("ddp", world_size))

    def _setup_train(self, world_size):  # type: ignore[override]
        self.calls.append(("train", world_size))
        return "set up"


@pytest.mark.parametrize(("base", "args"), [(_NewTrainer, ()), (_OldTrainer, (2,))], ids=["new", "old"])
def test_set_up_hooks_run_around_either_shape(base, args):
    class Trainer(ultralytics_compat.seam_trainer(base)):
        joined = False

        def join_cpu_process_group(self):
            return self.joined

        def setup_train(self, original):
            self.calls.append(("before",))
            result = original()
            self.calls.append(("after",))
            return result

    trainer = Trainer()
    assert trainer._setup_train(*args) == "set up"
    trainer._setup_ddp(*args)
    trainer.joined = True
    trainer._setup_ddp(*args)  # joined by the hook: ultralytics' own is not called
    assert trainer.calls == [("before",), ("train", *args), ("after",), ("ddp", *args)]


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


def test_a_train_argument_a_release_lacks_reads_as_its_default():
    new = types.SimpleNamespace(args=types.SimpleNamespace(compile="max-autotune", channels_last=True))
    old = types.SimpleNamespace(args=types.SimpleNamespace())
    assert ultralytics_compat.train_arg(new, "compile", False) == "max-autotune"
    assert ultralytics_compat.train_arg(old, "compile", False) is False
    assert ultralytics_compat.train_arg(old, "channels_last") is None


def test_amp_check_skipped_while_open_and_restored():
    import ultralytics.engine.trainer as engine_trainer

    original = engine_trainer.check_amp
    with ultralytics_compat.amp_check_skipped():
        assert engine_trainer.check_amp(object()) is True
    assert engine_trainer.check_amp is original


def test_pin_memory_passed_where_build_dataloader_takes_it():
    import ultralytics.models.yolo.detect.train as detect_train

    original = detect_train.build_dataloader
    assert "pin_memory" in inspect.signature(original).parameters  # the newer shape, installed
    with ultralytics_compat.train_loader_pin_memory(False):
        assert detect_train.build_dataloader.keywords == {"pin_memory": False}
    assert detect_train.build_dataloader is original


def test_pin_memory_set_as_the_module_global_where_build_dataloader_has_no_such_parameter(monkeypatch):
    """The older shape: build_dataloader(dataset, batch, workers, shuffle, rank) reads ultralytics.data.build's
    PIN_MEMORY."""
    import ultralytics.data.build as data_build
    import ultralytics.models.yolo.detect.train as detect_train

    def old_build_dataloader(dataset, batch, workers, shuffle=True, rank=-1):
        return data_build.PIN_MEMORY

    monkeypatch.setattr(detect_train, "build_dataloader", old_build_dataloader)
    monkeypatch.setattr(data_build, "PIN_MEMORY", True, raising=False)
    with ultralytics_compat.train_loader_pin_memory(False):
        assert detect_train.build_dataloader(None, 1, 0) is False
    assert data_build.PIN_MEMORY is True and detect_train.build_dataloader is old_build_dataloader


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


@pytest.mark.parametrize("takes_updates", [True, False], ids=["new", "old"])
def test_strip_optimizer_passes_updates_where_taken(monkeypatch, takes_updates):
    import ultralytics.utils.torch_utils as torch_utils

    calls = []
    if takes_updates:

        def strip(f, s="", updates=None):
            calls.append((f, updates))
            return {"train_results": 1}

    else:

        def strip(f, s=""):  # type: ignore[misc]
            calls.append((f, None))
            return None

    monkeypatch.setattr(torch_utils, "strip_optimizer", strip)
    result = ultralytics_compat.strip_optimizer(Path("best.pt"), updates={"train_results": 1})
    assert calls == [(Path("best.pt"), {"train_results": 1} if takes_updates else None)]
    assert result == ({"train_results": 1} if takes_updates else {})
