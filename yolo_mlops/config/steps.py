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


def boundary_steps(
    skip_first: int, wait: int, warmup: int, active: int, repeat: int, per_epoch: int, steps: int
) -> list[int]:
    """The recorded steps of a profiler window (0-based training steps, as ProfilerStep#N numbers them) that hold
    an epoch boundary: the first step of every epoch after the first, whose profiler step also spans the work
    between the epochs (validation, the checkpoint, the next epoch's start)."""
    cycle = wait + warmup + active
    recorded = [skip_first + c * cycle + wait + warmup + k for c in range(repeat) for k in range(active)]
    return [s for s in recorded if s < steps and s > 0 and per_epoch > 0 and s % per_epoch == 0]


def window_inside_epoch(
    skip_first: int, wait: int, warmup: int, active: int, repeat: int, per_epoch: int, steps: int
) -> int | None:
    """The `skip_first` that keeps every recorded step of the window away from an epoch boundary: the given one
    when it already does, else the earliest later one whose window still ends within the run's `steps`; None when
    none does (an epoch holds fewer steps than the window records in a row, or the run ends first)."""
    cycle = wait + warmup + active
    for first in range(skip_first, max(steps - cycle * repeat, skip_first) + 1):
        if first + cycle * repeat > steps:
            break
        if not boundary_steps(first, wait, warmup, active, repeat, per_epoch, steps):
            return first
    return None
