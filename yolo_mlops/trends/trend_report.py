"""Text and picture of trends: the series list, one series' history and change points, and its plot."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from yolo_mlops import names
from yolo_mlops.render import fmt, markdown_table, new_figure, save_figure
from yolo_mlops.trends import operators, power
from yolo_mlops.trends.attribution import Attribution, Contribution
from yolo_mlops.trends.commit_range import bisect_range, candidate_range
from yolo_mlops.trends.trend import (
    CandidateEvent,
    ChangeEvent,
    DriftEvent,
    MetricTrend,
    SeriesTrend,
    is_operator,
    latest_status,
)


def when(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC).strftime("%Y-%m-%d %H:%M")


def series_table(trends: list[SeriesTrend]) -> str:
    rows = []
    for t in trends:
        step = t.metric(names.STEP_TIME_P50)
        changes = sum(len(m.changes) for m in t.metrics)
        rows.append(
            (
                t.series,
                t.label,
                len(t.runs),
                when(t.runs[-1].start_time_ms),
                fmt(step.values[-1]) if step else "-",
                changes,
                latest_status(t),
            )
        )
    return markdown_table(
        ["series", "workload", "runs", "latest run (UTC)", "step ms p50", "change points", "latest status"], rows
    )


def change_line(change: ChangeEvent, unit: str) -> str:
    return (
        f"{change.metric} {change.change_pct:+.1f}% ({fmt(change.mean_before)} -> {fmt(change.mean_after)} "
        f"{unit}, p={change.pvalue:.2g}) {change.direction} from run {change.run_id} "
        f"({when(change.start_time_ms)}; {change.what_changed_text()})"
    )


def drift_line(drift: DriftEvent, unit: str) -> str:
    return f"{drift.text(unit)} ({when(drift.start_time_ms)})"


def candidate_line(candidate: CandidateEvent, unit: str) -> str:
    line = f"{candidate.text(unit)} ({when(candidate.start_time_ms)})"
    target = candidate_range(candidate)
    return line + (f"; bisect it: `{target.command()}`" if target else "")


def detectable_line(detectable) -> str:
    """One metric's minimum detectable shift (power.MinDetectable) as text."""
    d = detectable
    shift = "none in one night" if d.shift_pct == float("inf") else f"{d.shift_pct:.2f}%"
    return (
        f"{d.metric}: smallest step found in one night ({d.power:.0%} of nights): {shift} "
        f"(noise {d.noise_pct:.2f}%, {d.history_runs} runs since the last level change, {d.repeats} runs a night)"
    )


def bisect_command(change: ChangeEvent) -> str | None:
    """The `yolo-mlops bisect` command for a regression whose what-changed holds a commit range."""
    target = bisect_range(change)
    return target.command() if target else None


def history_table(trend: SeriesTrend, metric: MetricTrend) -> str:
    starts = {c.run_id: c for c in metric.changes}
    seg_of = {}
    for i, segment in enumerate(metric.segments):
        for j in range(segment.start, segment.end):
            seg_of[j] = i
    versions = {r.run_id: r.versions for r in trend.runs}
    rows = []
    for j, (run_id, t, v) in enumerate(zip(metric.run_ids, metric.times_ms, metric.values, strict=False)):
        seg = metric.segments[seg_of[j]] if seg_of else None
        mark = f"<- {starts[run_id].direction} {starts[run_id].change_pct:+.1f}%" if run_id in starts else ""
        ver = versions[run_id]
        rows.append(
            (
                when(t),
                run_id,
                fmt(v),
                fmt(seg.mean) if seg else "-",
                ver.get("commit", "?")[:8],
                ver.get("torch", "?"),
                mark,
            )
        )
    return markdown_table(["time (UTC)", "run", metric.metric, "segment mean", "commit", "torch", "change"], rows)


