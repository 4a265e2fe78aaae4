"""Which operators, kernels and step phases account for a shift in step time.

Each run's profile is normalised per profiled step: self time of every operator (host, from the
`key_averages_self_cpu` table) and on the device (`key_averages_self_device`, GPU runs), divided by the
number of profiled steps (the `ProfilerStep*` row's call count, else profiler.active x repeat), and the
host time of each step phase (data wait, forward+loss, backward, optimizer) from the run's trace analysis.
Between the runs before and after a change point, each entry's mean delta (ms/step) is ranked by how much
of the step-time shift it explains, with how consistently the runs on each side differ.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Literal

import numpy as np

from yolo_mlops import names
from yolo_mlops.analysis import operators
from yolo_mlops.labels import PHASE_LABEL_PREFIX
from yolo_mlops.tracking import queries

if TYPE_CHECKING:
    import pandas as pd

    from yolo_mlops.tracking.connection import MlflowClient
    from yolo_mlops.trends.trend import SeriesTrend

HOST_TABLE = "key_averages_self_cpu"
DEVICE_TABLE = "key_averages_self_device"
ATTRIBUTED_METRICS = (names.STEP_TIME_P50, names.IMAGES_PER_S)  # metrics whose change points get attribution
MAX_RUNS_PER_SIDE = 5  # runs nearest the change point on each side whose tables are read

# what a profile entry measures: a host operator's self time, a device kernel's self time, the host time of a
# step phase (the phase labels); a trace's profile (`compare` of two traces) has host operators' inclusive time
EntryKind = Literal["operator", "device", "phase", "operator (inclusive)"]
Key = tuple[EntryKind, str]  # (kind, name) of a profile entry


@dataclass(frozen=True)
class RunProfile:
    """Per-step times of one run (or trace), in ms per profiled step."""

    run_id: str  # MLflow run id, or the trace path
    steps: int
    step_ms: float | None
    entries: dict[Key, float]  # (kind, name) -> ms/step


@dataclass(frozen=True)
class Contribution:
    kind: EntryKind
    name: str
    before_ms: float  # mean ms/step over the runs before
    after_ms: float
    delta_ms: float
    share_pct: float | None  # of the step-time shift (None when step time did not move)
    consistency: float | None  # fraction of after-runs beyond the before-median in the delta's direction
    pvalue: float | None  # Mann-Whitney U, two-sided (None with fewer than 2 runs on a side)


@dataclass(frozen=True)
class Attribution:
    before_runs: tuple[str, ...]
    after_runs: tuple[str, ...]
    step_ms_before: float | None
    step_ms_after: float | None
    contributions: tuple[Contribution, ...]  # most of the shift first
    runs_without_tables: tuple[str, ...] = ()
    note: str = ""

    @property
    def shift_ms(self) -> float | None:
        if self.step_ms_before is None or self.step_ms_after is None:
            return None
        return self.step_ms_after - self.step_ms_before

    def to_dict(self) -> dict:
        data = asdict(self)
        data["shift_ms"] = self.shift_ms
        return data

    def summary(self, top: int = 3) -> str:
        if not self.contributions:
            return self.note or "no attribution"
        parts = [f"{c.name} {c.delta_ms:+.2f} ms/step" for c in self.contributions[:top]]
        return ", ".join(parts)


def profile_from_tables(
    run_id: str,
    host: pd.DataFrame | None,
    device: pd.DataFrame | None,
    trace_json: str | None,
    profiled_steps: int | None,
    step_ms: float | None,
    rank: int | None = None,
) -> RunProfile | None:
    """A run's profile from its key_averages tables (pandas frames) and trace analysis JSON (phases of `rank`,
    else of its first rank)."""
    if host is None and device is None:
        return None
    frames = [f for f in (host, device) if f is not None]
    steps = operators.profiled_steps(frames, profiled_steps)
    if not steps:
        return None
    entries: dict[Key, float] = {}
    tables: tuple[tuple[EntryKind, pd.DataFrame | None, str], ...] = (
        ("operator", host, "self_cpu_time_us"),
        ("device", device, "self_device_time_us"),
    )
    for kind, frame, column in tables:
        if frame is None or column not in frame:
            continue
        summed = frame.groupby("name")[column].sum()  # one row per name (by-shape tables would repeat names)
        for name, us in summed.items():
            if name != operators.PROFILER_STEP_ROW and us:
                entries[(kind, str(name))] = float(us) / steps / 1000.0
    trace_step_ms = None
    analysis = _stored_analysis(trace_json)
    ranks = analysis.ranks if analysis is not None else []
    chosen = next((r for r in ranks if r.rank == rank), ranks[0] if ranks else None)
    per_step = chosen.steps if chosen is not None else []
    if per_step:
        for category in {c for s in per_step for c in s.host_us}:
            ms = float(np.mean([s.host_us.get(category, 0.0) for s in per_step])) / 1000.0
            entries[("phase", category.removeprefix(PHASE_LABEL_PREFIX))] = ms
        trace_step_ms = float(np.mean([s.duration_us for s in per_step])) / 1000.0
    return RunProfile(run_id, steps, trace_step_ms if trace_step_ms is not None else step_ms, entries)


def _stored_analysis(trace_json: str | None):
    """The run's stored trace analysis (a TraceAnalysis; older runs' files lack some fields), or None when
    the run has none or it cannot be read: the phases are then left out of the profile."""
    if not trace_json:
        return None
    from yolo_mlops.analysis.stored import StoredAnalysisError, trace_analysis_from_json

    try:
        return trace_analysis_from_json(trace_json)
    except StoredAnalysisError:
        return None


def profile_from_run(
    mlflow: MlflowClient, run_id: str, profiled_steps: int | None, step_ms: float | None, rank: int | None = None
) -> RunProfile | None:
    """A logged run's profile; None when it has no key_averages tables (runs logged before they existed). A
    data-parallel job's is its `rank`'s, by default its slowest rank's (the one its perf/* headline is over)."""
    folder = "" if rank is None else f"{names.rank_folder(rank)}/"
    host = queries.load_run_table(mlflow, run_id, names.profiler_table(folder + HOST_TABLE))
    device = queries.load_run_table(mlflow, run_id, names.profiler_table(folder + DEVICE_TABLE))
    if host is None and device is None and rank is None:
        slowest = queries.run_metric(mlflow, run_id, names.SLOWEST_RANK)
        if slowest is not None:
            return profile_from_run(mlflow, run_id, profiled_steps, step_ms, int(slowest))
    trace = queries.load_artifact_text(mlflow, run_id, names.TRACE_ANALYSIS_JSON)
    return profile_from_tables(run_id, host, device, trace, profiled_steps, step_ms, rank)


