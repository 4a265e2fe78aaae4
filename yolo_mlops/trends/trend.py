"""Change points of each watched metric over a series' whole history, what changed at each, and the verdict.

Points are individual runs, ordered by start time. A benchmark night's repeats are kept as separate points
rather than averaged per night: the detector's significance test then sees the run-to-run noise (a night
of 3 repeats gives 3 points, so a night has its own noise estimate), short histories still have enough
points to test, and a change point lands on the first run of the night it started.

The verdict depends only on the history: a series' newest change point is *new* when its after-segment
starts among tonight's runs. Re-running the detection on the same history gives the same answer, and a
change point fires on the night it appears, not on every night after it.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, replace

import numpy as np

from yolo_mlops import names
from yolo_mlops.stats import holm_adjusted
from yolo_mlops.trends import candidates, changepoint, drift, op_series
from yolo_mlops.trends.history import HistoryRun
from yolo_mlops.trends.trend_model import (
    MIN_HISTORY,
    STATUS_ORDER,
    WATCHED,
    CandidateEvent,
    ChangeEvent,
    DetectionSettings,
    Direction,
    DriftEvent,
    MetricTrend,
    RenameEvent,
    SeriesTrend,
    SeriesVerdict,
    Status,
    VersionChange,
    Watched,
    operator_watched,
)
from yolo_mlops.trends.trend_model import WATCHED_BY_NAME as WATCHED_BY_NAME  # the model's names, read as trend.*
from yolo_mlops.trends.trend_model import is_operator as is_operator


def what_changed(before: list[HistoryRun], after: list[HistoryRun]) -> tuple[VersionChange, ...]:
    """Version dimensions whose values differ between the runs before and after a change point."""
    changes = []
    for name in before[0].versions if before else ():
        b = _ranked([r.versions.get(name, "?") for r in before])
        a = _ranked([r.versions.get(name, "?") for r in after])
        if set(b) != set(a):
            if name == "commit":  # the suspect range: last commit before .. first commit after
                b, a = (before[-1].versions.get(name, "?"),), (after[0].versions.get(name, "?"),)
            changes.append(VersionChange(name, b, a))
    return tuple(changes)


def metric_trend(
    runs: list[HistoryRun], watched: Watched, settings: DetectionSettings = DetectionSettings()
) -> MetricTrend | None:
    """Segments and change points of one metric over the runs that logged it; None when none did."""
    points = [r for r in runs if watched.metric in r.metrics and np.isfinite(r.metrics[watched.metric])]
    if not points:
        return None
    values = np.array([r.metrics[watched.metric] for r in points], dtype=float)
    analysis = _analyze(values, [r.start_time_ms for r in points], settings)
    cps = list(analysis.steps)
    segs = changepoint.segments(values, cps)
    bounds = [0, *[cp.index for cp in cps], len(points)]
    events = []
    for i, cp in enumerate(cps):
        before, after = points[bounds[i] : bounds[i + 1]], points[bounds[i + 1] : bounds[i + 2]]
        went_up = cp.mean_after > cp.mean_before
        events.append(
            ChangeEvent(
                metric=watched.metric,
                index=cp.index,
                run_id=points[cp.index].run_id,
                start_time_ms=points[cp.index].start_time_ms,
                mean_before=cp.mean_before,
                mean_after=cp.mean_after,
                change_pct=cp.change_pct,
                pvalue=cp.pvalue,
                direction=_direction(went_up, watched),
                what_changed=what_changed(before, after),
                before_run_ids=tuple(r.run_id for r in before),
                after_run_ids=tuple(r.run_id for r in after),
            )
        )
    drift_event = None
    if analysis.drift is not None:
        start = points[analysis.drift.start]
        drift_event = DriftEvent(
            watched.metric,
            start.run_id,
            start.start_time_ms,
            _direction(analysis.drift.slope > 0, watched),
            analysis.drift,
        )
    labels = [{**r.versions, **({"machine": r.machine} if r.machine else {})} for r in points]
    at_cps = {cp.index for cp in cps}
    cands = tuple(
        CandidateEvent(
            watched.metric,
            points[c.index].run_id,
            points[c.index].start_time_ms,
            _direction(c.mean_after > c.mean_before, watched),
            c,
            c.index in at_cps,
        )
        for c in candidates.check_boundaries(analysis.detrended, labels, sorted(at_cps), settings.candidate_pvalue)
    )
    return MetricTrend(
        metric=watched.metric,
        higher_is_better=watched.higher_is_better,
        unit=watched.unit,
        run_ids=tuple(r.run_id for r in points),
        times_ms=tuple(r.start_time_ms for r in points),
        values=tuple(float(v) for v in values),
        segments=tuple(segs),
        changes=tuple(events),
        runs_without_metric=len(runs) - len(points),
        drift=drift_event,
        candidates=cands,
    )


def _analyze(values: np.ndarray, times_ms: list[int], settings: DetectionSettings) -> drift.Analysis:
    return drift.analyze(
        values,
        times_ms,
        window=settings.window,
        max_pvalue=settings.max_pvalue,
        min_magnitude=settings.min_magnitude,
        drift_pvalue=settings.drift_pvalue,
    )


def _direction(went_up: bool, watched: Watched | MetricTrend) -> Direction:
    return "improvement" if went_up == watched.higher_is_better else "regression"


def series_trend(
    runs: list[HistoryRun],
    settings: DetectionSettings = DetectionSettings(),
    metrics: tuple[Watched, ...] = WATCHED,
    operators: bool = True,
) -> SeriesTrend:
    """Every watched metric's trend and, with `operators`, the operator series the runs logged (op_series)."""
    trends = [t for t in (metric_trend(runs, w, settings) for w in metrics) if t is not None]
    ops: list[MetricTrend] = []
    renames: list[RenameEvent] = []
    if operators:
        chosen = op_series.select(runs)
        filled, outliers = op_series.set_aside(op_series.with_values(runs, chosen), chosen, settings.outlier_sds)
        ops = [t for t in (metric_trend(filled, operator_watched(m), settings) for m in chosen) if t is not None]
        ops, renames = _join_renames(filled, ops, settings)
        ops = [_with_set_aside(m, outliers) for m in ops]
    return SeriesTrend(runs[0].series, runs[0].label, tuple(runs), tuple(trends), settings, tuple(ops), tuple(renames))


