"""The data a series' trend is made of: the metrics watched, the detection settings, the events found (change
points, drifts, version boundaries, operator renames), each metric's and the series' trend, and a night's verdict.
`trend.py` computes them; the reports, the nightly judging and the CLI read them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from yolo_mlops import names
from yolo_mlops.trends import candidates, changepoint, drift
from yolo_mlops.trends.candidates import Candidate
from yolo_mlops.trends.changepoint import Segment
from yolo_mlops.trends.drift import Drift
from yolo_mlops.trends.history import HistoryRun


@dataclass(frozen=True)
class Watched:
    metric: str
    higher_is_better: bool
    unit: str


WATCHED = (
    Watched(names.STEP_TIME_P50, False, "ms"),
    Watched(names.IMAGES_PER_S, True, "img/s"),
    Watched(names.DATA_WAIT_PCT, False, "%"),
    Watched(names.GPU_SM_UTIL_MEAN, True, "%"),
    Watched(names.GPU_DRAM_BW_UTIL_MEAN, True, "%"),
    Watched(names.GPU_MEM_USED_MAX, False, "GiB"),
    Watched(names.GPU_ENERGY_PER_IMAGE, False, "J"),
)
WATCHED_BY_NAME = {w.metric: w for w in WATCHED}


def operator_watched(metric: str) -> Watched:
    """An operator series (`op/cpu/<operator>`, `op/device/<operator>`): ms per profiled step, lower is better."""
    return Watched(metric, False, "ms/step")


def is_operator(metric: str) -> bool:
    return metric.startswith(names.OP_PREFIX)


Direction = Literal["regression", "improvement"]  # the way a metric moved, judged by its higher_is_better
# a series' (or one metric's) verdict for a night; the tag values of names.TREND and names.TREND_PREFIX
Status = Literal["regression", "suspected", "drift", "improvement", "stable", "insufficient_history"]
MIN_HISTORY = 3  # runs before tonight's below which no verdict is given
# suspected: a regression tonight's confirmation runs did not repeat (set by the benchmark flow's confirmation)
STATUS_ORDER: tuple[Status, ...] = ("regression", "suspected", "drift", "improvement", "stable", "insufficient_history")


@dataclass(frozen=True)
class DetectionSettings:
    window: int = changepoint.DEFAULT_WINDOW
    max_pvalue: float = changepoint.DEFAULT_MAX_PVALUE
    min_magnitude: float = changepoint.DEFAULT_MIN_MAGNITUDE
    drift_pvalue: float = drift.DEFAULT_DRIFT_PVALUE  # Mann-Kendall significance of a drift
    candidate_pvalue: float = candidates.DEFAULT_CANDIDATE_PVALUE  # per version boundary: false-alarm rate
    confirm_pvalue: float = 0.001  # one-sided: confirmation runs the bad way of the level before (trends.confirm)
    outlier_sds: float = 5.0  # an operator value this many robust sds from its night's median is set aside (0: none)


@dataclass(frozen=True)
class VersionChange:
    name: str  # commit, torch, cuda, cudnn, ultralytics, driver, python
    before: tuple[str, ...]  # values in the segment before (most common first)
    after: tuple[str, ...]

    def text(self) -> str:
        if self.name == "commit":
            return f"commit {_short(self.before[-1])}..{_short(self.after[0])}"
        return f"{self.name} {'/'.join(self.before)} -> {'/'.join(self.after)}"


@dataclass(frozen=True)
class ChangeEvent:
    metric: str
    index: int  # position of the first run after the change in the metric's points
    run_id: str  # first run after the change
    start_time_ms: int
    mean_before: float
    mean_after: float
    change_pct: float  # + = the value went up
    pvalue: float
    direction: Direction
    what_changed: tuple[VersionChange, ...]
    before_run_ids: tuple[str, ...]  # the segment before (oldest first)
    after_run_ids: tuple[str, ...]  # the segment after

    def what_changed_text(self) -> str:
        return ", ".join(c.text() for c in self.what_changed) or "no recorded version changed"


@dataclass(frozen=True)
class DriftEvent:
    metric: str
    run_id: str  # first run of the drift region
    start_time_ms: int
    direction: Direction  # the way the metric drifts
    fit: Drift

    def text(self, unit: str) -> str:
        f = self.fit
        week = "" if f.slope_per_week is None else f", {f.pct_per_week:+.2f}%/week"
        return (
            f"{self.metric} drift {f.pct_per_100_runs:+.2f}% per 100 runs{week} ({f.total_pct:+.1f}% so far over "
            f"{f.end - f.start} runs, level {f.level:.4g} {unit}, p={f.pvalue:.2g}) {self.direction} since run "
            f"{self.run_id}"
        )


@dataclass(frozen=True)
class CandidateEvent:
    metric: str
    run_id: str  # first run with the new versions
    start_time_ms: int
    direction: Direction  # the way the mean moved, whether or not beyond noise
    test: Candidate
    at_change_point: bool  # a change point starts at the same run (reported there)

    def text(self, unit: str) -> str:
        c = self.test
        verdict = "moved" if c.moved else "no shift beyond noise"
        return (
            f"{self.metric} at {c.what_changed_text()}: {c.change_pct:+.1f}% ({c.mean_before:.4g} -> "
            f"{c.mean_after:.4g} {unit}, {c.size_before} vs {c.size_after} runs, Welch p={c.pvalue:.2g}) "
            f"{verdict}" + (f", {self.direction}" if c.moved else "") + f" from run {self.run_id}"
        )


@dataclass(frozen=True)
class MetricTrend:
    metric: str
    higher_is_better: bool
    unit: str
    run_ids: tuple[str, ...]
    times_ms: tuple[int, ...]
    values: tuple[float, ...]
    segments: tuple[Segment, ...]
    changes: tuple[ChangeEvent, ...]
    runs_without_metric: int  # runs of the series that did not log this metric
    drift: DriftEvent | None = None  # a significant drift since the last level change (or over several)
    candidates: tuple[CandidateEvent, ...] = ()  # every version boundary, tested directly
    renamed_from: str | None = None  # an operator series joined across a rename: the old operator's metric
    set_aside: tuple[str, ...] = ()  # runs whose value was an outlier of its night (op_series.set_aside): gaps


@dataclass(frozen=True)
class RenameEvent:
    """One operator vanished and another appeared at the same run: a rename candidate (a torch release renaming
    an operator), judged as one series joined across the run (the old operator's values before it, the new
    one's from it), not as one operator gone and another new at full size."""

    old: str  # the operator metric that vanished
    new: str  # the one that appeared
    run_id: str  # the first run with the new operator
    start_time_ms: int
    what_changed: tuple[VersionChange, ...]
    before_ms: float  # the old operator's mean over its segment before the run
    after_ms: float  # the new operator's mean over its segment from the run

    def what_changed_text(self) -> str:
        return ", ".join(c.text() for c in self.what_changed) or "no recorded version changed"


@dataclass(frozen=True)
class SeriesTrend:
    series: str
    label: str
    runs: tuple[HistoryRun, ...]
    metrics: tuple[MetricTrend, ...]
    settings: DetectionSettings = DetectionSettings()
    operators: tuple[MetricTrend, ...] = ()  # operator series (op/*: op_series.select), judged as one family
    renames: tuple[RenameEvent, ...] = ()  # operators joined across a rename (their series is the new one's)

    def metric(self, name: str) -> MetricTrend | None:
        return next((m for m in (*self.metrics, *self.operators) if m.metric == name), None)


@dataclass(frozen=True)
class SeriesVerdict:
    series: str
    label: str
    status: Status
    new_changes: tuple[ChangeEvent, ...] = ()  # change points first seen in tonight's runs
    new_drifts: tuple[DriftEvent, ...] = ()  # drifts that became significant (or changed slope) tonight
    new_candidates: tuple[CandidateEvent, ...] = ()  # version boundaries among tonight's runs that moved a metric
    reason: str = ""
    per_metric: dict[str, Status] = field(default_factory=dict)  # watched metrics, then operator series
    new_renames: tuple[RenameEvent, ...] = ()  # operator rename candidates among tonight's runs


def _short(commit: str) -> str:
    return commit[:8] if len(commit) >= 16 else commit
