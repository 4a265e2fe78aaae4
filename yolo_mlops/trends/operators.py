"""Operator regressions as findings of their own, and operators compared beyond their own noise.

A regression in one operator is often far below what step time can show: a small operator made several times
slower moves the step by less than its run-to-run noise, while the operator's own series moves by many times its
noise. `trend.series_trend` judges each operator series (op_series.py) with the same change-point
search, version-boundary tests and confirmation as step time, the operators of a night held to Holm's step-down
as one family (`trend.operator_family`). This module says what such a finding means:

- `finding`: an operator's event of the night with its size (x factor, ms per step), its severity by its share
  of the step, and whether step time could have shown it (`power`: the step time's detection power);
- `finding_line`: the finding as one line (its format in `finding_line`'s docstring);
- `rename_line`: an operator that vanished where another appeared, one series joined across the rename;
- `operator_table`: the series report's table of every operator series judged;
- `compare_operators`: two runs or two sets of runs, each operator's change against its own noise (`compare`).
"""

from __future__ import annotations

import datetime as dt
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

import numpy as np

from yolo_mlops import names
from yolo_mlops.render import fmt, markdown_table
from yolo_mlops.stats import Noise, holm_adjusted, pooled_noise, shift_t
from yolo_mlops.trends import op_series, power
from yolo_mlops.trends.trend import CandidateEvent, ChangeEvent, MetricTrend, RenameEvent, SeriesTrend, SeriesVerdict

if TYPE_CHECKING:
    from yolo_mlops.trends.attribution import Key, RunProfile

Severity = Literal["major", "moderate", "minor"]
MAJOR_PCT = 5.0  # an operator change of this % of the step or more is major
MODERATE_PCT = 1.0  # this % or more moderate, below that minor


def severity(share_pct: float) -> Severity:
    """By the part of the step the change adds (or saves)."""
    size = abs(share_pct)
    return "major" if size >= MAJOR_PCT else "moderate" if size >= MODERATE_PCT else "minor"


def operator_name(metric: str) -> str:
    """The operator an op/* metric names (as MLflow could spell it), with `(device)` for device time."""
    found = names.operator_of_metric(metric)
    if found is None:
        return metric
    kind, name = found
    return name if kind == "operator" else f"{name} (device)"


@dataclass(frozen=True)
class OperatorFinding:
    metric: str
    operator: str
    direction: str  # regression | improvement
    run_id: str  # first run at the new level
    start_time_ms: int
    what_changed: str
    before_ms: float  # ms per profiled step before
    after_ms: float
    step_ms: float | None  # the profiled step before (op/step_ms), ms
    step_power_pct: float | None  # the step time's minimum detectable shift (power.for_values), %
    pvalue: float
    test: str  # "change point" or "version boundary"
    renamed_from: str | None = None

    @property
    def delta_ms(self) -> float:
        return self.after_ms - self.before_ms

    @property
    def factor(self) -> float:
        return self.after_ms / self.before_ms if self.before_ms > 0 else math.inf

    @property
    def share_pct(self) -> float | None:
        """The change, % of the profiled step before it: what it adds to (or saves from) a step."""
        return 100.0 * self.delta_ms / self.step_ms if self.step_ms else None

    @property
    def severity(self) -> Severity | None:
        return None if self.share_pct is None else severity(self.share_pct)

    @property
    def below_step_power(self) -> bool | None:
        if self.share_pct is None or self.step_power_pct is None or not math.isfinite(self.step_power_pct):
            return None
        return abs(self.share_pct) < self.step_power_pct


def _night_text(ms: int) -> str:
    """The night's start, as the reports write times (UTC)."""
    return dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC).strftime("%Y-%m-%d %H:%M")


def finding(
    trend: SeriesTrend, event: ChangeEvent | CandidateEvent, step_power_pct: float | None = None
) -> OperatorFinding:
    """An operator series' change point (or moved version boundary) as a finding (module doc)."""
    series = trend.metric(event.metric)
    renamed = series.renamed_from if series is not None else None
    if isinstance(event, ChangeEvent):
        before_ms, after_ms, p, kind = event.mean_before, event.mean_after, event.pvalue, "change point"
        changed, before_ids = event.what_changed_text(), event.before_run_ids
    else:
        before_ms, after_ms, p, kind = (
            event.test.mean_before,
            event.test.mean_after,
            event.test.pvalue,
            "version boundary",
        )
        changed = event.test.what_changed_text()
        ids = series.run_ids if series is not None else ()
        at = ids.index(event.run_id) if event.run_id in ids else 0
        before_ids = ids[max(0, at - event.test.size_before) : at]
    by_id = {r.run_id: r for r in trend.runs}
    step = op_series.step_ms([by_id[i] for i in before_ids if i in by_id])
    return OperatorFinding(
        event.metric,
        operator_name(event.metric),
        event.direction,
        event.run_id,
        event.start_time_ms,
        changed,
        before_ms,
        after_ms,
        step,
        step_power_pct,
        p,
        kind,
        renamed,
    )


