"""Long-term performance history: series, change points, what changed, and which operators moved.

- `history`: every FINISHED run as a typed record, grouped by series (the `yolo_mlops.series` tag, or
  the identity rebuilt from the params of runs logged before it).
- `changepoint`: change-point detection over one metric (E-divisive means + Student's t).
- `trend`: per series and watched metric: segments, change points, what changed, the nightly verdict.
- `attribution`: per-step operator / kernel / phase deltas between the runs on each side of a change.
- `trend_report`: text tables and the picture.
- `fleet`: one workload on several machines and the machines slower than their peers beyond noise, with the
  figures that explain them (`fleet_stats`: the test; `fleet_evidence`: NVML and host figures; `fleet_moved`:
  phases and operators; `fleet_render`: Markdown, JSON and the picture).
- `drift`: slow drifts (Mann-Kendall, Theil-Sen) kept apart from steps.
- `candidates`: every version boundary tested directly (Welch's t, no search penalty).
- `confirm`: confirmation runs tested against the level before a new regression.
- `power`: the smallest step the detector finds within one night (minimum detectable shift).
- `nightly`: one night of the benchmark suite judged, logged on its runs, and its artifact.
- `commit_range`: the commit range of a regression, for `yolo-mlops bisect`.
- `bounds`: the shared rule for p-value bounds and smallest effects of the commands.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from yolo_mlops import names
from yolo_mlops.errors import ConfigError
from yolo_mlops.tracking import connection, queries
from yolo_mlops.trends.attribution import Attribution, attribute_runs
from yolo_mlops.trends.history import HistoryRun, group_series, load_history
from yolo_mlops.trends.trend import (
    STATUS_ORDER,
    WATCHED,
    DetectionSettings,
    SeriesTrend,
    SeriesVerdict,
    latest_status,
    series_trend,
    verdict,
)

if TYPE_CHECKING:
    from yolo_mlops.tracking.connection import MlflowClient

ATTRIBUTED_METRICS = (names.STEP_TIME_P50, names.IMAGES_PER_S)  # metrics whose change points get attribution

__all__ = [
    "ATTRIBUTED_METRICS",
    "STATUS_ORDER",
    "WATCHED",
    "Attribution",
    "DetectionSettings",
    "HistoryRun",
    "SeriesTrend",
    "SeriesVerdict",
    "attributions",
    "fleet_section",
    "latest_status",
    "load_experiment_series",
    "series_trend",
    "verdict",
]


def load_experiment_series(
    mlflow: MlflowClient, experiment: str, across_machines: bool = False
) -> dict[str, list[HistoryRun]]:
    """The series of an experiment (all pages of its FINISHED runs); a clear error when there are none.
    `across_machines`: one history per workload, every machine's runs in it (only when a user asks)."""
    experiment_id = queries.find_experiment_id(mlflow, experiment)
    if experiment_id is None:
        raise ConfigError(f"experiment {experiment!r} does not exist in {connection.tracking_uri()}")
    records = load_history(mlflow, [experiment_id])
    if not records:
        raise ConfigError(f"experiment {experiment!r} has no finished runs with a series: no history yet")
    return group_series(records, across_machines)


def fleet_section(mlflow: MlflowClient, experiment: str) -> str:
    """The fleet view of an experiment as Markdown (the nightly artifact's "Fleet" section): each workload per
    machine, the slow machine named with its evidence and the phases and operators that differ from its
    peers' (`fleet.explain`: the newest runs' key_averages tables)."""
    from yolo_mlops.trends import fleet

    try:
        report = fleet.load_fleet(mlflow, experiment)
    except ConfigError as exc:
        return f"Experiment `{experiment}`: {exc}"
    return f"Experiment `{experiment}`:\n\n" + fleet.fleet_markdown(fleet.explain(mlflow, report))


def attributions(
    mlflow: MlflowClient, trend: SeriesTrend, metrics: tuple[str, ...] = ATTRIBUTED_METRICS
) -> dict[tuple[str, str], Attribution]:
    """Operator attribution of each change point of the given metrics, keyed by (metric, first run after)."""
    by_id = {r.run_id: r for r in trend.runs}
    profiles: dict = {}  # run id -> profile: change points of several metrics share their runs
    found = {}
    for per_metric in trend.metrics:
        if per_metric.metric not in metrics:
            continue
        for c in per_metric.changes:
            before = [by_id[i] for i in c.before_run_ids]
            after = [by_id[i] for i in c.after_run_ids]
            found[(per_metric.metric, c.run_id)] = attribute_runs(mlflow, before, after, cache=profiles)
    return found
