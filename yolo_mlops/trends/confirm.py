"""Confirmation before an alert: a new regression is re-measured before anyone is told.

When tonight's runs open a regression, the benchmark flow runs `confirm_repeats` more runs and `judge` tests
them, one-sided, against the level before the regression (allowing for the night-to-night spread, Holm over the
metrics re-measured); tonight's own runs are left out of the test, so chance cannot confirm itself. A dismissed
night is `suspected` and re-opened on the next nights. `night_family` holds a night's own tests to one
family-wise rate. The tests, their error rates and why: docs/trends.md ("Confirmation", "The night's tests as
one family").
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from yolo_mlops.stats import holm_adjusted, nights_t_test, student_t
from yolo_mlops.trends import changepoint
from yolo_mlops.trends.trend import (
    STATUS_ORDER,
    DetectionSettings,
    MetricTrend,
    SeriesTrend,
    SeriesVerdict,
    Status,
    is_operator,
    verdict,
)

AGREE_PVALUE = 0.05  # two-sided: the size pools tonight's and the confirmation runs unless a t test separates them
BASELINE_RUNS = 200  # the baseline is the last runs of the level before the regression, at most this many
# nights a baseline needs before its night-to-night spread is allowed for: fewer say too little of it (two nights
# give the spread about one degree of freedom, and the test's critical t at `confirm_pvalue` would be in the
# hundreds)
MIN_NIGHTS = 4


@dataclass(frozen=True)
class Confirmation:
    metrics: tuple[str, ...]  # metrics whose regression tonight was re-measured
    confirmed: bool
    runs_tonight: int
    confirmation_runs: int
    evidence: str  # one line per metric: before, tonight and confirmation means, the test and its p

    def summary(self) -> str:
        what = "confirmed" if self.confirmed else "dismissed"
        return (
            f"{what} by {self.confirmation_runs} confirmation runs ({self.runs_tonight} runs tonight): {self.evidence}"
        )


@dataclass(frozen=True)
class LevelTest:
    """The confirmation runs (with the regression's runs where they agree) against the level before it."""

    baseline: tuple[float, ...]
    regressed: tuple[float, ...]  # the regression's runs before the confirmation (tonight's, earlier suspected)
    confirmation: tuple[float, ...]
    pooled: bool  # the size comes from the regressed and the confirmation runs together (they agree)
    agree_pvalue: float  # two-sided: regressed vs confirmation runs
    pvalue: float  # one-sided: the confirmation runs the bad way of the baseline
    shift_pct: float  # the size: the pooled (or confirmation) mean against the baseline's, + = the bad way
    holds: bool
    reopened: bool = False  # the level began before tonight (a dismissed night, or a run early): its runs count
    night_sd: float = 0.0  # the baseline's night-to-night sd the test allowed for (0: none seen, or no nights)


@dataclass(frozen=True)
class NightTest:
    """One test of the night's family on one series."""

    metric: str
    kind: str  # "change point" | "drift" | "version boundary"
    run_id: str  # its first run; "" for a search that found nothing tonight
    pvalue: float  # 1.0 for a search that found nothing (its p is above its level; Holm only gets stricter)
    level: float  # the test's own level (max_pvalue, drift_pvalue, candidate_pvalue)
    adjusted: float = 1.0  # Holm-adjusted over the night's family

    def holds(self, alpha: float) -> bool:
        return self.pvalue <= self.level and self.adjusted <= alpha


def night_tests(trend: SeriesTrend, v: SeriesVerdict, tonight: set[str]) -> list[NightTest]:
    """Every test the night ran on the series, Holm-adjusted together: per metric its change-point search (each
    change point new tonight, else one search that found none), its drift test, and each version boundary whose
    first run is tonight's (moved or not)."""
    settings = trend.settings
    first = min((r.start_time_ms for r in trend.runs if r.run_id in tonight), default=None)
    tests: list[NightTest] = []
    for m in trend.metrics:
        changes = [c for c in v.new_changes if c.metric == m.metric]
        tests += [NightTest(m.metric, "change point", c.run_id, c.pvalue, settings.max_pvalue) for c in changes] or [
            NightTest(m.metric, "change point", "", 1.0, settings.max_pvalue)
        ]
        drifts = [d for d in v.new_drifts if d.metric == m.metric]
        tests += [NightTest(m.metric, "drift", d.run_id, d.fit.pvalue, settings.drift_pvalue) for d in drifts] or [
            NightTest(m.metric, "drift", "", 1.0, settings.drift_pvalue)
        ]
        tests += [
            NightTest(
                m.metric,
                "version boundary",
                c.run_id,
                c.test.pvalue if c.test.pvalue == c.test.pvalue else 1.0,
                settings.candidate_pvalue,
            )
            for c in m.candidates
            if first is not None and c.start_time_ms >= first
        ]
    adjusted = holm_adjusted([t.pvalue for t in tests])
    return [replace(t, adjusted=a) for t, a in zip(tests, adjusted, strict=True)]


def family_pvalue(trend: SeriesTrend) -> float:
    """The night's family-wise rate: candidate_pvalue (0.01 by default), or, where a suite loosened max_pvalue,
    what its change-point searches alone were allowed (max_pvalue for each metric), whichever is larger: the
    family holds the boundaries and drifts inside that budget instead of on top of it."""
    s = trend.settings
    return min(max(s.candidate_pvalue, len(trend.metrics) * s.max_pvalue), 0.5)


def night_family(trend: SeriesTrend, v: SeriesVerdict, tonight: set[str], alpha: float | None = None) -> SeriesVerdict:
    """The night's verdict with its events held to Holm over the night's whole family of tests (`night_tests`)
    at `alpha` (default `family_pvalue`): an event stays when its test passes its own level and
    Holm's; the per-metric and overall status are rebuilt from the events that stay, by `trend.verdict`'s rule."""
    if v.status == "insufficient_history" or not (v.new_changes or v.new_drifts or v.new_candidates):
        return v
    alpha = family_pvalue(trend) if alpha is None else alpha
    tests = night_tests(trend, v, tonight)
    held = {(t.metric, t.kind, t.run_id) for t in tests if t.holds(alpha)}
    # operator series were held to their own family by `trend.verdict` (trend.operator_family): kept as they are
    held |= {(c.metric, "change point", c.run_id) for c in v.new_changes if is_operator(c.metric)}
    held |= {(c.metric, "version boundary", c.run_id) for c in v.new_candidates if is_operator(c.metric)}
    held |= {(d.metric, "drift", d.run_id) for d in v.new_drifts if is_operator(d.metric)}
    changes = tuple(c for c in v.new_changes if (c.metric, "change point", c.run_id) in held)
    drifts = tuple(d for d in v.new_drifts if (d.metric, "drift", d.run_id) in held)
    cands = tuple(c for c in v.new_candidates if (c.metric, "version boundary", c.run_id) in held)
    per_metric: dict[str, Status] = {}
    for metric in v.per_metric:
        mine = [c.direction for c in changes if c.metric == metric]
        moved = [c.direction for c in cands if c.metric == metric]
        status: Status = "stable"
        if mine:
            status = min(mine, key=STATUS_ORDER.index)
        elif "regression" in moved:
            status = "regression"
        if any(d.metric == metric for d in drifts):
            status = min(status, "drift", key=STATUS_ORDER.index)
        if status == "stable" and moved:
            status = "improvement"
        per_metric[metric] = status
    dropped = [t for t in tests if t.run_id and t.pvalue <= t.level and not t.holds(alpha)]
    reason = v.reason
    if dropped:
        reason = "; ".join(
            filter(
                None,
                [
                    reason,
                    f"not beyond noise over the night's {len(tests)} tests (Holm at "
                    f"{alpha:g}): " + ", ".join(f"{t.metric} {t.kind} p={t.pvalue:.2g}" for t in dropped),
                ],
            )
        )
    overall: Status = min(per_metric.values(), key=STATUS_ORDER.index, default="stable")
    return replace(
        v,
        status=overall,
        new_changes=changes,
        new_drifts=drifts,
        new_candidates=cands,
        per_metric=per_metric,
        reason=reason,
    )


def needs_confirmation(v: SeriesVerdict) -> tuple[str, ...]:
    """Metrics with a new event tonight that goes the bad way: a change point or a moved version boundary."""
    bad = {c.metric for c in v.new_changes if c.direction == "regression"}
    bad |= {c.metric for c in v.new_candidates if c.direction == "regression"}
    return tuple(sorted(bad))


def level_test(
    baseline: np.ndarray,
    regressed: np.ndarray,
    confirmation: np.ndarray,
    higher_is_better: bool,
    confirm_pvalue: float,
    min_magnitude: float = 0.0,
    baseline_nights: tuple[str | None, ...] | None = None,
) -> LevelTest:
    """Do the confirmation runs sit the bad way of the baseline? The size comes from them pooled with the
    regressed runs where the two agree (the module doc says why those are not in the test). With the
    baseline runs' nights (every run's benchmark night known, MIN_NIGHTS nights at least), the test allows
    for the night-to-night spread (`nights_t_test`); else the runs are the unit."""
    sign = -1.0 if higher_is_better else 1.0  # tested as "went up" = the bad way
    base, night, again = (sign * np.asarray(v, dtype=float) for v in (baseline, regressed, confirmation))
    agree = student_t(night, again) if len(night) and len(again) else float("nan")
    pooled = bool(len(night)) and not agree <= AGREE_PVALUE  # nan (too few runs to tell): pooled
    nights = _night_groups(base, baseline_nights)
    if nights is not None:
        by_night = nights_t_test(nights, again)
        p, night_sd = by_night.pvalue, by_night.night_sd
    else:
        p, night_sd = student_t(base, again, "greater"), 0.0
    group = np.r_[night, again] if pooled else again
    level = float(np.mean(base)) if len(base) else float("nan")
    shift = 100 * (float(np.mean(group)) - level) / abs(level) if len(group) and level else float("nan")
    holds = bool(p <= confirm_pvalue and float(np.mean(again)) > level + abs(level) * min_magnitude)
    return LevelTest(
        tuple(float(v) for v in baseline),
        tuple(float(v) for v in regressed),
        tuple(float(v) for v in confirmation),
        pooled,
        agree,
        p,
        shift,
        holds,
        night_sd=night_sd,
    )


def _night_groups(base: np.ndarray, nights: tuple[str | None, ...] | None) -> list[np.ndarray] | None:
    """The baseline's runs by night, in order; None where a run's night is unknown (a run outside a benchmark
    flow), the runs make fewer than MIN_NIGHTS nights, or no night has two runs (no spread within a night)."""
    if nights is None or len(nights) != len(base) or any(n is None for n in nights):
        return None
    index: dict[str | None, list[float]] = {}
    for name, value in zip(nights, base, strict=True):
        index.setdefault(name, []).append(float(value))
    groups = [np.asarray(v) for v in index.values()]
    if len(groups) < MIN_NIGHTS or all(len(g) < 2 for g in groups):
        return None
    return groups


def judge(
    trend: SeriesTrend, tonight: set[str], confirmation: set[str], metrics: tuple[str, ...]
) -> tuple[SeriesVerdict, Confirmation]:
    """The verdict over tonight's and the confirmation runs: `regression` when it holds (see the module
    doc), else `suspected` with the evidence; the Confirmation says which and why."""
    v = verdict(trend, tonight | confirmation)
    nights = {r.run_id: r.night for r in trend.runs}
    tests: dict[str, LevelTest | None] = {}
    for name in metrics:
        series_metric = trend.metric(name)
        if series_metric is not None:
            tests[name] = _test_metric(series_metric, v, tonight, confirmation, trend.settings, nights)
    holds = metrics_that_hold({k: t for k, t in tests.items() if t is not None}, trend.settings.confirm_pvalue)
    lines = []
    for name, test in tests.items():
        series_metric = trend.metric(name)
        if series_metric is not None:
            lines.append(_evidence(series_metric, test, len(tests)))
    confirmed = bool(holds)
    result = Confirmation(
        metrics=metrics,
        confirmed=confirmed,
        runs_tonight=len(tonight),
        confirmation_runs=len(confirmation),
        evidence="; ".join(lines),
    )
    if confirmed:
        per_metric = {k: ("regression" if k in holds else s) for k, s in v.per_metric.items()}
        return replace(v, status="regression", per_metric=per_metric, reason=result.summary()), result
    per_metric = {k: ("suspected" if k in metrics else s) for k, s in v.per_metric.items()}
    return replace(
        v,
        status="suspected",
        per_metric=per_metric,
        reason=result.summary(),
        new_changes=tuple(c for c in v.new_changes if c.metric not in metrics),
        new_candidates=tuple(c for c in v.new_candidates if c.metric not in metrics),
    ), result


def metrics_that_hold(tests: dict[str, LevelTest], alpha: float) -> list[str]:
    """The metrics whose regression holds, Holm's step-down over the metrics re-measured tonight (`holm_adjusted`
    at most alpha), each with its shift reaching min_magnitude; smallest p first. So the chance that
    confirmation runs back at the old level confirm any metric is at most alpha per night, however many metrics
    were re-measured."""
    adjusted = holm_adjusted([t.pvalue for t in tests.values()])
    held = [
        (t.pvalue, name) for (name, t), adj in zip(tests.items(), adjusted, strict=True) if adj <= alpha and t.holds
    ]
    return [name for _, name in sorted(held)]


def regression_start(
    series_metric: MetricTrend, v: SeriesVerdict, tonight: set[str], confirmation: set[str]
) -> int | None:
    """Index of the regression's first run in the metric's points: tonight's first run, or the first run of a
    regression change point that starts before it and is new tonight (a suspected level re-opened, or a split
    one run early: `trend._new_tonight`)."""
    points = series_metric.run_ids
    first = next((i for i, r in enumerate(points) if r in tonight), None)
    if first is None:
        return None
    reopened = [
        c.index
        for c in v.new_changes
        if c.metric == series_metric.metric
        and c.direction == "regression"
        and c.run_id not in tonight
        and c.run_id not in confirmation
    ]
    return min([first, *reopened])


def _test_metric(
    series_metric: MetricTrend,
    v: SeriesVerdict,
    tonight: set[str],
    confirmation: set[str],
    settings: DetectionSettings,
    nights: dict[str, str | None] | None = None,
) -> LevelTest | None:
    start = regression_start(series_metric, v, tonight, confirmation)
    if start is None:
        return None
    ids, values = series_metric.run_ids, np.asarray(series_metric.values, dtype=float)
    # the level as the history before the regression shows it: a change point found with tonight's runs may
    # land a run or two early (the last runs before them high by chance) and leave too short a baseline
    before = changepoint.detect(
        values[:start], window=settings.window, max_pvalue=settings.max_pvalue, min_magnitude=settings.min_magnitude
    )
    level_from = max([0, *[c.index for c in before], start - BASELINE_RUNS])
    base = values[level_from:start]
    regressed = np.array([x for i, x in enumerate(values) if i >= start and ids[i] not in confirmation])
    again = np.array([x for r, x in zip(ids, values, strict=True) if r in confirmation])
    base_nights = tuple((nights or {}).get(r) for r in ids[level_from:start]) if nights is not None else None
    test = level_test(
        base,
        regressed,
        again,
        series_metric.higher_is_better,
        settings.confirm_pvalue,
        settings.min_magnitude,
        base_nights,
    )
    return replace(test, reopened=ids[start] not in tonight)


def _evidence(series_metric: MetricTrend, test: LevelTest | None, family: int = 1) -> str:
    if test is None:
        return f"{series_metric.metric}: none of tonight's runs logged it"
    base = float(np.mean(test.baseline)) if test.baseline else float("nan")

    def part(label: str, xs: tuple[float, ...]) -> str:
        if not xs:
            return f"{label} -"
        mean = float(np.mean(xs))
        pct = 100 * (mean - base) / abs(base) if base else float("nan")
        return f"{label} {mean:.4g} ({pct:+.1f}%, {len(xs)} runs)"

    night = "the new level's" if test.reopened else "tonight's"  # the level began before tonight's first run
    agree = "" if test.agree_pvalue != test.agree_pvalue else f", {night} vs confirmation p={test.agree_pvalue:.2g}"
    size = f"{night} and the confirmation runs pooled{agree}" if test.pooled else f"the confirmation runs alone{agree}"
    return (
        f"{series_metric.metric}: before {base:.4g} {series_metric.unit} (mean of {len(test.baseline)} runs), "
        f"{part('since its first run' if test.reopened else 'tonight', test.regressed)}, "
        f"{part('confirmation', test.confirmation)}; the confirmation runs against before: one-sided "
        f"p={test.pvalue:.2g}"
        + (f" (a night-to-night sd of {test.night_sd:.3g} {series_metric.unit} allowed for)" if test.night_sd else "")
        + (f" (Holm over {family} metrics re-measured)" if family > 1 else "")
        + f"; size {test.shift_pct:+.1f}% from {size}"
    )
