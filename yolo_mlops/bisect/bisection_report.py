"""What a bisection tells its user: the report (steps, decisions, first bad commit, its shift, the operators
that moved) and the command's exit code."""

from __future__ import annotations

import math

import numpy as np

from yolo_mlops.bisect.models import INCONCLUSIVE, NO_REGRESSION, NO_REGRESSION_LINE, BisectPlan, BisectResult
from yolo_mlops.bisect.search import figure_label
from yolo_mlops.trends.trend import is_operator


def report(plan: BisectPlan, result: BisectResult) -> str:
    """The bisection as text: the range, each step's table row, what the steps decided on, the outcome, the cost."""
    lines = [
        f"bisect {plan.good.line()} .. {plan.bad.line()}",
        f"repository {plan.repo}, {len(plan.commits)} commits; workload {plan.workload_label} "
        f"(from run {plan.workload_run}); {plan.history_note}",
        steps_table(plan, result),
        decided_on_text(plan, result),
        *outcome_lines(plan, result),
    ]
    installs = sorted(result.install_s.values())
    lines.append(
        f"{result.runs} profiled runs in {len(result.steps)} steps (premise + {len(result.steps) - 1}; at "
        f"most {plan.max_steps} bisection steps for {len(plan.commits)} commits), {result.wall_s:.0f} s"
        + (f" ({len(installs)} commits installed, {np.median(installs):.1f} s each)" if installs else "")
        + f"; parent MLflow run {result.parent_run_id} in experiment {plan.request.bisect_experiment!r}"
    )
    return "\n".join(lines)


def steps_table(plan: BisectPlan, result: BisectResult) -> str:
    """One row a step: commit, runs, medians, shift (and the step time's beside a figure), t, p, decision."""
    from yolo_mlops.render import fmt, markdown_table

    metric = plan.request.metric
    figure = result.figure
    rows = []
    for s in result.steps:
        d = s.decision
        row = [
            s.step,
            s.commit.short,
            s.commit.subject[:50],
            f"{len(s.candidate_runs)}+{len(s.good_runs)}",
            fmt(s.median("candidate")),
            fmt(s.median("good")),
        ]
        if figure is not None and s.step_time is not None:
            st = s.step_time
            row += [f"{st.shift_pct:+.1f}%", f"{st.t:.2f}", f"{d.shift_pct:+.1f}%"]
        elif figure is not None:
            row += [f"{d.shift_pct:+.1f}%", "", ""]
        else:
            row += [f"{d.shift_pct:+.1f}%"]
        rows.append((*row, f"{d.t:.2f} (df {d.df})", fmt(min(d.p_bad, d.p_good), ".2g"), d.verdict))
    head = [
        "step",
        "commit",
        "subject",
        "runs (cand.+good)",
        f"candidate {metric} median",
        "good median",
        "shift" if figure is None else "step-time shift",
    ]
    if figure is not None:
        head += ["step-time t", "figure shift"]
    return markdown_table([*head, "t", "p", "decision"], rows)