def series_report(
    trend: SeriesTrend,
    attributions: dict[tuple[str, str], Attribution],
    metric_names: list[str] | None = None,
    detectable=(),
) -> str:
    """One series: per metric its history table and change points, each with what changed and attribution."""
    blocks = [f"Series {trend.series}: {trend.label}, {len(trend.runs)} runs, latest status {latest_status(trend)}"]
    for m in trend.metrics:
        if metric_names and m.metric not in metric_names:
            continue
        blocks.append(f"\n## {m.metric} ({'higher' if m.higher_is_better else 'lower'} is better)")
        if m.runs_without_metric:
            blocks.append(f"{m.runs_without_metric} runs of this series did not log {m.metric}; left out")
        blocks.append(history_table(trend, m))
        if not m.changes:
            blocks.append("no change points")
        for c in m.changes:
            blocks.append("- " + change_line(c, m.unit))
            if command := bisect_command(c):
                blocks.append(f"    bisect it: {command}")
            attribution = attributions.get((m.metric, c.run_id))
            if attribution is not None:
                blocks.append(attribution_text(attribution))
        if m.drift is not None:
            blocks.append("- " + drift_line(m.drift, m.unit))
        blocks += ["- version boundary: " + candidate_line(c, m.unit) for c in m.candidates]
        blocks += ["- detection power: " + detectable_line(d) for d in detectable if d.metric == m.metric]
    if trend.operators and (not metric_names or any(is_operator(n) for n in metric_names)):
        blocks.append(operator_section(trend, detectable, metric_names))
    return "\n".join(blocks)


def operator_section(trend: SeriesTrend, detectable=(), metric_names: list[str] | None = None) -> str:
    """The series' operator series: a table of each (level, share of the step, noise, smallest step found in one
    night, change points), then every operator change point and moved version boundary that holds against the
    operator series together (`operators.history_findings`) as a finding, with its share of the step against
    the step time's detection power, and the rename candidates."""
    repeats = next((d.repeats for d in detectable), 3)
    step_power = next((d.shift_pct for d in detectable if d.metric == names.STEP_TIME_P50), None)
    shown = [m for m in trend.operators if not metric_names or m.metric in metric_names]
    blocks = [
        f"\n## Operator series ({len(trend.operators)} operators: each at 1% of the step or more, and at least the "
        "top 20; self time, ms per profiled step, lower is better)",
        operators.operator_table(trend, power.for_operators(trend, repeats)),
    ]
    wanted = {m.metric for m in shown}
    changes = {(c.metric, c.run_id): c for m in shown for c in m.changes}
    for f in operators.history_findings(trend, step_power):
        if f.metric not in wanted:
            continue
        change = changes.get((f.metric, f.run_id))
        prefix = "- " if f.test == "change point" else "- version boundary: "
        blocks.append(prefix + operators.finding_line(f))
        if change is not None and (command := bisect_command(change)):
            blocks.append(f"    bisect it: {command}")
    blocks += ["- " + operators.rename_line(r) for r in trend.renames]
    return "\n".join(blocks)


def contribution_figures(c: Contribution) -> tuple[str, ...]:
    """A contribution's measured cells: ms/step before and after, the delta, its % of the shift, its
    consistency and Mann-Whitney p."""
    return (
        fmt(c.before_ms),
        fmt(c.after_ms),
        f"{c.delta_ms:+.3g}",
        fmt(c.share_pct, ".0f"),
        fmt(c.consistency, ".2f"),
        fmt(c.pvalue, ".2g"),
    )


