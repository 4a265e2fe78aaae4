"""The fleet view as text, JSON and a picture: each workload's machines, the slow ones with their evidence."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import numpy as np

from yolo_mlops.render import fmt, markdown_table, new_figure, save_figure
from yolo_mlops.trends.attribution import Attribution
from yolo_mlops.trends.fleet_moved import moved_entries
from yolo_mlops.trends.fleet_stats import FleetReport, SlowMachine
from yolo_mlops.trends.trend_report import contribution_figures

MOVED_ROWS = 8  # rows of a slow machine's phase / operator table in the Markdown (JSON: all of them)


def no_fleet_line(report: FleetReport) -> str:
    where = f" of experiment '{report.experiment}'" if report.experiment else ""
    seen = (
        f" ({report.single_machine_workloads} workload(s) on one machine only)"
        if report.single_machine_workloads
        else ""
    )
    return (
        f"No workload{where} ran on two or more machines with {report.settings.min_runs} runs each{seen}: "
        f"no fleet to compare."
    )


def fleet_markdown(report: FleetReport) -> str:
    if not report.workloads:
        return no_fleet_line(report)
    lines = []
    for w in report.workloads:
        rows = [
            (
                f"`{stats.machine}`",
                stats.runs,
                fmt(stats.median_step_ms, ".1f"),
                f"{fmt(stats.ci_low, '.1f')}-{fmt(stats.ci_high, '.1f')}",
                f"x{stats.ratio:.2f}",
                fmt(stats.adjusted_pvalue, ".2g"),
                f"**slower** +{100 * (stats.ratio - 1):.0f}%" if stats.slow else "-",
            )
            for stats in w.machines
        ]
        lines += [
            f"### {w.label}",
            "",
            markdown_table(["machine", "runs", "median step ms", "95% CI", "vs peers", "p (Holm)", "verdict"], rows),
            "",
            f"Run-to-run noise {w.noise_pct:.1f}% (pooled within machines, {w.degrees_of_freedom} df)."
            + (
                f" Left out (fewer than {report.settings.min_runs} runs): {', '.join(w.left_out)}."
                if w.left_out
                else ""
            ),
        ]
        for s in w.slow_machines:
            lines += [
                "",
                f"`{s.machine}` is slower than its peers (+{s.slower_pct:.0f}%, "
                f"{fmt(s.median_step_ms, '.1f')} vs {fmt(s.peers_median_ms, '.1f')} ms, "
                f"p {s.adjusted_pvalue:.2g} after Holm): {s.explanation}",
            ]
            lines += [f"- {e.text}" + (" **<-**" if e.stands_out else "") for e in s.evidence]
            if s.moved is not None:
                lines += ["", *moved_markdown(s, s.moved)]
        if not w.slow_machines:
            lines += ["", "No machine is slower than its peers beyond noise."]
        lines.append("")
    lines.append(f"Test: {report.test}.")
    return "\n".join(lines)


def moved_markdown(s: SlowMachine, a: Attribution) -> list[str]:
    """The slow machine's phases and operators against its peers': a heading line and the table."""
    if not a.contributions:
        return [f"Phases and operators of `{s.machine}` against its peers: {a.note or 'nothing differs'}."]
    peers = len(a.before_runs)
    head = (
        f"Phases and operators of `{s.machine}` against its peers (its newest {len(a.after_runs)} runs vs "
        f"{peers} of its peers', profiled step {fmt(a.step_ms_before)} -> {fmt(a.step_ms_after)} ms)"
    )
    if a.runs_without_tables:
        head += f"; {len(a.runs_without_tables)} runs without key_averages tables left out"
    moved = {(c.kind, c.name) for c in moved_entries(a)}
    rows = [
        (c.kind, f"`{c.name[:70]}`", *contribution_figures(c), "**moved**" if (c.kind, c.name) in moved else "-")
        for c in a.contributions[:MOVED_ROWS]
    ]
    table = markdown_table(
        ["kind", "name", "peers ms/step", f"{s.machine} ms/step", "delta", "% of gap", "consistency", "p (M-W)", ""],
        rows,
    )
    more = len(a.contributions) - MOVED_ROWS
    return [head + ":", "", table] + ([f"({more} more rows in the JSON)"] if more > 0 else [])


def to_json(report: FleetReport) -> dict:
    out = asdict(report)
    for w, workload in zip(out["workloads"], report.workloads, strict=True):
        for s, slow in zip(w["slow_machines"], workload.slow_machines, strict=True):
            s["slower_pct"] = slow.slower_pct
            if slow.moved is not None:
                s["moved"]["shift_ms"] = slow.moved.shift_ms
                s["moved"]["moved"] = [f"{c.kind} {c.name}" for c in moved_entries(slow.moved)]
    if not report.workloads:
        out["note"] = no_fleet_line(report)
    return out


def plot_fleet(report: FleetReport, path: Path) -> Path:
    """Per-machine step-time distributions side by side (box and points), one panel per workload; slow
    machines in red."""
    n = max(len(report.workloads), 1)
    fig = new_figure(8, 3.2 * n)
    for i, w in enumerate(report.workloads):
        ax = fig.add_subplot(n, 1, i + 1)
        ax.boxplot([stats.step_ms for stats in w.machines], tick_labels=[stats.machine for stats in w.machines])
        for j, stats in enumerate(w.machines, start=1):
            offsets = np.linspace(-0.08, 0.08, len(stats.step_ms)) if len(stats.step_ms) > 1 else [0.0]
            ax.scatter(
                j + np.asarray(offsets),
                stats.step_ms,
                s=14,
                alpha=0.75,
                zorder=3,
                color="tab:red" if stats.slow else "tab:blue",
            )
        ax.set_title(w.label, fontsize=9)
        ax.set_ylabel("step time p50, ms")
    return save_figure(fig, path)
