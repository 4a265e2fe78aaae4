"""Confirmation before an alert: a new regression is re-measured before anyone is told.

When tonight's runs open a change point that goes the bad way (or a version boundary among them moved a
metric the bad way), the benchmark flow runs `confirm_repeats` more runs of the configuration and the series
is judged again over its history, tonight's runs and the confirmation runs (`judge`). The regression holds
when, for some metric that regressed tonight, the newest change point still starts among tonight's runs and
goes the bad way (the confirmation runs sit at the new level), or a version boundary among tonight's runs
still moves it the bad way beyond noise. Otherwise the night was a blip: the series is `suspected`, with
the evidence, and no alert is raised.

Pure functions over trends; the runs themselves are the flow's business.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from yolo_mlops.trends.trend import MetricTrend, SeriesTrend, SeriesVerdict, verdict


@dataclass(frozen=True)
class Confirmation:
    metrics: tuple[str, ...]  # metrics whose regression tonight was re-measured
    confirmed: bool
    runs_tonight: int
    confirmation_runs: int
    evidence: str  # one line per metric: before, tonight and confirmation means

    def summary(self) -> str:
        what = "confirmed" if self.confirmed else "dismissed"
        return (f"{what} by {self.confirmation_runs} confirmation runs ({self.runs_tonight} runs tonight): "
                f"{self.evidence}")


def needs_confirmation(v: SeriesVerdict) -> tuple[str, ...]:
    """Metrics with a new event tonight that goes the bad way: a change point or a moved version boundary."""
    bad = {c.metric for c in v.new_changes if c.direction == "regression"}
    bad |= {c.metric for c in v.new_candidates if c.direction == "regression"}
    return tuple(sorted(bad))


def judge(trend: SeriesTrend, tonight: set[str], confirmation: set[str], metrics: tuple[str, ...]
          ) -> tuple[SeriesVerdict, Confirmation]:
    """The verdict over tonight's and the confirmation runs: `regression` when it holds (see the module
    doc), else `suspected` with the evidence; the Confirmation says which and why."""
    v = verdict(trend, tonight | confirmation)
    holds, lines = [], []
    for name in metrics:
        series_metric = trend.metric(name)
        if series_metric is None:
            continue
        newest = series_metric.changes[-1] if series_metric.changes else None
        if (newest is not None and newest.direction == "regression" and newest.run_id in tonight) or any(
                c.test.moved and c.direction == "regression" and c.run_id in tonight for c in series_metric.candidates):
            holds.append(name)
        lines.append(_evidence(series_metric, tonight, confirmation))
    confirmed = bool(holds)
    result = Confirmation(metrics=metrics, confirmed=confirmed, runs_tonight=len(tonight),
                          confirmation_runs=len(confirmation), evidence="; ".join(lines))
    if confirmed:
        return replace(v, status="regression", reason=result.summary()), result
    per_metric = {k: ("suspected" if k in metrics else s) for k, s in v.per_metric.items()}
    return replace(v, status="suspected", per_metric=per_metric, reason=result.summary(),
                   new_changes=tuple(c for c in v.new_changes if c.metric not in metrics),
                   new_candidates=tuple(c for c in v.new_candidates if c.metric not in metrics)), result


def _evidence(series_metric: MetricTrend, tonight: set[str], confirmation: set[str]) -> str:
    values = dict(zip(series_metric.run_ids, series_metric.values, strict=True))
    before = [v for r, v in values.items() if r not in tonight and r not in confirmation][-10:]
    night = [v for r, v in values.items() if r in tonight]
    again = [v for r, v in values.items() if r in confirmation]
    base = float(np.median(before)) if before else float("nan")

    def part(label: str, xs: list[float]) -> str:
        if not xs:
            return f"{label} -"
        mean = float(np.mean(xs))
        pct = 100 * (mean - base) / abs(base) if base else float("nan")
        return f"{label} {mean:.4g} ({pct:+.1f}%, {len(xs)} runs)"

    return (f"{series_metric.metric}: before {base:.4g} {series_metric.unit} (median of the last {len(before)} runs), "
            f"{part('tonight', night)}, {part('confirmation', again)}")
