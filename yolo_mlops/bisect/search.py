"""The bisection itself: the premise (bad vs good), then halving the commit range step by step, each step
decided by `decide` over the runs `execution.Runner` makes, and the first bad commit's shift."""

from __future__ import annotations

from yolo_mlops.bisect import decide
from yolo_mlops.bisect.decide import Decision
from yolo_mlops.bisect.execution import Runner
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


def bisect(plan: BisectPlan, runner: Runner, parent_id: str) -> BisectResult:
    settings = plan.settings
    commits = [plan.good, *plan.commits]  # index 0 known good, last known bad (once the premise holds)
    premise_runs: dict[int, tuple[ProfiledRun, ProfiledRun]] = {}
    decision, premise = decide.run_premise(runner.pairs(0, plan.bad, premise_runs), settings)
    steps = [record(0, plan.bad, decision, premise_runs)]
    result = BisectResult(NO_REGRESSION, parent_id, plan.good, plan.bad, len(plan.commits), steps)
    if decision.verdict != decide.REGRESSION:
        return result
    lo, hi = 0, len(commits) - 1
    earlier: list[list[float]] = []
    while hi - lo > 1:
        mid = (lo + hi) // 2
        step_runs: dict[int, tuple[ProfiledRun, ProfiledRun]] = {}
        decision, sides = decide.run_step(runner.pairs(len(steps), commits[mid], step_runs), settings,
                                          premise, earlier)
        steps.append(record(len(steps), commits[mid], decision, step_runs))
        earlier += [sides.good, sides.other]
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
    groups = [g for s in steps for g in (slowness(s.good_runs), slowness(s.candidate_runs))]
    noise = decide.pooled_noise(groups)
    change, low, high = decide.shift_interval(slowness(where.candidate_runs), slowness(where.good_runs), noise)
    if plan.higher_is_better:  # slowness is minus the log: the metric moved by the inverse factor
        change, low, high = 1 / (1 + change) - 1, 1 / (1 + high) - 1, 1 / (1 + low) - 1
    result.shift = (change, low, high)
    result.good_value, result.bad_value = where.median("good"), where.median("candidate")
    return result


def record(step: int, commit: Commit, decision: Decision, runs: dict[int, tuple[ProfiledRun, ProfiledRun]]
           ) -> StepRecord:
    ordered = [runs[i] for i in sorted(runs)]
    return StepRecord(step, commit, decision, [c for _, c in ordered], [g for g, _ in ordered])


def judging_step(steps: list[StepRecord], commit: Commit) -> StepRecord:
    """The last step whose candidate was `commit` (the premise when it never was one: the bad commit)."""
    return next((s for s in reversed(steps) if s.commit.hash == commit.hash), steps[0])


def slowness(runs: list[ProfiledRun]) -> list[float]:
    return [r.slowness for r in runs]
