"""Long-term trends: a series' history from MLflow, and whether its newest run regressed.

A series is every FINISHED run with the same `yolo_mlops.series_key` (same model, data, imgsz, batch,
variant, GPU model and library versions), so only like is compared with like. The newest run is judged
against the median of the runs before it; it is a regression only when it is worse by more than a
relative threshold *and* by more than the series' own noise (3 robust standard deviations, from the MAD),
so one noisy night on a jittery machine does not page anyone.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
from mlflow.tracking import MlflowClient

from yolo_mlops.tracking.names import TAG_PREFIX

# metric -> True when higher is better
WATCHED_METRICS = {"perf/step_time_ms_p50": False, "perf/images_per_s": True}
DEFAULT_WINDOW = 10  # runs before the newest that form the baseline
MIN_HISTORY = 3  # fewer earlier runs than this: no verdict
DEFAULT_THRESHOLD_PCT = 5.0
NOISE_SIGMAS = 3.0


@dataclass(frozen=True)
class SeriesPoint:
    run_id: str
    start_time_ms: int
    value: float


@dataclass(frozen=True)
class TrendVerdict:
    metric: str
    status: str  # "regression" | "improvement" | "stable" | "insufficient_history"
    latest: float
    baseline_median: float | None
    change_pct: float | None  # + means worse, whatever the metric's direction
    noise_pct: float | None
    history_runs: int

    def as_dict(self) -> dict:
        return asdict(self)


def judge(history: list[float], latest: float, metric: str, higher_is_better: bool,
          threshold_pct: float = DEFAULT_THRESHOLD_PCT, window: int = DEFAULT_WINDOW) -> TrendVerdict:
    """Compare `latest` with the last `window` values of `history` (oldest first)."""
    recent = np.asarray(history[-window:], dtype=float)
    if len(recent) < MIN_HISTORY:
        return TrendVerdict(metric, "insufficient_history", latest, None, None, None, len(recent))
    median = float(np.median(recent))
    noise = 1.4826 * float(np.median(np.abs(recent - median)))  # robust sigma: one outlier night can't inflate it
    worse_by = (median - latest) if higher_is_better else (latest - median)
    change_pct = 100.0 * worse_by / median
    noise_pct = 100.0 * noise / median
    beyond_noise = abs(worse_by) > NOISE_SIGMAS * noise
    if change_pct > threshold_pct and beyond_noise:
        status = "regression"
    elif change_pct < -threshold_pct and beyond_noise:
        status = "improvement"
    else:
        status = "stable"
    return TrendVerdict(metric, status, latest, median, change_pct, noise_pct, len(recent))


def series_history(client: MlflowClient, experiment_ids: list[str], series_key: str, metric: str,
                   max_runs: int = 200) -> list[SeriesPoint]:
    """FINISHED runs of one series that logged `metric`, oldest first."""
    runs = client.search_runs(
        experiment_ids,
        filter_string=f"tags.`{TAG_PREFIX}series_key` = '{series_key}' and attributes.status = 'FINISHED'",
        order_by=["attributes.start_time DESC"],
        max_results=max_runs,
    )
    points = [SeriesPoint(r.info.run_id, r.info.start_time, r.data.metrics[metric])
              for r in runs if metric in r.data.metrics]
    return sorted(points, key=lambda p: p.start_time_ms)


def check_run(client: MlflowClient, run_id: str, threshold_pct: float = DEFAULT_THRESHOLD_PCT,
              window: int = DEFAULT_WINDOW) -> list[TrendVerdict]:
    """Judge one finished run against the earlier runs of its series, for each watched metric."""
    run = client.get_run(run_id)
    key = run.data.tags.get(f"{TAG_PREFIX}series_key")
    if key is None:
        raise ValueError(f"run {run_id} has no {TAG_PREFIX}series_key tag")
    verdicts = []
    for metric, higher_is_better in WATCHED_METRICS.items():
        if metric not in run.data.metrics:
            continue
        history = series_history(client, [run.info.experiment_id], key, metric)
        earlier = [p.value for p in history if p.run_id != run_id and p.start_time_ms <= run.info.start_time]
        verdicts.append(judge(earlier, run.data.metrics[metric], metric, higher_is_better, threshold_pct, window))
    return verdicts


def verdict_tags_and_metrics(verdicts: list[TrendVerdict]) -> tuple[dict[str, str], dict[str, float]]:
    """What a checked run records about itself: `yolo_mlops.trend` tag, `trend/*` metrics."""
    order = ["regression", "improvement", "stable", "insufficient_history"]
    overall = min((v.status for v in verdicts), key=order.index, default="insufficient_history")
    tags = {f"{TAG_PREFIX}trend": overall}
    metrics = {}
    for v in verdicts:
        short = v.metric.split("/", 1)[1]
        tags[f"{TAG_PREFIX}trend.{short}"] = v.status
        if v.change_pct is not None:
            metrics[f"trend/{short}_worse_pct"] = v.change_pct
            metrics[f"trend/{short}_noise_pct"] = v.noise_pct
    return tags, metrics
