"""The operators that make up a profiled step, as per-step metrics a run logs (`op/*`, names.operator_metric).

From a run's key_averages tables (pandas frames, `profiling.torch_profiler._frame`): every operator's self CPU
time (`key_averages_self_cpu`) and, on GPUs, self device time (`key_averages_self_device`), summed over its
rows, divided by the profiled steps (the `ProfilerStep*` row's calls) and given in ms per profiled step.

Which operators a run logs: every one whose self time is at least FLOOR_SHARE (1%) of the profiled step, at
least the MIN_LOGGED (20) largest of each table and at most MAX_LOGGED (30) of each: the operators a series judges
(trends/op_series.py), and no more, since every metric a run logs is read back with every run of a series'
history. `op/floor_ms` says where the run cut (the largest self time left out; 0 when nothing was): an operator
a run with `op/floor_ms` did not log took at most that, which a series reads as 0 where its level is well above
the cut and as a gap where it is not (an operator near the 20th place moves in and out); a run without
`op/floor_ms` logged no operator (no tables): a gap in every operator series.

Pure functions over frames: no torch, no MLflow.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from yolo_mlops import names

if TYPE_CHECKING:
    import pandas as pd

PROFILER_STEP_ROW = "ProfilerStep*"
FLOOR_SHARE = 0.01  # operators at this share of the profiled step or more are logged
MIN_LOGGED = 20  # and at least this many of each table (the largest)
MAX_LOGGED = 30  # and at most this many of each table: the cost in MLflow metrics per run is bounded

TABLE_COLUMNS = (("operator", "self_cpu_time_us"), ("device", "self_device_time_us"))


def profiled_steps(frames: list[pd.DataFrame], fallback: int | None = None) -> int | None:
    """The profiled steps the tables cover: the `ProfilerStep*` row's calls, else `fallback`."""
    for frame in frames:
        if "name" in frame and "calls" in frame:
            rows = frame[frame["name"] == PROFILER_STEP_ROW]
            if len(rows) and int(rows["calls"].iloc[0]) > 0:
                return int(rows["calls"].iloc[0])
    return fallback


def profiled_step_ms(frames: list[pd.DataFrame], steps: int) -> float | None:
    """The profiled step's host time (the `ProfilerStep*` row's CPU time per step), ms; None without the row."""
    for frame in frames:
        if "name" in frame and "cpu_time_us" in frame:
            rows = frame[frame["name"] == PROFILER_STEP_ROW]
            if len(rows) and float(rows["cpu_time_us"].iloc[0]) > 0:
                return float(rows["cpu_time_us"].iloc[0]) / steps / 1000.0
    return None


def per_step(frame: pd.DataFrame, column: str, steps: int) -> dict[str, float]:
    """Operator name -> ms per profiled step of one table's column (rows of one name summed: a by-shape table
    repeats names), without the ProfilerStep* row and without operators that took no time."""
    summed = frame.groupby("name")[column].sum()
    return {str(n): float(us) / steps / 1000.0 for n, us in summed.items() if n != PROFILER_STEP_ROW and us > 0}


def operator_metrics(
    host: pd.DataFrame | None, device: pd.DataFrame | None, fallback_steps: int | None = None
) -> dict[str, float]:
    """The run's `op/*` metrics: the profiled step (`op/step_ms`), the floor it cut at (`op/floor_ms`) and the
    operators kept (module doc); empty when the run has no tables or no profiled step."""
    frames = [f for f in (host, device) if f is not None and len(f)]
    steps = profiled_steps(frames, fallback_steps)
    if not frames or not steps:
        return {}
    step_ms = profiled_step_ms(frames, steps)
    metrics: dict[str, float] = {}
    cut = 0.0  # the largest self time of an operator left out (0: every operator of the tables logged)
    for (kind, column), frame in zip(TABLE_COLUMNS, (host, device), strict=True):
        if frame is None or column not in frame or not len(frame):
            continue
        times = sorted(per_step(frame, column, steps).items(), key=lambda kv: -kv[1])
        if not times:
            continue
        if step_ms is None:  # no step row: the operators' sum stands for the step
            step_ms = sum(ms for _, ms in times)
        floor = FLOOR_SHARE * step_ms
        kept = [kv for i, kv in enumerate(times) if i < MAX_LOGGED and (i < MIN_LOGGED or kv[1] >= floor)]
        for operator, ms in kept:
            metric = names.operator_metric(kind, operator)
            metrics[metric] = metrics.get(metric, 0.0) + ms  # names that differ only in characters MLflow refuses
        if len(times) > len(kept):
            cut = max(cut, times[len(kept)][1])
    if not metrics or step_ms is None:
        return {}
    metrics[names.OP_STEP_MS] = step_ms
    metrics[names.OP_FLOOR_MS] = cut
    return metrics