def _with_set_aside(m: MetricTrend, outliers: dict[str, list[str]]) -> MetricTrend:
    """The series with its runs set aside as outliers (its old operator's too, for a series joined across a
    rename), which are not counted among the runs without the metric."""
    ids = {*outliers.get(m.metric, ()), *(outliers.get(m.renamed_from, ()) if m.renamed_from else ())}
    ids -= set(m.run_ids)
    if not ids:
        return m
    return replace(m, set_aside=tuple(sorted(ids)), runs_without_metric=m.runs_without_metric - len(ids))


GONE = 0.1  # an operator whose level falls below this fraction of the level before vanished (and rises: appeared)


def _vanish_appear(m: MetricTrend) -> tuple[dict[str, ChangeEvent], dict[str, ChangeEvent]]:
    """The operator's change points where it vanished and where it appeared, by first run."""
    gone = {c.run_id: c for c in m.changes if c.mean_after <= GONE * c.mean_before}
    new = {c.run_id: c for c in m.changes if c.mean_before <= GONE * c.mean_after}
    return gone, new


def _join_renames(
    runs: list[HistoryRun], ops: list[MetricTrend], settings: DetectionSettings
) -> tuple[list[MetricTrend], list[RenameEvent]]:
    """Operators that vanished at the run where others appeared, paired (the closest levels first) and each pair
    judged as one series: the old operator's values before that run, the new one's from it."""
    found = {m.metric: _vanish_appear(m) for m in ops}
    by_metric = {m.metric: m for m in ops}
    pairs: list[tuple[str, str, ChangeEvent, ChangeEvent]] = []
    used: set[str] = set()
    appearing = sorted(
        ((c, m) for m, (_, new) in found.items() for c in new.values()), key=lambda cm: (-cm[0].mean_after, cm[1])
    )
    for change, new_metric in appearing:
        if new_metric in used:
            continue
        olds = [
            (abs(np.log(change.mean_after / gone[change.run_id].mean_before)), old, gone[change.run_id])
            for old, (gone, _) in found.items()
            if old not in used and old != new_metric and change.run_id in gone and gone[change.run_id].mean_before > 0
        ]
        if not olds or not change.mean_after > 0:
            continue
        _, old, vanished = min(olds)
        used |= {old, new_metric}
        pairs.append((old, new_metric, vanished, change))
    if not pairs:
        return ops, []
    by_id = {r.run_id: r for r in runs}
    joined, renames = [], []
    for old, new_metric, vanished, appeared in pairs:
        start = by_id[appeared.run_id].start_time_ms
        values = [
            replace(r, metrics={**r.metrics, new_metric: r.metrics[old if r.start_time_ms < start else new_metric]})
            if old in r.metrics and new_metric in r.metrics
            else r
            for r in runs
        ]
        trend = metric_trend(values, operator_watched(new_metric), settings)
        if trend is not None:
            joined.append(replace(trend, renamed_from=old))
        renames.append(
            RenameEvent(
                old,
                new_metric,
                appeared.run_id,
                start,
                appeared.what_changed,
                vanished.mean_before,
                appeared.mean_after,
            )
        )
        del by_metric[old], by_metric[new_metric]
    return [*by_metric.values(), *joined], renames