def profile_from_trace(path: str, analysis) -> RunProfile:
    """A trace file's profile (yolo_mlops.analysis.TraceAnalysis of it): phases, host operators (inclusive
    time: traces carry no self time) and kernels, per profiled step of the first rank."""
    rank = analysis.ranks[0]
    steps = max(len(rank.steps), 1)
    entries: dict[Key, float] = {}
    for op in rank.top_host_ops:
        entries[("operator (inclusive)", op.name)] = op.time_us / steps / 1000.0
    for kernel in rank.top_kernels:
        entries[("device", kernel.name)] = kernel.time_us / steps / 1000.0
    for s in rank.steps:
        for category, us in s.host_us.items():
            key: Key = ("phase", category.removeprefix(PHASE_LABEL_PREFIX))
            entries[key] = entries.get(key, 0.0) + us / steps / 1000.0
    step_ms = rank.step_time.mean_us / 1000.0 if rank.step_time else None
    return RunProfile(path, steps, step_ms, entries)


def attribute(before: list[RunProfile], after: list[RunProfile], top: int | None = 15) -> Attribution:
    """Rank every operator/kernel/phase by the part of the step-time shift its per-step delta explains."""
    b_step = _mean([p.step_ms for p in before])
    a_step = _mean([p.step_ms for p in after])
    shift = None if b_step is None or a_step is None else a_step - b_step
    keys = sorted({k for p in before + after for k in p.entries})
    rows = []
    for kind, name in keys:
        b = np.array([p.entries.get((kind, name), 0.0) for p in before])
        a = np.array([p.entries.get((kind, name), 0.0) for p in after])
        delta = float(a.mean() - b.mean())
        if delta == 0.0:
            continue
        rows.append(
            Contribution(
                kind=kind,
                name=name,
                before_ms=float(b.mean()),
                after_ms=float(a.mean()),
                delta_ms=delta,
                share_pct=100.0 * delta / shift if shift else None,
                consistency=_consistency(b, a, delta),
                pvalue=_mann_whitney(b, a),
            )
        )
    sign = 1.0 if (shift or 0.0) >= 0 else -1.0
    # phases partition the step, operators and device times are finer views: each kind is ranked on its own
    # merit, so the list interleaves them by how much of the shift they explain
    rows.sort(key=lambda c: (-sign * c.delta_ms, c.kind, c.name))
    return Attribution(
        tuple(p.run_id for p in before),
        tuple(p.run_id for p in after),
        b_step,
        a_step,
        tuple(rows if top is None else rows[:top]),
    )