def finding_line(f: OperatorFinding) -> str:
    """`aten::X self time x<factor> since night ... (run ...; torch A -> B): +<ms> ms/step, +<share>% of step,
    <severity> (below the step time's detection power of <shift>%)`."""
    what = "self device time" if f.metric.startswith(names.OP_DEVICE_PREFIX) else "self time"
    factor = "new" if not math.isfinite(f.factor) else f"x{f.factor:.2g}" if f.factor < 10 else f"x{f.factor:.0f}"
    name = f.operator if f.renamed_from is None else f"{operator_name(f.renamed_from)} -> {f.operator} (renamed)"
    line = (
        f"{name} {what} {factor} ({fmt(f.before_ms)} -> {fmt(f.after_ms)} ms/step) since night "
        f"{_night_text(f.start_time_ms)} (run {f.run_id}; {f.what_changed}): {f.delta_ms:+.3g} ms/step"
    )
    if f.share_pct is not None:
        line += f", {f.share_pct:+.1f}% of step, {f.severity}"
    if f.below_step_power is not None and f.step_power_pct is not None:
        where = "below" if f.below_step_power else "within"
        line += f" ({where} the step time's detection power of {f.step_power_pct:.1f}%)"
    return line + f" [{f.direction}; {f.test} p={f.pvalue:.2g}]"


def rename_line(r: RenameEvent) -> str:
    return (
        f"rename candidate: {operator_name(r.old)} -> {operator_name(r.new)} from run {r.run_id} "
        f"({_night_text(r.start_time_ms)}; {r.what_changed_text()}): {fmt(r.before_ms)} -> {fmt(r.after_ms)} ms/step "
        f"(x{r.after_ms / r.before_ms:.2g}), judged as one series"
        if r.before_ms > 0
        else f"rename candidate: {operator_name(r.old)} -> {operator_name(r.new)} from run {r.run_id}"
    )


def night_findings(trend: SeriesTrend, night: SeriesVerdict, step_power_pct: float | None) -> list[OperatorFinding]:
    """The operator events of the night's verdict, as findings (worst first: the largest share of the step)."""
    events: list[ChangeEvent | CandidateEvent] = [c for c in night.new_changes if _is_op(c.metric)]
    events += [c for c in night.new_candidates if _is_op(c.metric)]
    found = [finding(trend, e, step_power_pct) for e in events]
    return sorted(found, key=lambda f: (f.direction != "regression", -abs(f.share_pct or 0.0), f.metric))


def history_findings(trend: SeriesTrend, step_power_pct: float | None) -> list[OperatorFinding]:
    """Every operator change point (and version boundary that moved one) of the whole history that holds
    against the operator series together: p at most `candidate_pvalue` / the number of operator series
    (Bonferroni, the history view's counterpart of the night's Holm), oldest first. Each series' own search
    at `max_pvalue` over 20 or more series would show a false change point somewhere in most long histories."""
    if not trend.operators:
        return []
    level = trend.settings.candidate_pvalue / len(trend.operators)
    found = [
        finding(trend, c, step_power_pct)
        for m in trend.operators
        for c in m.changes
        if c.pvalue <= min(level, trend.settings.max_pvalue)
    ]
    found += [
        finding(trend, c, step_power_pct)
        for m in trend.operators
        for c in m.candidates
        if c.test.moved and not c.at_change_point and c.test.pvalue <= level
    ]
    return sorted(found, key=lambda f: (f.start_time_ms, f.metric))


def _is_op(metric: str) -> bool:
    return metric.startswith(names.OP_PREFIX)


def step_power(trend: SeriesTrend, repeats: int) -> float | None:
    """The step time's minimum detectable shift (%) with `repeats` runs a night; None without step time."""
    step = trend.metric(names.STEP_TIME_P50)
    if step is None:
        return None
    return power.for_values(step.metric, power.recent_segment(step), repeats, trend.settings.max_pvalue).shift_pct


def operator_table(trend: SeriesTrend, detectable: list[power.MinDetectable] | None = None) -> str:
    """Every operator series judged: its recent level (ms/step and % of the step), run-to-run noise, smallest step
    found in one night, change points, the runs that logged no operators and those set aside (gaps)."""
    by_metric = {d.metric: d for d in detectable or []}
    recent = trend.runs[-op_series.SELECTION_RUNS :]
    step = op_series.step_ms([r for r in recent if op_series.logged(r)])
    rows = []
    for m in trend.operators:
        level = m.segments[-1].mean if m.segments else float(np.mean(m.values))  # since its last change point
        d = by_metric.get(m.metric)
        rows.append(
            (
                operator_name(m.metric)[:70] + (f" (was {operator_name(m.renamed_from)})" if m.renamed_from else ""),
                fmt(level),
                fmt(100 * level / step, ".1f") if step else "-",
                fmt(d.noise_pct, ".1f") if d else "-",
                "-" if d is None or not math.isfinite(d.shift_pct) else f"{d.shift_pct:.1f}%",
                ", ".join(f"{c.change_pct:+.0f}% at {c.run_id[:8]}" for c in m.changes) or "-",
                m.runs_without_metric,
                len(m.set_aside),
            )
        )
    return markdown_table(
        [
            "operator",
            "ms/step (current level)",
            "% of step",
            "noise %",
            "min. detectable step",
            "change points",
            "runs without tables",
            "runs set aside (outliers of their night)",
        ],
        rows,
    )


