"""How many epochs and steps a run trains: the arithmetic preflight checks the profiler window against."""

from __future__ import annotations

import math


def steps_per_epoch(train_images: int, batch: int) -> int:
    return math.ceil(train_images / batch)  # ultralytics' train loader keeps the last partial batch


def resolve_steps(train_images: int, batch: int, epochs: int | None, max_steps: int | None) -> tuple[int, int]:
    """(epochs, steps) of a run. max_steps alone: exactly max_steps steps, in as many epochs as that takes;
    epochs alone: whole epochs; both: the epochs, cut short at max_steps; neither: one epoch."""
    per_epoch = steps_per_epoch(train_images, batch)
    if epochs is None:
        epochs = math.ceil(max_steps / per_epoch) if max_steps is not None else 1
    steps = per_epoch * epochs
    return epochs, steps if max_steps is None else min(steps, max_steps)