def attribute_runs(
    mlflow: MlflowClient, before: list, after: list, top: int = 15, cache: dict[str, RunProfile | None] | None = None
) -> Attribution:
    """Attribution between two groups of HistoryRuns (nearest MAX_RUNS_PER_SIDE to the change on each side);
    runs without key_averages tables are left out and named; too few on a side: the note says so.
    `cache` (run id -> profile) is shared by the change points of one report, so each run is read once."""
    before, after = before[-MAX_RUNS_PER_SIDE:], after[:MAX_RUNS_PER_SIDE]
    cache = {} if cache is None else cache
    profiles_b: list[RunProfile] = []
    profiles_a: list[RunProfile] = []
    missing: list[str] = []
    for records, profiles in ((before, profiles_b), (after, profiles_a)):
        if records is after and not profiles_b:
            break  # nothing to compare the after side with: do not download it
        for r in records:
            if r.run_id not in cache:
                cache[r.run_id] = profile_from_run(mlflow, r.run_id, r.profiled_steps, r.step_time_ms)
            profile = cache[r.run_id]
            (profiles.append(profile) if profile is not None else missing.append(r.run_id))
    if not profiles_b or not profiles_a:
        side = "before" if not profiles_b else "after"
        return Attribution(
            tuple(r.run_id for r in before),
            tuple(r.run_id for r in after),
            None,
            None,
            (),
            tuple(missing),
            f"no attribution: no run {side} the change has key_averages tables",
        )
    result = attribute(profiles_b, profiles_a, top)
    return Attribution(
        result.before_runs,
        result.after_runs,
        result.step_ms_before,
        result.step_ms_after,
        result.contributions,
        tuple(missing),
    )


def _mean(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return float(np.mean(known)) if known else None


def _consistency(before: np.ndarray, after: np.ndarray, delta: float) -> float | None:
    if not len(before) or not len(after):
        return None
    median = float(np.median(before))
    beyond = after > median if delta > 0 else after < median
    return float(beyond.mean())


def _mann_whitney(before: np.ndarray, after: np.ndarray) -> float | None:
    if len(before) < 2 or len(after) < 2:
        return None
    if np.all(before == before[0]) and np.all(after == before[0]):
        return 1.0
    from scipy.stats import mannwhitneyu  # scipy comes with mlflow

    return float(mannwhitneyu(after, before, alternative="two-sided").pvalue)


def change_point_attributions(
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