# ---- compare: operators against their own noise -----------------------------------------------------------


@dataclass(frozen=True)
class OperatorTest:
    kind: str
    name: str
    a_ms: float  # mean ms per profiled step of A's runs
    b_ms: float
    noise_pct: float | None  # the operator's run-to-run noise (sd of log time, %), where known
    noise_from: str  # "the runs" (within each set), "the series history", or "" (unknown)
    pvalue: float | None  # two-sided, of the log ratio against that noise
    adjusted: float | None  # Holm over the operators tested
    beyond_noise: bool

    @property
    def factor(self) -> float:
        return self.b_ms / self.a_ms if self.a_ms > 0 else math.inf


COMPARE_ALPHA = 0.01  # family-wise over the operators tested
COMPARE_MIN_SHARE = 0.001  # operators below this share of the step on both sides are not tested
LOG_FLOOR_MS = 1e-3  # an operator absent on a side is taken as this many ms per step on the log scale


def compare_operators(
    a: list[RunProfile],
    b: list[RunProfile],
    history_noise: dict[str, tuple[float, int]] | None = None,
    alpha: float = COMPARE_ALPHA,
) -> list[OperatorTest]:
    """Which operators (host self time and device kernels) changed beyond their own noise between runs `a` and
    runs `b`: each operator's log time per step, B's mean against A's, with a t test whose noise is the
    operator's own: pooled within the two sets when each has 2 runs or more (Student's t on their degrees of
    freedom), else its run-to-run sd from the series' history (`history_noise`: op/* metric -> (sd of log ms,
    degrees of freedom)); Holm's step-down over every operator tested at `alpha`, so with nothing changed any
    operator is called changed with probability at most `alpha`. Operators under COMPARE_MIN_SHARE of the step on both
    sides are not tested; an operator with no noise estimate has no p (shown, not judged)."""
    step = np.mean([p.step_ms for p in a + b if p.step_ms]) if any(p.step_ms for p in a + b) else None
    keys = sorted({k for p in a + b for k in p.entries if k[0] in ("operator", "device")})
    rows: list[tuple[Key, float, float, float | None, str, float | None]] = []
    for key in keys:
        xa = np.array([p.entries.get(key, 0.0) for p in a])
        xb = np.array([p.entries.get(key, 0.0) for p in b])
        if step and max(xa.mean(), xb.mean()) < COMPARE_MIN_SHARE * step:
            continue
        la, lb = np.log(np.maximum(xa, LOG_FLOOR_MS)), np.log(np.maximum(xb, LOG_FLOOR_MS))
        noise: Noise | None = None
        source = ""
        if len(a) >= 2 and len(b) >= 2:
            noise, source = pooled_noise([la, lb]), "the runs"
        elif history_noise and (metric := names.operator_metric(key[0], key[1])) in history_noise:
            noise, source = Noise(*history_noise[metric]), "the series history"
        p = None if noise is None else shift_t(la, lb, noise)
        rows.append((key, float(xa.mean()), float(xb.mean()), None if noise is None else 100 * noise.sd, source, p))
    tested = [i for i, r in enumerate(rows) if r[5] is not None]
    adjusted = holm_adjusted([rows[i][5] or 1.0 for i in tested])
    adj_of = dict(zip(tested, adjusted, strict=True))
    out = [
        OperatorTest(
            key[0],
            key[1],
            a_ms,
            b_ms,
            noise,
            source,
            p,
            adj_of.get(i),
            adj_of.get(i, 1.0) <= alpha,
        )
        for i, (key, a_ms, b_ms, noise, source, p) in enumerate(rows)
    ]
    return sorted(out, key=lambda t: (not t.beyond_noise, -abs(t.b_ms - t.a_ms), t.kind, t.name))


def history_noise(trend_operators: tuple[MetricTrend, ...]) -> dict[str, tuple[float, int]]:
    """Each operator series' run-to-run sd of log time, pooled within the levels of its history (each segment
    between change points around its own mean, the newest 200 runs), with its degrees of freedom (runs minus
    levels), by op/* metric: the noise `compare` of two single runs judges them against. Levels that touch 0
    (below the runs' floor) are left out, and a series with fewer than 2 degrees of freedom."""
    out: dict[str, tuple[float, int]] = {}
    for m in trend_operators:
        values = np.asarray(m.values, dtype=float)
        first = max(0, len(values) - power.MAX_RECENT)
        parts = [values[max(seg.start, first) : seg.end] for seg in m.segments]
        noise = pooled_noise([np.log(part) for part in parts if len(part) >= 2 and np.all(part > 0)])
        if noise.df >= 2:
            out[m.metric] = (noise.sd, noise.df)
    return out
