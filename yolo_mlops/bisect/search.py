"""The bisection itself: the premise (bad vs good), then halving the commit range step by step, each step
decided by `decide` over the runs `commit_runs.CommitRunner` makes, and the first bad commit's shift.

The premise decides on step time and on what moved (`decide.run_premise_named`): when entries of the runs'
profiles (operators, device kernels, or step phases) moved beyond noise by at least min_effect of the step,
every step decides on their figure (`decide.Figure`: the step time the runs would have, had only those
entries moved), with the same sequential test and the same error rate per step; step time is tested on the
same runs for the report, and the first bad commit's step-time shift is reported with its interval. When no
entry is named, every step decides on step time.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from yolo_mlops import names
from yolo_mlops.bisect import decide
from yolo_mlops.bisect.commit_runs import CommitRunner
from yolo_mlops.bisect.decide import Decision, Figure, Observation, Sides
from yolo_mlops.bisect.git import Commit
from yolo_mlops.bisect.models import (
    FIRST_BAD,
    INCONCLUSIVE,
    NO_REGRESSION,
    BisectPlan,
    BisectResult,
    ProfiledRun,
    StepRecord,
)
from yolo_mlops.stats import pooled_noise
from yolo_mlops.trends.trend import is_operator


def observation(run: ProfiledRun) -> Observation:
    return Observation(run.slowness, run.step_ms, run.entries)


def _operator_observation(run: ProfiledRun) -> Observation:
    return Observation(run.slowness, run.step_ms, None)


def bisect(plan: BisectPlan, runner: CommitRunner, parent_id: str) -> BisectResult:
    settings = plan.settings
    commits = [plan.good, *plan.commits]  # index 0 known good, last known bad (once the premise holds)
    premise_runs: dict[int, tuple[ProfiledRun, ProfiledRun]] = {}
    # --metric naming an operator series: every step decides on that operator's own time, as asked, never on a
    # figure the premise would name from the profiles
    observe = observation if not is_operator(plan.request.metric) else _operator_observation
    premise = decide.run_premise_named(runner.pairs(0, plan.bad, premise_runs, observe), settings)
    figure = premise.figure
    steps = [record(0, plan.bad, premise.decision, premise_runs, premise.step_time if figure is not None else None)]
    result = BisectResult(
        NO_REGRESSION,
        parent_id,
        plan.good,
        plan.bad,
        len(plan.commits),
        steps,
        figure=figure,
        premise_step_shift=_relative(plan, premise.step_time.shift),
    )
    if premise.decision.verdict != decide.REGRESSION:
        return result
    value: Callable[[ProfiledRun], float] = (
        (lambda run: figure.value(run.entries or {})) if figure is not None else (lambda run: run.slowness)
    )
    decided_sides = premise.figure_sides if premise.figure_sides is not None else premise.step_sides
    lo, hi = 0, len(commits) - 1
    earlier: list[list[float]] = []
    step_earlier: list[list[float]] = []
    while hi - lo > 1:
        mid = (lo + hi) // 2
        step_runs: dict[int, tuple[ProfiledRun, ProfiledRun]] = {}
        decision, sides = decide.run_step(
            runner.pairs(len(steps), commits[mid], step_runs, value), settings, decided_sides, earlier
        )
        earlier += [sides.good, sides.other]
        step_time = None
        if figure is not None:
            step_time, step_sides = _step_time(step_runs, premise.step_sides, step_earlier, settings)
            step_earlier += [step_sides.good, step_sides.other]
        steps.append(record(len(steps), commits[mid], decision, step_runs, step_time))
        if decision.verdict == decide.BAD:
            hi = mid
        elif decision.verdict == decide.GOOD:
            lo = mid
        else:
            result.result, result.last_good, result.first_known_bad = INCONCLUSIVE, commits[lo], commits[hi]
            return result
    result.result, result.first_bad = FIRST_BAD, commits[hi]
    result.last_good, result.first_known_bad = commits[lo], commits[hi]
    # the shift: the first bad commit's runs against the good runs of the same step (the premise when the
    # first bad commit is bad itself and was never a candidate)
    where = judging_step(steps, commits[hi])
    result.shift = _shift(plan, steps, where, lambda run: run.slowness)
    if figure is not None:
        result.figure_shift = _shift(plan, steps, where, value, relative=False)
    result.good_value, result.bad_value = where.median("good"), where.median("candidate")
    return result


def _step_time(
    runs: dict[int, tuple[ProfiledRun, ProfiledRun]],
    premise: Sides,
    earlier: list[list[float]],
    settings: decide.Settings,
) -> tuple[Decision, Sides]:
    """Step time's own test of a step the figure decided: the same test at the look the step ended on."""
    ordered = [runs[i] for i in sorted(runs)]
    sides = Sides([g.slowness for g, _ in ordered], [c.slowness for _, c in ordered])
    noise = pooled_noise([premise.good, premise.other, *earlier, sides.good, sides.other])
    looks = len(ordered) - settings.repeats + 1
    return decide.step_decision(
        sides.other, sides.good, premise.other, premise.good, noise, settings.alpha_look, looks
    ), sides


def _shift(
    plan: BisectPlan,
    steps: list[StepRecord],
    where: StepRecord,
    value: Callable[[ProfiledRun], float],
    relative: bool = True,
) -> tuple[float, float, float]:
    """Relative change of `value` (log units) from the good runs to the candidate runs of `where`, with its
    95% interval on the noise pooled over every group of the bisection."""
    groups = [[value(r) for r in runs] for s in steps for runs in (s.good_runs, s.candidate_runs)]
    noise = pooled_noise(groups)
    change, low, high = decide.shift_interval(
        [value(r) for r in where.candidate_runs], [value(r) for r in where.good_runs], noise
    )
    if relative and plan.higher_is_better:  # slowness is minus the log: the metric moved by the inverse factor
        change, low, high = 1 / (1 + change) - 1, 1 / (1 + high) - 1, 1 / (1 + low) - 1
    return change, low, high


def _relative(plan: BisectPlan, shift: float) -> float:
    change = math.expm1(shift)
    return 1 / (1 + change) - 1 if plan.higher_is_better else change


def record(
    step: int,
    commit: Commit,
    decision: Decision,
    runs: dict[int, tuple[ProfiledRun, ProfiledRun]],
    step_time: Decision | None = None,
) -> StepRecord:
    ordered = [runs[i] for i in sorted(runs)]
    return StepRecord(step, commit, decision, [c for _, c in ordered], [g for g, _ in ordered], step_time)


def judging_step(steps: list[StepRecord], commit: Commit) -> StepRecord:
    """The last step whose candidate was `commit` (the premise when it never was one: the bad commit)."""
    return next((s for s in reversed(steps) if s.commit.hash == commit.hash), steps[0])


def slowness(runs: list[ProfiledRun]) -> list[float]:
    return [r.slowness for r in runs]


def figure_label(figure: Figure | None, metric: str = names.STEP_TIME_P50) -> str:
    """What the steps decided on: the named figure, an operator series the bisection was asked for, or step time
    (the metric asked for, step time by default)."""
    if figure is not None:
        return f"{figure.kind} {figure.label()}"
    return f"operator series {metric}" if is_operator(metric) else "step time"