def verdict(trend: SeriesTrend, tonight: set[str]) -> SeriesVerdict:
    """The series' verdict for the night whose runs are `tonight`: a metric regressed (or improved) when a
    change point starts among tonight's runs (the worst of them where several do: the first slowed run, then
    the machine's load moving between two later runs), or a version boundary among tonight's runs moved it;
    it drifts when its drift became significant tonight (or its slope changed materially: the new slope's
    95% interval excludes yesterday's). Older events were reported on their own night, except a regression
    whose night was dismissed by its confirmation runs (`suspected`): while tonight's runs still sit at its
    level and none was alerted since, it counts as tonight's again, so a lasting regression is never lost.

    Operator series are judged by the same rule, and their events held together to Holm's step-down over
    every test the night ran on them (`operator_family`), so however many operators a series judges, a
    night without any change opens a false operator event with probability at most `candidate_pvalue`."""
    earlier = [r for r in trend.runs if r.run_id not in tonight]
    if len(earlier) < MIN_HISTORY:
        return SeriesVerdict(
            trend.series,
            trend.label,
            "insufficient_history",
            reason=f"{len(earlier)} earlier runs (a verdict needs {MIN_HISTORY})",
        )
    first_tonight = min((i for i, r in enumerate(trend.runs) if r.run_id in tonight), default=len(trend.runs))
    first_tonight_ms = trend.runs[first_tonight].start_time_ms if first_tonight < len(trend.runs) else None
    by_id = {r.run_id: r for r in trend.runs}
    judged = [_night_events(m, by_id, first_tonight_ms, trend.settings) for m in trend.metrics]
    ops = [_night_events(m, by_id, first_tonight_ms, trend.settings) for m in trend.operators]
    ops, reason = operator_family(ops, trend.settings)
    new: list[ChangeEvent] = []
    drifts: list[DriftEvent] = []
    cands: list[CandidateEvent] = []
    per_metric: dict[str, Status] = {}
    for night in (*judged, *ops):
        new += night.changes
        drifts += night.drifts
        cands += night.moved
        per_metric[night.metric] = night.status
    overall: Status = min(per_metric.values(), key=STATUS_ORDER.index, default="stable")
    renames = tuple(r for r in trend.renames if first_tonight_ms is not None and r.start_time_ms >= first_tonight_ms)
    return SeriesVerdict(
        trend.series,
        trend.label,
        overall,
        tuple(new),
        per_metric=per_metric,
        new_drifts=tuple(drifts),
        new_candidates=tuple(cands),
        reason=reason,
        new_renames=renames,
    )


