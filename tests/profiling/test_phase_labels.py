"""Which phase labels open when: the training callbacks, model hooks and trainer-subclass methods driven
in ultralytics' call order by a stub trainer, with a real torch.profiler window on a tiny CPU model.

Ultralytics' loop per step: on_train_batch_start -> preprocess_batch -> model forward (+loss) -> backward
-> optimizer_step -> on_train_batch_end; per epoch on_train_epoch_start / on_train_epoch_end, with
validation forwards after the epoch's last step (inside the `epoch_end` label, open from an epoch's end to the
next one's start, so the trace shows which step held the boundary). The subclass's parents (DetectionTrainer's
preprocess_batch and optimizer_step) are replaced by no-ops: only the label logic is under test here;
tests/run/test_profile_flow.py checks the labels in a real ultralytics run's trace.
"""

from __future__ import annotations

import gzip
import json
import types

import pytest
import torch

from yolo_mlops.config import ProfilerSettings
from yolo_mlops.labels import PHASE_LABEL_PREFIX
from yolo_mlops.profiling import torch_profiler
from yolo_mlops.run import training

STEP_LABELS = ["data_wait", "preprocess", "forward_loss", "backward", "optimizer_step"]


@pytest.fixture
def trainer_class(monkeypatch):
    from ultralytics.models.yolo.detect import DetectionTrainer

    monkeypatch.setattr(DetectionTrainer, "preprocess_batch", lambda self, batch: batch)
    monkeypatch.setattr(DetectionTrainer, "optimizer_step", lambda self: None)
    return training._make_trainer_class()


def stub_trainer(trainer_class, inst: training._Instrumentation):
    """The attributes the callbacks and subclass methods read, on an instance built without __init__."""
    trainer = object.__new__(trainer_class)
    trainer.model = torch.nn.Sequential(torch.nn.Linear(8, 4), torch.nn.ReLU(), torch.nn.Linear(4, 1))
    trainer.loss_items, trainer.loss_names = None, ["box_loss", "cls_loss", "dfl_loss"]
    trainer.batch_size, trainer.stop = 4, False
    trainer.train_loader = types.SimpleNamespace(dataset=None)  # not a YOLODataset: no image counts
    trainer.instrumentation = inst
    return trainer


class Opened:
    """Records every phase label opened: (step index, label, labels still open at that moment)."""

    def __init__(self, monkeypatch, inst: training._Instrumentation) -> None:
        self.events: list[tuple[int, str, int]] = []

        def recording_phase(name: str):
            self.events.append((inst.timer.steps, name, len(inst._open)))
            return torch_profiler.phase(name)

        monkeypatch.setattr(training, "phase", recording_phase)

    def by_step(self, steps: int) -> list[list[str]]:
        return [[name for step, name, _ in self.events if step == s] for s in range(steps)]


def instrumented(trainer_class, monkeypatch, tmp_path, max_steps: int | None = None, **window: int):
    """A profiler over the window `window` (no shapes, no memory; its trace in tmp_path/profiler), a run's
    instrumentation around it, the Opened record of the labels it opens, and a stub trainer it drives."""
    settings = ProfilerSettings.model_validate({**window, "record_shapes": False, "profile_memory": False})
    profiler = torch_profiler.TrainingProfiler(settings, tmp_path / "profiler", with_cuda=False)
    inst = training._Instrumentation(profiler, max_steps=max_steps, pin_memory=None)
    return profiler, inst, Opened(monkeypatch, inst), stub_trainer(trainer_class, inst)


def run_loop(trainer, inst: training._Instrumentation, epochs: int, batches: int, validation_forward: bool = True):
    """Call the instrumentation the way ultralytics' BaseTrainer._do_train does."""
    x = torch.randn(4, 8)
    inst.on_train_start(trainer)
    for _ in range(epochs):
        inst.on_train_epoch_start(trainer)
        for _ in range(batches):
            inst.on_train_batch_start(trainer)
            trainer.preprocess_batch({"img": x})
            loss = trainer.model(x).sum()
            trainer.loss_items = torch.stack([loss.detach()] * 3)
            loss.backward()
            trainer.optimizer_step()
            inst.on_train_batch_end(trainer)
            if trainer.stop:
                break
        inst.on_train_epoch_end(trainer)
        # only the epoch's end spans validation (while labels are on): no step phase does
        assert [label.name for label in inst._open] in ([], [PHASE_LABEL_PREFIX + "epoch_end"])
        if validation_forward:
            with torch.no_grad():
                trainer.model(x)  # validation: outside a step, so no label
        if trainer.stop:
            break
    inst.on_train_end(trainer)


def test_labels_open_only_inside_the_window_in_step_order(trainer_class, monkeypatch, tmp_path):
    # step 0 waits, step 1 warms up, steps 2-3 are recorded, then the profiler is done (repeat=1)
    profiler, inst, opened, trainer = instrumented(trainer_class, monkeypatch, tmp_path, wait=1, warmup=1, active=2)

    run_loop(trainer, inst, epochs=2, batches=3)

    per_step = opened.by_step(6)
    assert per_step[0] == [] and per_step[4] == [] and per_step[5] == []
    assert per_step[1] == STEP_LABELS and per_step[2] == STEP_LABELS
    # step 3 opens an epoch: the data_wait opened after step 2 is closed at the epoch's end (validation
    # must not count as waiting for data), the epoch_end label covers the work until the next epoch's start, and
    # a new data_wait opens there
    assert per_step[3] == ["data_wait", "epoch_end", *STEP_LABELS]
    assert all(still_open == 0 for _, _, still_open in opened.events)  # labels never nest
    assert inst.timer.result().profiled.tolist() == [False, True, True, True, False, False]
    assert len(inst.step_losses["train/box_loss"]) == 6

    traces = profiler.trace_files()
    assert len(traces) == 1
    names = {e.get("name", "") for e in json.loads(gzip.decompress(traces[0].read_bytes()))["traceEvents"]}
    assert {f"{PHASE_LABEL_PREFIX}{label}" for label in [*STEP_LABELS, "epoch_end"]} <= names
    assert {n for n in names if n.startswith("ProfilerStep#")} == {"ProfilerStep#2", "ProfilerStep#3"}


def test_no_label_without_a_window_and_max_steps_stops_the_trainer(trainer_class, monkeypatch, tmp_path):
    # skip_first=10: the window lies beyond the run, so no step may open a label
    profiler, inst, opened, trainer = instrumented(
        trainer_class, monkeypatch, tmp_path, max_steps=4, skip_first=10, wait=0, warmup=1, active=1
    )

    run_loop(trainer, inst, epochs=3, batches=3)

    assert trainer.stop is True and inst.timer.steps == 4
    assert opened.events == []
    assert not inst.timer.result().profiled.any()
    assert profiler.trace_files() == []


def test_model_forward_outside_a_step_opens_nothing_even_while_recording(trainer_class, monkeypatch, tmp_path):
    profiler, inst, opened, trainer = instrumented(trainer_class, monkeypatch, tmp_path, wait=0, warmup=1, active=2)
    inst.on_train_start(trainer)
    inst.on_train_epoch_start(trainer)
    assert profiler.recording and [name for _, name, _ in opened.events] == ["data_wait"]
    inst.on_train_epoch_end(trainer)
    with torch.no_grad():
        trainer.model(torch.randn(2, 8))  # e.g. a validation forward between epochs
    inst.on_train_end(trainer)
    assert [name for _, name, _ in opened.events] == ["data_wait", "epoch_end"]
