"""Made-up series histories for tests and benchmarks of trend detection: the typed records `trends.history`
reads from MLflow, one run an hour from a fixed start (run ids run0000, run0001, ...)."""

from __future__ import annotations

from yolo_mlops import names
from yolo_mlops.trends.history import HistoryRun

T0_MS = 1_700_000_000_000
HOUR_MS = 3_600_000


def history_run(
    i: int,
    metrics: dict[str, float],
    versions: dict[str, str],
    night: str,
    *,
    series: str = "s",
    label: str = "sim",
    every_ms: int = HOUR_MS,
) -> HistoryRun:
    """The i-th run of a series, `every_ms` after the one before, its step time its step-time metric."""
    return HistoryRun(
        run_id=f"run{i:04d}",
        experiment_id="1",
        start_time_ms=T0_MS + i * every_ms,
        series=series,
        label=label,
        metrics=metrics,
        versions=versions,
        night=night,
        profiled_steps=5,
        step_time_ms=metrics[names.STEP_TIME_P50],
    )