@dataclass(frozen=True)
class NightEvents:
    """One metric's (or operator's) events of a night, and its status by `verdict`'s rule."""

    metric: str
    changes: tuple[ChangeEvent, ...]  # change points new tonight (or a dismissed level re-opened)
    moved: tuple[CandidateEvent, ...]  # version boundaries among tonight's runs that moved it (no change point)
    drifts: tuple[DriftEvent, ...]  # a drift new tonight
    boundaries: tuple[CandidateEvent, ...]  # every version boundary among tonight's runs, moved or not
    status: Status


def _night_events(
    m: MetricTrend, by_id: dict[str, HistoryRun], first_tonight_ms: int | None, settings: DetectionSettings
) -> NightEvents:
    if first_tonight_ms is None:
        return NightEvents(m.metric, (), (), (), (), "stable")
    changed_tonight = [c for c in m.changes if _new_tonight(m, c, by_id, first_tonight_ms, settings)]
    if not changed_tonight and (open_level := _suspected_level(m, by_id, first_tonight_ms)) is not None:
        changed_tonight = [open_level]  # a dismissed regression's level still holds: judged again tonight
    boundaries = [c for c in m.candidates if not c.at_change_point and c.start_time_ms >= first_tonight_ms]
    moved = [c for c in boundaries if c.test.moved]
    drifts = [m.drift] if m.drift is not None and _drift_is_new(m, first_tonight_ms, settings) else []
    return NightEvents(
        m.metric,
        tuple(changed_tonight),
        tuple(moved),
        tuple(drifts),
        tuple(boundaries),
        _status(changed_tonight, moved, drifts),
    )


def _status(changes, moved, drifts) -> Status:
    """A metric's status from its events of the night: the worst change point's direction (the newest alone
    would call a night that went far up and then a little down an improvement; confirmation runs, where the suite
    asks for them, tell a lasting regression from a blip), else a boundary that moved it the bad way, a new drift, or a
    boundary that moved it the good way."""
    status: Status = "stable"
    if changes:
        status = min((c.direction for c in changes), key=STATUS_ORDER.index)
    elif any(c.direction == "regression" for c in moved):
        status = "regression"
    if drifts:
        status = min(status, "drift", key=STATUS_ORDER.index)
    if status == "stable" and moved:
        status = "improvement"
    return status


def operator_family(nights: list[NightEvents], settings: DetectionSettings) -> tuple[list[NightEvents], str]:
    """The operator series' events of a night held to Holm's step-down over every test the night ran on them, at
    the family-wise rate `candidate_pvalue` (0.01 by default): per operator its change-point search (each change
    point new tonight, else one search that found none, p = 1), its drift test (likewise) and the Welch test of
    each version boundary among tonight's runs. An event stays when its test passes its own level and Holm's; the
    statuses are rebuilt from the events that stay. Returns the nights and a reason naming the events dropped."""
    tests: list[tuple[int, str, object, float, float]] = []  # (night index, kind, event, p, own level)
    for i, n in enumerate(nights):
        tests += [(i, "change point", c, c.pvalue, settings.max_pvalue) for c in n.changes] or [
            (i, "change point", None, 1.0, settings.max_pvalue)
        ]
        tests += [(i, "drift", d, d.fit.pvalue, settings.drift_pvalue) for d in n.drifts] or [
            (i, "drift", None, 1.0, settings.drift_pvalue)
        ]
        tests += [(i, "version boundary", c, c.test.pvalue, settings.candidate_pvalue) for c in n.boundaries]
    if not tests:
        return nights, ""
    adjusted = holm_adjusted([t[3] for t in tests])
    alpha = settings.candidate_pvalue
    kept = {id(t[2]) for t, a in zip(tests, adjusted, strict=True) if t[2] is not None and t[3] <= t[4] and a <= alpha}
    dropped = [t for t in tests if t[2] is not None and t[3] <= t[4] and id(t[2]) not in kept]
    out = []
    for n in nights:
        changes = tuple(c for c in n.changes if id(c) in kept)
        moved = tuple(c for c in n.moved if id(c) in kept)
        drifts = tuple(d for d in n.drifts if id(d) in kept)
        out.append(replace(n, changes=changes, moved=moved, drifts=drifts, status=_status(changes, moved, drifts)))
    reason = ""
    if dropped:
        reason = (
            f"operator events not beyond noise over the night's {len(tests)} operator tests (Holm at {alpha:g}): "
            + ", ".join(f"{nights[t[0]].metric} {t[1]} p={t[3]:.2g}" for t in dropped)
        )
    return out, reason


