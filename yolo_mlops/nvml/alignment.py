"""NVML samples aligned to training steps: each sample's step and whether the profiler was active, judged at the
middle of the interval its averages cover. Pure functions over the sampler's Timeline."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from yolo_mlops.nvml.sampler import Timeline


@dataclass
class AlignedTimeline:
    """A Timeline plus, per sample, its training step (-1 outside steps) and profiler state."""

    timeline: Timeline
    step: np.ndarray  # int64, index into the step sequences, -1 outside every step
    profiler_active: np.ndarray  # bool
    in_training: np.ndarray  # bool: inside [first step start, last step end] (all rows if no steps)
    step_start_ns: np.ndarray  # int64, as given
    step_end_ns: np.ndarray  # int64, as given
    step_profiler_active: np.ndarray  # bool, as given


def sample_midpoints_ns(timeline: Timeline) -> np.ndarray:
    """Where each sample belongs in time: the middle of the interval its averages cover."""
    return timeline.t_ns - timeline.interval_ns // 2


def profiler_windows_ns(
    step_start_ns: np.ndarray, step_end_ns: np.ndarray, profiler_active: np.ndarray
) -> list[tuple[int, int]]:
    """[start, end] of each run of consecutive profiled steps (gaps inside a run count)."""
    order = np.argsort(step_start_ns, kind="stable")
    windows: list[tuple[int, int]] = []
    current: list[int] | None = None
    for i in order:
        if profiler_active[i]:
            if current is None:
                current = [int(step_start_ns[i]), int(step_end_ns[i])]
            else:
                current[1] = max(current[1], int(step_end_ns[i]))
        elif current is not None:
            windows.append((current[0], current[1]))
            current = None
    if current is not None:
        windows.append((current[0], current[1]))
    return windows


def align(
    timeline: Timeline,
    step_start_ns: Sequence[int] | np.ndarray,
    step_end_ns: Sequence[int] | np.ndarray,
    profiler_active: Sequence[bool] | np.ndarray,
) -> AlignedTimeline:
    """Mark every sample with its training step (index into the sequences, -1 outside any
    step) and whether the profiler was active, judged at the sample's interval midpoint.

    The profiler counts as active over a whole run of consecutive profiled steps,
    including the gaps between them (the profiler does not pause there).
    """
    starts = np.asarray(step_start_ns, dtype=np.int64)
    ends = np.asarray(step_end_ns, dtype=np.int64)
    active = np.asarray(profiler_active, dtype=bool)
    if not (starts.shape == ends.shape == active.shape):
        raise ValueError("step_start_ns, step_end_ns and profiler_active must have equal lengths")
    mid = sample_midpoints_ns(timeline)
    step = np.full(mid.shape, -1, np.int64)
    profiled = np.zeros(mid.shape, bool)
    in_training = np.ones(mid.shape, bool)
    if starts.size:
        order = np.argsort(starts, kind="stable")
        sorted_starts, sorted_ends = starts[order], ends[order]
        candidate = np.searchsorted(sorted_starts, mid, side="right") - 1
        valid = candidate >= 0
        inside = np.zeros(mid.shape, bool)
        inside[valid] = mid[valid] <= sorted_ends[candidate[valid]]
        step[inside] = order[candidate[inside]]
        for window_start, window_end in profiler_windows_ns(starts, ends, active):
            profiled |= (mid >= window_start) & (mid <= window_end)
        in_training = (mid >= np.min(starts)) & (mid <= np.max(ends))
    return AlignedTimeline(timeline, step, profiled, in_training, starts, ends, active)
