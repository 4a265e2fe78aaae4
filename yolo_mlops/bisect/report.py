"""What a bisection tells its user: the report (steps, decisions, first bad commit, its shift, the operators
that moved) and the command's exit code."""

from __future__ import annotations

import numpy as np

from yolo_mlops.bisect.models import INCONCLUSIVE, NO_REGRESSION, NO_REGRESSION_LINE, BisectPlan, BisectResult


def report(plan: BisectPlan, result: BisectResult) -> str:
    from yolo_mlops.render import fmt, markdown_table
    from yolo_mlops.trends.report import attribution_text

    metric = plan.request.metric
    lines = [f"bisect {plan.good.line()} .. {plan.bad.line()}",
             f"repository {plan.repo}, {len(plan.commits)} commits; workload {plan.workload_label} "
             f"(from run {plan.workload_run}); {plan.history_note}"]
    rows = []
    for s in result.steps:
        d = s.decision
        rows.append((s.step, s.commit.short, s.commit.subject[:50], f"{len(s.candidate_runs)}+{len(s.good_runs)}",
                     fmt(s.median("candidate")), fmt(s.median("good")), f"{d.shift_pct:+.1f}%",
                     f"{d.t:.2f} (df {d.df})", fmt(min(d.p_bad, d.p_good), ".2g"), d.verdict))
    lines.append(markdown_table(["step", "commit", "subject", "runs (cand.+good)", f"candidate {metric} median",
                                 "good median", "shift", "t", "p", "decision"], rows))
    premise = result.steps[0].decision
    if result.result == NO_REGRESSION:
        lines.append(f"{NO_REGRESSION_LINE}: bad vs good {premise.shift_pct:+.1f}% (slowness, log scale), "
                     f"{premise.n_candidate}+{premise.n_good} runs; not slower beyond noise by at least "
                     f"{100 * plan.request.min_effect:g}%; nothing bisected")
    elif result.result == INCONCLUSIVE:
        last, good, bad = result.steps[-1], result.last_good, result.first_known_bad
        if good is None or bad is None:  # search.bisect sets the narrowed range with the inconclusive result
            raise ValueError("an inconclusive bisection result lacks its narrowed range")
        lines.append(f"inconclusive: step {last.step} (commit {last.commit.short}) stayed undecided after "
                     f"{len(last.candidate_runs)} runs a side; the first bad commit is after "
                     f"{good.short} and at or before {bad.short}: `git log {good.short}..{bad.short}`")
    else:
        if result.first_bad is None or result.shift is None:  # search.bisect sets both with the first_bad result
            raise ValueError("a first_bad bisection result lacks its commit or its shift")
        change, low, high = result.shift
        lines.append(f"first bad commit: {result.first_bad.hash} {result.first_bad.subject}")
        lines.append(f"{metric}: {fmt(result.good_value)} -> {fmt(result.bad_value)} (medians), "
                     f"{100 * change:+.1f}% (95% CI {100 * low:+.1f}% .. {100 * high:+.1f}%)")
        if result.attribution is not None:
            lines.append("operators that moved (good runs vs first bad runs of its step):")
            lines.append(attribution_text(result.attribution))
    installs = sorted(result.install_s.values())
    lines.append(f"{result.runs} profiled runs in {len(result.steps)} steps (premise + {len(result.steps) - 1}; at "
                 f"most {plan.max_steps} bisection steps for {len(plan.commits)} commits), {result.wall_s:.0f} s"
                 + (f" ({len(installs)} commits installed, {np.median(installs):.1f} s each)" if installs else "")
                 + f"; parent MLflow run {result.parent_run_id} in experiment {plan.request.bisect_experiment!r}")
    return "\n".join(lines)


def exit_code(result: BisectResult) -> int:
    """0: first bad commit found, or no regression; 3: inconclusive (the range narrowed so far is reported)."""
    return 3 if result.result == INCONCLUSIVE else 0