def outcome_lines(plan: BisectPlan, result: BisectResult) -> list[str]:
    """No regression, inconclusive with the narrowed range, or the first bad commit with its shift and evidence."""
    from yolo_mlops.render import fmt
    from yolo_mlops.trends.trend_report import attribution_text

    metric, figure = plan.request.metric, result.figure
    lines: list[str] = []
    premise = result.steps[0].decision
    if result.result == NO_REGRESSION:
        lines.append(
            f"{NO_REGRESSION_LINE}: bad vs good {premise.shift_pct:+.1f}% (slowness, log scale), "
            f"{premise.n_candidate}+{premise.n_good} runs; not slower beyond noise by at least "
            f"{100 * plan.request.min_effect:g}%; nothing bisected"
        )
    elif result.result == INCONCLUSIVE:
        last, good, bad = result.steps[-1], result.last_good, result.first_known_bad
        if good is None or bad is None:  # search.bisect sets the narrowed range with the inconclusive result
            raise ValueError("an inconclusive bisection result lacks its narrowed range")
        lines.append(
            f"inconclusive: step {last.step} (commit {last.commit.short}) stayed undecided after "
            f"{len(last.candidate_runs)} runs a side; the first bad commit is after "
            f"{good.short} and at or before {bad.short}: `git log {good.short}..{bad.short}`"
        )
    else:
        if result.first_bad is None or result.shift is None:  # search.bisect sets both with the first_bad result
            raise ValueError("a first_bad bisection result lacks its commit or its shift")
        change, low, high = result.shift
        lines.append(f"first bad commit: {result.first_bad.hash} {result.first_bad.subject}")
        lines.append(
            f"{metric}: {fmt(result.good_value)} -> {fmt(result.bad_value)} (medians), "
            f"{100 * change:+.1f}% (95% CI {100 * low:+.1f}% .. {100 * high:+.1f}%)"
        )
        if figure is not None and result.figure_shift is not None:
            f_change, f_low, f_high = (100 * math.expm1(x) for x in result.figure_shift)
            lines.append(
                f"the figure ({figure.kind} {figure.label()}) at the first bad commit: {f_change:+.1f}% of "
                f"the step (95% CI {f_low:+.1f}% .. {f_high:+.1f}%)"
            )
            lines.append(step_time_check(result))
        if result.attribution is not None:
            lines.append("operators that moved (good runs vs first bad runs of its step):")
            lines.append(attribution_text(result.attribution))
    return lines


def decided_on_text(plan: BisectPlan, result: BisectResult) -> str:
    """What the steps decided on, why, and the error rate of each decision."""
    s = plan.settings
    rate = (
        f"each decision errs with probability at most alpha = {s.alpha:g} ({s.looks} looks at "
        f"{s.alpha_look:.2g} each when one test decides)"
    )
    figure = result.figure
    if figure is None and is_operator(plan.request.metric):
        why = "--metric names an operator series: every step decides on its own time, log ms per profiled step"
        return f"decided on: {figure_label(None, plan.request.metric)} ({why}); {rate}"
    if figure is None:
        premise = result.steps[0]
        profiled = all(r.entries is not None for r in premise.good_runs + premise.candidate_runs)
        why = (
            "no profile entry moved beyond noise, by at least --min-effect of the step, in the premise"
            if profiled
            else "the premise's runs have no profiler tables"
        )
        return f"decided on: {figure_label(None)} ({why}); {rate}"
    return (
        f"decided on: {figure_label(figure)}: {figure.good_ms:.3g} -> {figure.bad_ms:.3g} ms/step in the "
        f"premise, each named {figure.kind} slower at p <= {figure.alpha_entry:.2g} (alpha / 2 / {s.looks} "
        f"looks / {figure.tested} entries tested; step time at alpha / 2); every step decided on their figure "
        f"(log of the step time had only they moved) by the same sequential test: {rate}"
    )


def step_time_check(result: BisectResult) -> str:
    """Step time at the first bad commit, read against its interval and the premise's step-time shift."""
    if result.shift is None:
        return ""
    change, low, high = result.shift
    said = (
        "its interval is above zero: step time confirms the first bad commit"
        if low > 0
        else "its interval includes zero: step time alone does not confirm it with these runs"
    )
    line = (
        f"step-time check: {100 * change:+.1f}% at the first bad commit (95% CI {100 * low:+.1f}% .. "
        f"{100 * high:+.1f}%), {said}"
    )
    if result.premise_step_shift is not None:
        inside = low <= result.premise_step_shift <= high
        line += f"; the premise's step-time shift {100 * result.premise_step_shift:+.1f}% lies " + (
            "inside it" if inside else "outside it: another commit of the range may also have moved step time"
        )
    return line


def exit_code(result: BisectResult) -> int:
    """0: first bad commit found, or no regression; 3: inconclusive (the range narrowed so far is reported)."""
    return 3 if result.result == INCONCLUSIVE else 0