def attribution_text(a: Attribution, indent: str = "    ") -> str:
    if not a.contributions:
        return indent + (a.note or "no attribution")
    shift = "-" if a.shift_ms is None else f"{a.shift_ms:+.2f}"
    head = (
        f"{indent}attribution: step {fmt(a.step_ms_before)} -> {fmt(a.step_ms_after)} ms ({shift} ms/step), "
        f"{len(a.before_runs)} runs before vs {len(a.after_runs)} after"
    )
    if a.runs_without_tables:
        head += f"; {len(a.runs_without_tables)} runs without key_averages tables left out"
    rows = [(c.kind, c.name[:70], *contribution_figures(c)) for c in a.contributions]
    table = markdown_table(
        ["kind", "name", "before ms/step", "after ms/step", "delta", "% of shift", "consistency", "p (M-W)"], rows
    )
    return head + "\n" + "\n".join(indent + line for line in table.splitlines())


def plot_series(trend: SeriesTrend, path: Path, metric_names: list[str] | None = None) -> Path:
    """Per metric: values over time, segment means with +-1 std noise bands, change points marked and
    labelled with what changed."""
    pool = (*trend.metrics, *trend.operators)  # an operator series is drawn when asked for by name
    metrics = [m for m in pool if metric_names and m.metric in metric_names] or list(trend.metrics)
    fig = new_figure(11, 2.8 * max(len(metrics), 1) + 0.6)
    axes = fig.subplots(len(metrics), 1, squeeze=False)[:, 0]
    for ax, m in zip(axes, metrics, strict=False):
        times = [dt.datetime.fromtimestamp(t / 1000, tz=dt.UTC) for t in m.times_ms]
        ax.plot(times, m.values, "o", ms=3.5, color="tab:blue", label="runs")
        for seg in m.segments:
            x = times[seg.start : seg.end]
            ax.hlines(seg.mean, x[0], x[-1], color="black", lw=1.5)
            ax.fill_between(x, seg.mean - seg.std, seg.mean + seg.std, color="gray", alpha=0.25, lw=0)
        if m.drift is not None:  # the fitted slope over each segment of the drift region
            for lo, hi, y0, y1 in m.drift.fit.lines:
                ax.plot([times[lo], times[hi - 1]], [y0, y1], color="tab:orange", lw=2)
            ax.annotate(
                f"drift {m.drift.fit.pct_per_100_runs:+.2f}%/100 runs",
                (times[m.drift.fit.start], min(m.values)),
                fontsize=7,
                color="tab:orange",
                va="bottom",
                xytext=(3, 0),
                textcoords="offset points",
            )
        # Every version change is a dotted line; only those after which the metric moved are labelled: a year of
        # nightly commits is hundreds of changes, and a label each would hide the points (and take seconds to draw).
        unmoved = [times[c.test.index] for c in m.candidates if not c.test.moved]
        if unmoved:
            ax.vlines(unmoved, 0, 1, transform=ax.get_xaxis_transform(), colors="tab:purple", linestyles=":", lw=0.8)
        for c in (c for c in m.candidates if c.test.moved):
            ax.axvline(times[c.test.index], color="tab:purple", ls=":", lw=1)
            ax.annotate(
                c.test.what_changed_text()[:40] + " (moved)",
                (times[c.test.index], min(m.values)),
                fontsize=6,
                color="tab:purple",
                rotation=90,
                va="bottom",
                xytext=(-8, 0),
                textcoords="offset points",
            )
        for change in m.changes:
            colour = "tab:red" if change.direction == "regression" else "tab:green"
            ax.axvline(times[change.index], color=colour, ls="--", lw=1)
            ax.annotate(
                f"{change.change_pct:+.1f}% {change.direction}\n{change.what_changed_text()[:60]}",
                (times[change.index], max(m.values)),
                fontsize=7,
                color=colour,
                va="top",
                xytext=(3, 0),
                textcoords="offset points",
            )
        ax.set_ylabel(f"{m.metric.split('/', 1)[1]} ({m.unit})", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3)
    axes[0].set_title(
        f"{trend.label} [{trend.series}]: segment means (line), +-1 std (band), change points "
        "(dashed), drift slope (orange), version changes (dotted; named if it moved)",
        fontsize=9,
    )
    fig.autofmt_xdate()
    return save_figure(fig, path)
