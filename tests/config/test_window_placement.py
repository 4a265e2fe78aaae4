"""The profiler window against the epochs: which recorded steps hold an epoch boundary, and the placement that
keeps the window inside one epoch where the run allows it (config/steps.py, run/pipeline.place_window)."""

from __future__ import annotations

from yolo_mlops.config import RunSpec, boundary_steps, window_inside_epoch
from yolo_mlops.run.pipeline import place_window
from yolo_mlops.run.preflight import Preflight


def test_the_recorded_steps_that_hold_a_boundary():
    # wait 1, warm-up 1, 4 recorded steps (2 to 5); epochs of 2 steps: steps 2 and 4 are an epoch's first
    assert boundary_steps(0, 1, 1, 4, 1, 2, 8) == [2, 4]
    assert boundary_steps(0, 1, 1, 4, 1, 8, 8) == []  # one epoch
    assert boundary_steps(0, 0, 1, 1, 1, 1, 8) == [1]  # epochs of one step: every step after the first
    assert boundary_steps(0, 1, 1, 2, 2, 3, 16) == [3, 6]  # two cycles: steps 2, 3 and 6, 7


def test_the_window_moves_later_only_as_far_as_needed_and_only_when_it_fits():
    assert window_inside_epoch(0, 1, 1, 3, 1, 4, 8) == 3  # steps 2-4 hold 4: 5-7 do not
    assert window_inside_epoch(2, 1, 1, 3, 1, 8, 16) == 2  # inside already: unchanged
    assert window_inside_epoch(0, 1, 1, 4, 1, 4, 8) is None  # 4 recorded steps never fit the 3 of an epoch
    assert window_inside_epoch(0, 6, 1, 4, 1, 8, 13) == 2  # steps 9-12, the last two of the run
    assert window_inside_epoch(0, 6, 1, 4, 1, 8, 12) is None  # ... which ends a step earlier


def _placed(images: int, batch: int, max_steps: int, ranks: int | None = None, **profiler):
    spec = RunSpec.model_validate(
        {"device": "cpu", "batch": batch, "max_steps": max_steps, "synthetic_images": images, "profiler": profiler}
        | ({"ddp": {"ranks": ranks}} if ranks else {})
    )
    checked = Preflight(device="cpu", train_images=images, epochs=1, steps=max_steps, dataset=None)
    return place_window(spec, checked)


def test_place_window_says_where_the_window_lies():
    spec, line = _placed(32, 4, 8, wait=1, warmup=1, active=4)
    assert spec.profiler.skip_first == 0 and line == "steps 2-5, inside one epoch (epochs of 8 steps)"
    spec, line = _placed(16, 4, 10, wait=1, warmup=1, active=3)  # epochs of 4 steps: 2-4 hold step 4
    assert spec.profiler.skip_first == 3
    assert line == (
        "steps 5-7, inside one epoch (epochs of 4 steps): moved 3 step(s) later than asked (steps 2-4 held the "
        "epoch boundary)"
    )
    # two ranks: each trains 8 of the 16 images, 2 a step: epochs of 4 steps, too short for 5 recorded steps
    spec, line = _placed(16, 4, 8, ranks=2, wait=1, warmup=1, active=5)
    assert spec.profiler.skip_first == 0
    assert line.startswith("steps 2-6 hold the epoch boundary at step(s) 4: epochs of 4 steps leave no room")
