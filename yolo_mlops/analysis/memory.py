"""Allocator memory per step from `[memory]` instant events (profile_memory=True traces)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from yolo_mlops.analysis.gpu import CHUNK_ELEMENTS
from yolo_mlops.analysis.host import Steps
from yolo_mlops.analysis.trace_loader import CUDA_DEVICE_TYPE, MemoryEvents

# "Steadily rising": at least this many steps with a peak, no step's peak more than
# MEMORY_DIP_TOLERANCE below the previous one, and the last peak above the first by at least
# MEMORY_GROWTH_MIN_BYTES and MEMORY_GROWTH_MIN_FRACTION of the first (allocator noise is smaller).
MEMORY_GROWTH_MIN_STEPS = 3
MEMORY_DIP_TOLERANCE = 0.001
MEMORY_GROWTH_MIN_BYTES = 16 * 2**20
MEMORY_GROWTH_MIN_FRACTION = 0.02
# ... and every step contributes: each step's rise is at least this fraction of the mean rise per step, so
# one jump (e.g. a step that spans an epoch boundary and builds a new loader) is not a leak.
MEMORY_STEP_RISE_MIN_FRACTION = 0.25


@dataclass
class MemoryProfile:
    device: str  # "cuda" or "cpu": which allocator the numbers describe
    peak_allocated_bytes: float
    peak_reserved_bytes: float | None
    step_peak_allocated_bytes: list[float | None]  # per step, None when the step had no event
    step_peak_reserved_bytes: list[float | None]
    growth_bytes_per_step: float | None  # least-squares slope of the per-step peaks
    steadily_rising: bool


def memory_profile(mem: MemoryEvents, steps: Steps) -> MemoryProfile | None:
    if mem.ts.size == 0:
        return None
    on_cuda = mem.device_type == CUDA_DEVICE_TYPE
    device = "cuda" if on_cuda.any() else "cpu"
    sel = on_cuda if on_cuda.any() else mem.device_type != CUDA_DEVICE_TYPE
    if sel.all():  # the usual case, one device: the columns as they are, not copies of a big trace's
        ts, allocated, reserved = mem.ts, mem.total_allocated, mem.total_reserved
    else:
        ts, allocated, reserved = mem.ts[sel], mem.total_allocated[sel], mem.total_reserved[sel]
    if not on_cuda.any():
        # the CPU allocator keeps no cache: its "Total Reserved" is always 0, which is not a measurement
        reserved = np.full_like(allocated, np.nan)
    if np.all(np.isnan(allocated)):
        return None
    step_alloc = _peak_per_step(steps, ts, allocated)
    step_reserved = _peak_per_step(steps, ts, reserved)
    slope, rising = growth_trend(step_alloc)
    return MemoryProfile(
        device=device,
        peak_allocated_bytes=float(np.nanmax(allocated)),
        peak_reserved_bytes=None if np.all(np.isnan(reserved)) else float(np.nanmax(reserved)),
        step_peak_allocated_bytes=step_alloc,
        step_peak_reserved_bytes=step_reserved,
        growth_bytes_per_step=slope,
        steadily_rising=rising,
    )


def _peak_per_step(steps: Steps, ts: np.ndarray, values: np.ndarray) -> list[float | None]:
    peaks = np.full(steps.count, -np.inf)
    # a chunk at a time (a maximum does not depend on the order): a big trace's million events make int64 step
    # indices of one chunk, not of the whole trace
    for at in range(0, ts.size, CHUNK_ELEMENTS):
        idx = steps.index_of(ts[at : at + CHUNK_ELEMENTS])
        chunk = values[at : at + CHUNK_ELEMENTS]
        valid = (idx >= 0) & ~np.isnan(chunk)
        np.maximum.at(peaks, idx[valid], chunk[valid])
    return [float(p) if np.isfinite(p) else None for p in peaks]


def growth_trend(step_peaks: list[float | None]) -> tuple[float | None, bool]:
    """(slope in bytes/step, steadily rising?) over the steps that have a peak."""
    points = [(i, p) for i, p in enumerate(step_peaks) if p is not None]
    if len(points) < 2:
        return None, False
    x = np.array([i for i, _ in points], dtype=float)
    y = np.array([p for _, p in points], dtype=float)
    dx = x - x.mean()
    slope = float((dx * (y - y.mean())).sum() / (dx * dx).sum())  # least squares
    if len(points) < MEMORY_GROWTH_MIN_STEPS:
        return slope, False
    steps = np.diff(y)
    never_drops = bool(np.all(steps >= -MEMORY_DIP_TOLERANCE * np.abs(y[:-1])))
    rise = y[-1] - y[0]
    big_enough = bool(rise >= MEMORY_GROWTH_MIN_BYTES and rise >= MEMORY_GROWTH_MIN_FRACTION * abs(y[0]))
    every_step = bool(np.all(steps >= MEMORY_STEP_RISE_MIN_FRACTION * rise / steps.size))
    return slope, never_drops and big_enough and every_step
