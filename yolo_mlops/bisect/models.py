"""What a bisection is asked, what it plans, and what it found: plain data, no I/O."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import numpy as np

from yolo_mlops import names
from yolo_mlops.bisect.decide import Decision, Figure, Key, Settings
from yolo_mlops.bisect.git import Commit
from yolo_mlops.config import RunSpec

if TYPE_CHECKING:
    from yolo_mlops.trends.attribution import Attribution

DEFAULT_EXPERIMENT = names.BENCHMARK_EXPERIMENT  # where series are looked up (the nightly benchmark's)
DEFAULT_BISECT_EXPERIMENT = names.BISECT_EXPERIMENT
RUN_TIMEOUT_S = 3600.0  # a bisection's profiled run (one process) is killed after this long: a failed run
Outcome = Literal["first_bad", "no_regression", "inconclusive"]  # tag names.BISECT_RESULT
FIRST_BAD: Outcome = "first_bad"
NO_REGRESSION: Outcome = "no_regression"
INCONCLUSIVE: Outcome = "inconclusive"
Role = Literal["candidate", "good"]  # tag names.BISECT_ROLE: the side of a step a profiled run measured
NO_REGRESSION_LINE = "no regression between good and bad"
DECIDED_ON_TAG = names.BISECT_PREFIX + "decided_on"  # parent: step time, or the kind and names of the figure
STEP_TIME = "step time"  # what a step decided on when no figure was named


@dataclass(frozen=True)
class BisectRequest:
    good: str
    bad: str
    repo: str | None = None  # default: the repository of this installation's code
    series: str | None = None
    run_id: str | None = None
    experiment: str = DEFAULT_EXPERIMENT
    bisect_experiment: str = DEFAULT_BISECT_EXPERIMENT
    repeats: int = 3
    max_repeats: int = 6
    metric: str = names.STEP_TIME_P50
    alpha: float = 0.01
    min_effect: float = 0.05
    run_timeout_s: float = RUN_TIMEOUT_S  # a profiled run still going after this long is killed: a failed run


@dataclass(frozen=True)
class BisectPlan:
    request: BisectRequest
    repo: Path
    good: Commit
    bad: Commit
    commits: tuple[Commit, ...]  # after good up to bad, oldest first
    spec: RunSpec  # the workload
    workload_run: str  # the run whose RunSpec it is
    workload_label: str
    higher_is_better: bool
    history_note: str  # what the series' history said about the good commit

    @property
    def settings(self) -> Settings:
        r = self.request
        return Settings(repeats=r.repeats, max_repeats=r.max_repeats, alpha=r.alpha, min_effect=r.min_effect)

    @property
    def max_steps(self) -> int:
        return math.ceil(math.log2(len(self.commits))) if len(self.commits) > 1 else 0


@dataclass
class ProfiledRun:
    commit: Commit
    step: int
    role: Role
    run_id: str
    value: float  # the metric
    slowness: float  # log value (minus log for higher-is-better metrics)
    step_ms: float | None = None  # the run's profile: its step time (ms) and entries (ms per profiled step)
    entries: dict[Key, float] | None = None  # None: no profiler tables


@dataclass
class StepRecord:
    step: int  # 0: the premise (bad vs good)
    commit: Commit  # the candidate (bad at step 0)
    decision: Decision  # the one that decided the step: on the figure when one was named, else on step time
    candidate_runs: list[ProfiledRun]
    good_runs: list[ProfiledRun]
    step_time: Decision | None = None  # step time's own test of the same runs, when the figure decided

    def median(self, role: Role) -> float:
        runs = self.candidate_runs if role == "candidate" else self.good_runs
        return float(np.median([r.value for r in runs]))


@dataclass
class BisectResult:
    result: Outcome
    parent_run_id: str
    good: Commit
    bad: Commit
    commits: int
    steps: list[StepRecord]
    first_bad: Commit | None = None
    last_good: Commit | None = None  # the narrowed range: last known good .. first known bad
    first_known_bad: Commit | None = None
    shift: tuple[float, float, float] | None = None  # relative change of the metric, 95% interval
    good_value: float | None = None
    bad_value: float | None = None
    attribution: Attribution | None = None
    figure: Figure | None = None  # what the steps decided on, named by the premise; None: step time
    figure_shift: tuple[float, float, float] | None = None  # the figure's change at the first bad commit, 95% CI
    premise_step_shift: float | None = None  # step time's change from good to bad in the premise (fraction)
    runs: int = 0
    wall_s: float = 0.0
    install_s: dict[str, float] = field(default_factory=dict)
    report: str = ""