EARLY_SPLIT_RUNS = 5  # a change point this few runs before tonight, into tonight's runs, may be tonight's own


def _new_tonight(
    m: MetricTrend,
    change: ChangeEvent,
    by_id: dict[str, HistoryRun],
    first_tonight_ms: int,
    settings: DetectionSettings,
) -> bool:
    """The change point was not there before tonight: it starts among tonight's runs, or it is the last one
    before them, its new level runs on into tonight from fewer than EARLY_SPLIT_RUNS runs of an earlier night,
    and the history before tonight shows no change point there (within a run). The last run or two before
    tonight, high by chance, pull the split early; judged by start time alone that step was never reported."""
    if change.start_time_ms >= first_tonight_ms:
        return True
    earlier = [by_id[r] for r in change.after_run_ids if by_id[r].start_time_ms < first_tonight_ms]
    later = [by_id[r] for r in change.after_run_ids if by_id[r].start_time_ms >= first_tonight_ms]
    nights = {r.night for r in later if r.night is not None}
    if not later or len(earlier) >= EARLY_SPLIT_RUNS or any(r.night in nights for r in earlier):
        return False  # not reaching tonight, long established, or judged with tonight's own benchmark night
    end = sum(t < first_tonight_ms for t in m.times_ms)
    seen = _analyze(np.array(m.values[:end]), list(m.times_ms[:end]), settings).steps
    return not any(abs(c.index - change.index) <= 1 for c in seen)


def _suspected_level(m: MetricTrend, by_id: dict[str, HistoryRun], first_tonight_ms: int) -> ChangeEvent | None:
    """The metric's last change point before tonight when it went the bad way, a night among its runs was
    dismissed by confirmation runs (tagged `suspected` for this metric; the change point may have moved a run
    since) and none of its runs was alerted: that level has not been judged to the end, so tonight's runs,
    which still sit in it, judge it again."""
    earlier = [c for c in m.changes if c.start_time_ms < first_tonight_ms]
    if not earlier or earlier[-1].direction != "regression":
        return None
    tag = names.trend_metric_tag(m.metric)
    since = [
        by_id[r].verdicts.get(tag) for r in m.run_ids[earlier[-1].index :] if by_id[r].start_time_ms < first_tonight_ms
    ]
    return earlier[-1] if "suspected" in since and "regression" not in since else None


def _drift_is_new(m: MetricTrend, first_tonight_ms: int, settings: DetectionSettings) -> bool:
    """The metric's drift was not significant before tonight's runs, or its slope changed materially.

    "Before tonight" looks back over the histories that ended 0, 3, 6, 12, 24, 48 and 96 runs before
    tonight's: a drift whose p-value hovers around drift_pvalue, significant one night and not the next, is
    then reported once and not again each time it crosses the line."""
    current = m.drift
    if current is None:  # no drift tonight: nothing new to report
        return False
    times = [t for t in m.times_ms if t < first_tonight_ms]
    for end in (len(times) - back for back in drift.LOOKBACK_RUNS):
        if end < drift.MIN_DRIFT_POINTS:
            break
        prior = _analyze(np.array(m.values[:end]), list(times[:end]), settings).drift
        if prior is not None and not current.fit.slope_differs(prior):
            return False
    return True


def latest_status(trend: SeriesTrend) -> Status:
    """Status of a series as of its newest run, judged as if that run's night were tonight."""
    last = trend.runs[-1]
    night = {r.run_id for r in trend.runs if last.night is not None and r.night == last.night} or {last.run_id}
    return verdict(trend, night).status


def _ranked(values: list[str]) -> tuple[str, ...]:
    return tuple(v for v, _ in Counter(values).most_common())
