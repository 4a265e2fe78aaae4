"""A bisection end to end: check the input, confirm the premise, bisect, attribute, record it all in MLflow.

`prepare(request)` checks everything before a run is made (one-line ConfigErrors); `run(plan)` runs it:

- a parent MLflow run (`yolo_mlops.run_kind=bisect`) in the bisect experiment, ended FINISHED, or FAILED /
  KILLED with the reason; every profiled run is its child (`yolo_mlops.bisect.commit`, `.step`, `.role`);
  a child its process left RUNNING (killed hard) is ended FAILED;
- each profiled run is the workload's RunSpec run by the code of one commit, in a process of its own:
  `PYTHONPATH=<that commit's installed copy>` (`git.Installs`), working folder outside the repository,
  `YOLO_MLOPS_GIT_COMMIT=<commit>` so the run records which code ran. The process runs the steps of
  `flows/profile_training.py` without Prefect (`pipeline.prepare/train/analyse/track` in `run_guard`);
  a commit whose code lacks those falls back to `python -m yolo_mlops.cli profile --config spec.yaml`.

The runs of a bisection go to their own experiment (default `yolo-mlops-bisect`), never to the series'
experiment: runs of old commits made today would read as a new change point of the series' history.
"""

from __future__ import annotations

import contextlib
import math
import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import yaml

from yolo_mlops.bisect import decide, git
from yolo_mlops.bisect.decide import Decision, Settings
from yolo_mlops.bisect.git import Commit
from yolo_mlops.config import RunSpec, build_run_spec
from yolo_mlops.errors import ConfigError
from yolo_mlops.tracking import connection, names, queries, run_end, writes

if TYPE_CHECKING:
    from yolo_mlops.trends.attribution import Attribution

DEFAULT_EXPERIMENT = "yolo-mlops-benchmark"  # where series are looked up (the nightly benchmark's)
DEFAULT_BISECT_EXPERIMENT = "yolo-mlops-bisect"
RUN_TIMEOUT_S = 3600.0  # a bisection's profiled run (one process) is killed after this long: a failed run
TIMED_OUT = -9  # _child's exit code for a process killed past its timeout
Outcome = Literal["first_bad", "no_regression", "inconclusive"]  # tag names.BISECT_RESULT
FIRST_BAD: Outcome = "first_bad"
NO_REGRESSION: Outcome = "no_regression"
INCONCLUSIVE: Outcome = "inconclusive"
Role = Literal["candidate", "good"]  # tag names.BISECT_ROLE: the side of a step a profiled run measured
NO_REGRESSION_LINE = "no regression between good and bad"
RUN_ID_MARK = "BISECT_RUN_ID="
UNSUPPORTED_MARK = "BISECT_DRIVER_UNSUPPORTED"

# Runs in the commit's code; the steps of flows/profile_training.py without Prefect (the caller holds the GPU).
DRIVER = f"""
import signal, sys
def _stop(number, frame):
    raise KeyboardInterrupt(signal.Signals(number).name)
signal.signal(signal.SIGTERM, _stop)
try:
    from yolo_mlops.run import pipeline
    from yolo_mlops.config import load_run_spec
    try:
        from yolo_mlops.tracking.connection import client
        from yolo_mlops.tracking.run_end import run_guard
    except ImportError:  # code from before tracking/ had these modules: the package itself forwarded both
        from yolo_mlops.tracking import client, run_guard
    steps = (pipeline.prepare, pipeline.train, pipeline.analyse, pipeline.track, pipeline.RunSalvage)
except (ImportError, AttributeError) as exc:
    print("{UNSUPPORTED_MARK}", exc, flush=True)
    sys.exit(3)
spec = load_run_spec(sys.argv[1])
prepared = pipeline.prepare(spec)
print("{RUN_ID_MARK}" + prepared.run_id, flush=True)
mlflow = client()
with run_guard(mlflow, prepared.run_id, salvage=pipeline.RunSalvage(mlflow, prepared)):
    outcome = pipeline.train(prepared)
    analysis = pipeline.analyse(prepared, outcome)
    pipeline.track(prepared, outcome, analysis)
"""


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


@dataclass
class StepRecord:
    step: int  # 0: the premise (bad vs good)
    commit: Commit  # the candidate (bad at step 0)
    decision: Decision
    candidate_runs: list[ProfiledRun]
    good_runs: list[ProfiledRun]

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
    runs: int = 0
    wall_s: float = 0.0
    install_s: dict[str, float] = field(default_factory=dict)
    report: str = ""


# checks -----------------------------------------------------------------------------------------------------

def prepare(request: BisectRequest, mlflow=None) -> BisectPlan:
    """Every check before a run is made; each failure is one ConfigError line."""
    from yolo_mlops.trends import bounds
    from yolo_mlops.trends.trend import WATCHED_BY_NAME

    if request.repeats < 2:
        raise ConfigError(f"--repeats {request.repeats}: at least 2 runs a side are needed to see the noise")
    if request.max_repeats < request.repeats:
        raise ConfigError(f"--max-repeats {request.max_repeats} is below --repeats {request.repeats}")
    bounds.check_pvalue("--alpha", request.alpha)
    bounds.check_fraction("--min-effect", request.min_effect)
    if not request.run_timeout_s > 0:
        raise ConfigError(f"--run-timeout {request.run_timeout_s:g}: must be > 0 seconds")
    watched = WATCHED_BY_NAME.get(request.metric)
    if watched is None:
        raise ConfigError(f"--metric {request.metric!r} is not watched; one of: {', '.join(WATCHED_BY_NAME)}")
    if (request.series is None) == (request.run_id is None):
        raise ConfigError("bisect needs one workload: --run RUN_ID (its run_spec.yaml) or --series KEY (the "
                          "newest run of the series in --experiment)")
    repo = git.check_repo(Path(request.repo).expanduser()) if request.repo else git.project_repo()
    good, bad = git.resolve(repo, request.good), git.resolve(repo, request.bad)
    commits = git.commit_range(repo, good, bad)
    git.check_clean(repo)
    mlflow = mlflow or connection.client()
    run, history = _workload(mlflow, request)
    spec = workload_spec(mlflow, run)
    from yolo_mlops.trends.history import record_from_run

    record = record_from_run(run)
    note = check_good_not_slow(repo, good, history, request.metric, watched.higher_is_better, request.min_effect)
    return BisectPlan(request, repo, good, bad, tuple(commits), spec, run.info.run_id,
                      record.label if record else run.info.run_id, watched.higher_is_better, note)


def _workload(mlflow, request: BisectRequest):
    """The workload's run and the history of its series (oldest first)."""
    from yolo_mlops import trends
    from yolo_mlops.trends.history import group_series, load_history, one_series, record_from_run

    if request.run_id is not None:
        run = queries.find_run(mlflow, request.run_id)
        if run is None:
            raise ConfigError(f"no MLflow run {request.run_id!r} in {connection.tracking_uri()}")
        record = record_from_run(run)
        if record is None:
            return run, []
        grouped = group_series(load_history(mlflow, [run.info.experiment_id]))
        return run, grouped.get(record.series, [])
    if request.series is None:  # prepare() lets no request through without a run or a series
        raise ConfigError("bisect needs one workload: --run RUN_ID or --series KEY")
    grouped = trends.load_experiment_series(mlflow, request.experiment)
    history = grouped[one_series(grouped, request.series, request.experiment)]
    run = queries.find_run(mlflow, history[-1].run_id)
    return run, history


def workload_spec(mlflow, run) -> RunSpec:
    """The RunSpec a run logged (`run_spec.yaml`), else rebuilt from its params (fields the params do not
    hold, such as train_args, take their defaults)."""
    text = queries.load_artifact_text(mlflow, run.info.run_id, names.RUN_SPEC_YAML)
    if text is not None:
        try:
            return build_run_spec(yaml.safe_load(text) or {})
        except (ConfigError, yaml.YAMLError):
            pass  # logged by a version of the code whose RunSpec differs: rebuild from the params
    return spec_from_params(run.data.params, run.data.tags, run.info.run_id)


def spec_from_params(params: dict[str, str], tags: dict[str, str], run_id: str) -> RunSpec:
    p, prof = names.TRAIN_PARAM, names.PROFILER_PARAM

    def num(key: str) -> int | None:
        value = params.get(key)
        return int(value) if value not in (None, "none", "None") else None

    try:
        fields: dict[str, Any] = {"model": params[p + "model"], "imgsz": num(p + "imgsz"), "batch": num(p + "batch"),
                  "workers": num(p + "workers"), "seed": num(p + "seed") or 0, "max_steps": num(p + "max_steps"),
                  "device": params.get(p + "device"), "variant": params.get(p + "variant", "baseline"),
                  "val": params.get(p + "val", "True") == "True",
                  "profiler": {f: num(prof + f) for f in ("skip_first", "wait", "warmup", "active", "repeat")}}
    except (KeyError, ValueError):
        raise ConfigError(f"run {run_id} has neither {names.RUN_SPEC_YAML} nor the params to rebuild its "
                          "workload") from None
    if tags.get(names.DATASET) != "synthetic" and params.get(p + "data"):
        fields["data"] = params[p + "data"]
    fields["profiler"] = {k: v for k, v in fields["profiler"].items() if v is not None}
    return build_run_spec({k: v for k, v in fields.items() if v is not None})


def check_good_not_slow(repo: Path, good: Commit, history: list, metric: str, higher_is_better: bool,
                        min_effect: float) -> str:
    """ConfigError when the series' history shows the good commit already slow: its runs sit in a segment
    worse by at least min_effect than an earlier segment of runs at its ancestors (a change point before it).
    Returns a note of what was checked."""
    from yolo_mlops.trends import changepoint

    commits = {r.versions.get("commit") for r in history}
    ancestors = {c for c in commits if c and len(c) >= 7 and c not in ("none", "?")
                 and (c == good.hash or git.is_ancestor(repo, c, good.hash))}
    points = [r for r in history if r.versions.get("commit") in ancestors and metric in r.metrics
              and np.isfinite(r.metrics[metric])]
    at_good = [i for i, r in enumerate(points) if r.versions.get("commit") == good.hash]
    if not at_good:
        return (f"the series' history has no run at the good commit {good.short}: not checked against history")
    points = points[:at_good[-1] + 1]
    values = np.array([r.metrics[metric] for r in points], dtype=float)
    cps = changepoint.detect(values)
    segs = changepoint.segments(values, cps)
    last = segs[-1]
    worse = (lambda a, b: a < b * (1 - min_effect)) if higher_is_better else (lambda a, b: a > b * (1 + min_effect))
    for seg, cp in zip(segs[:-1], cps, strict=True):
        if worse(last.mean, seg.mean):
            first = points[cps[-1].index]
            raise ConfigError(
                f"good commit {good.short} is already slow: its runs in the series' history are at {last.mean:.4g} "
                f"({metric}), {100 * (last.mean / seg.mean - 1):+.1f}% from an earlier level of {seg.mean:.4g} "
                f"(change point at run {first.run_id}, commit {first.versions.get('commit', '?')[:10]}, "
                f"p={cp.pvalue:.2g}): pick a good commit before that change")
    return f"the good commit's {len(at_good)} runs in the series' history are at its best level"


# runs -------------------------------------------------------------------------------------------------------

Hold = Callable[[str], contextlib.AbstractContextManager]  # device -> held around each run (the GPU limit)


def _no_hold(_device: str) -> contextlib.AbstractContextManager:
    return contextlib.nullcontext()


class RunFailed(RuntimeError):
    pass


class _Runner:
    """Profiled runs of one bisection: one process per run, the code of the commit, children of the parent."""

    def __init__(self, plan: BisectPlan, mlflow, parent_id: str, installs: git.Installs, hold: Hold,
                 log: Callable[[str], None]) -> None:
        self.plan, self.mlflow, self.parent_id, self.installs, self.hold, self.log = (
            plan, mlflow, parent_id, installs, hold, log)
        self.count = 0
        from yolo_mlops.run.environment import resolve_device

        self.device = resolve_device(plan.spec.device)

    def spec_file(self, commit: Commit, step: int, role: Role) -> Path:
        spec = self.plan.spec
        # only what differs from the defaults: older commits' RunSpecs refuse fields they do not know
        fields = spec.model_dump(mode="json", exclude_defaults=True)
        fields.update(experiment=self.plan.request.bisect_experiment, parent_run_id=self.parent_id,
                      run_kind=names.RUN_KIND_BISECT_RUN, run_name=f"bisect s{step} {role} {commit.short}",
                      tags={names.BISECT_COMMIT: commit.hash, names.BISECT_STEP: str(step), names.BISECT_ROLE: role})
        path = self.installs.root / f"spec-{self.count:03d}.yaml"
        path.write_text(yaml.safe_dump(fields, sort_keys=False))
        return path

    def run(self, commit: Commit, step: int, role: Role) -> ProfiledRun:
        site = self.installs.site(commit)
        spec_path = self.spec_file(commit, step, role)
        self.count += 1
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([str(site), *filter(None, [os.environ.get("PYTHONPATH")])])
        env["YOLO_MLOPS_GIT_COMMIT"] = commit.hash
        log_path = self.installs.root / f"run-{self.count:03d}.log"
        t0 = time.perf_counter()
        with self.hold(self.device):
            timeout = self.plan.request.run_timeout_s
            code, output = _child(["-c", DRIVER, str(spec_path)], env, self.installs.root, log_path, timeout)
            if code == 3 and UNSUPPORTED_MARK in output:  # older code: its own command line (and its own
                cli_env = {k: v for k, v in env.items() if k != "PREFECT_API_URL"}  # Prefect, no GPU limit)
                code, output = _child(["-m", "yolo_mlops.cli", "profile", "--config", str(spec_path)], cli_env,
                                      self.installs.root, log_path, timeout)
        run_id = _run_id(output)
        killed = f"killed after {self.plan.request.run_timeout_s:g} s (--run-timeout)"
        if run_id is not None:
            self._end_if_running(run_id, killed if code == TIMED_OUT else f"run process exited with code {code}")
        if code == TIMED_OUT:
            raise RunFailed(f"the {role} run of commit {commit.short} (step {step}) was {killed}: {_tail(output)}")
        if code != 0 or run_id is None:
            raise RunFailed(f"the {role} run of commit {commit.short} (step {step}) failed (exit code {code}): "
                            f"{_tail(output)}")
        stored = queries.find_run(self.mlflow, run_id)
        value = stored.data.metrics.get(self.plan.request.metric) if stored is not None else None
        if value is None or not value > 0:
            raise RunFailed(f"run {run_id} of commit {commit.short} logged no positive {self.plan.request.metric}")
        slowness = -math.log(value) if self.plan.higher_is_better else math.log(value)
        self.log(f"  step {step} {role:<9} {commit.short}  {self.plan.request.metric} {value:.4g}  "
                 f"({time.perf_counter() - t0:.0f} s, run {run_id})")
        return ProfiledRun(commit, step, role, run_id, value, slowness)

    def _end_if_running(self, run_id: str, reason: str) -> None:
        stored = queries.find_run(self.mlflow, run_id)
        if stored is not None and stored.info.status == "RUNNING":
            run_end.finish_failed_run(self.mlflow, run_id, "FAILED", reason)

    def end_children(self) -> None:
        for child in queries.child_runs(self.mlflow, self.parent_id):
            if child.status == "RUNNING":
                run_end.finish_failed_run(self.mlflow, child.run_id, "FAILED", "the bisection ended before this run")

    def pairs(self, step: int, candidate: Commit, runs: dict[int, tuple[ProfiledRun, ProfiledRun]],
              role: Role = "candidate") -> decide.Measure:
        """Interleaved pairs: good then candidate, candidate then good, ... (a linear drift cancels)."""
        good = self.plan.good

        def measure(i: int) -> tuple[float, float]:
            order = [("good", good), (role, candidate)] if i % 2 == 0 else [(role, candidate), ("good", good)]
            done = {r: self.run(commit, step, r) for r, commit in order}
            runs[i] = (done["good"], done[role])
            return done["good"].slowness, done[role].slowness

        return measure


def _child(args: list[str], env: dict[str, str], cwd: Path, log_path: Path, timeout_s: float = RUN_TIMEOUT_S
           ) -> tuple[int, str]:
    """A Python process; its output to `log_path`; ended (TERM, then KILL) if this process is interrupted, or
    when it runs past `timeout_s` (then the exit code is TIMED_OUT)."""
    with log_path.open("w") as log:
        proc = subprocess.Popen([sys.executable, *args], env=env, cwd=cwd, stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL)
        try:
            code = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            _stop(proc)
            code = TIMED_OUT
        except BaseException:
            _stop(proc)
            raise
    return code, log_path.read_text(errors="replace")


def _stop(proc: subprocess.Popen) -> None:
    """TERM, 60 s for the run to end its MLflow run, then KILL."""
    proc.terminate()
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _run_id(output: str) -> str | None:
    for line in output.splitlines():
        if line.startswith(RUN_ID_MARK):
            return line[len(RUN_ID_MARK):].strip()
        if line.startswith("MLflow run "):  # the command line's summary
            return line.split()[2]
    return None


def _tail(output: str) -> str:
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    errors = [line for line in lines if "Error" in line or "error" in line]
    return (errors[-1] if errors else lines[-1] if lines else "no output")[:500]


# the bisection ---------------------------------------------------------------------------------------------

def run(plan: BisectPlan, mlflow=None, hold: Hold = _no_hold, log: Callable[[str], None] = print) -> BisectResult:
    """Premise, then bisection steps; everything recorded under one parent run."""
    mlflow = mlflow or connection.client()
    r = plan.request
    tags = {names.RUN_KIND: names.RUN_KIND_BISECT, names.BISECT_GOOD: plan.good.hash, names.BISECT_BAD: plan.bad.hash,
            names.BISECT_WORKLOAD_RUN: plan.workload_run, names.BISECT_REPO: str(plan.repo)}
    params = {names.BISECT_PARAM + k: str(v) for k, v in (
        ("repeats", r.repeats), ("max_repeats", r.max_repeats), ("alpha", r.alpha), ("min_effect", r.min_effect),
        ("run_timeout_s", r.run_timeout_s),
        ("metric", r.metric), ("commits", len(plan.commits)))}
    parent_id = writes.create_run(mlflow, r.bisect_experiment, f"bisect {plan.good.short}..{plan.bad.short}",
                                    tags, params)
    t0 = time.perf_counter()
    log(f"bisect {plan.good.short}..{plan.bad.short}: {len(plan.commits)} commits, workload {plan.workload_label} "
        f"(run {plan.workload_run}); parent run {parent_id}")
    with run_end.run_guard(mlflow, parent_id), git.Installs(plan.repo) as installs:
        runner = _Runner(plan, mlflow, parent_id, installs, hold, log)
        try:
            result = _bisect(plan, runner, parent_id)
        finally:
            runner.end_children()
        result.runs, result.wall_s, result.install_s = runner.count, time.perf_counter() - t0, dict(installs.install_s)
        if result.first_bad is not None:
            result.attribution = _attribute(mlflow, result.steps, result.first_bad)
        result.report = report(plan, result)
        _log_parent(mlflow, parent_id, result)
    return result


def _bisect(plan: BisectPlan, runner: _Runner, parent_id: str) -> BisectResult:
    settings = plan.settings
    commits = [plan.good, *plan.commits]  # index 0 known good, last known bad (once the premise holds)
    premise_runs: dict[int, tuple[ProfiledRun, ProfiledRun]] = {}
    decision, premise = decide.run_premise(runner.pairs(0, plan.bad, premise_runs), settings)
    steps = [_record(0, plan.bad, decision, premise_runs)]
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
        steps.append(_record(len(steps), commits[mid], decision, step_runs))
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
    where = next((s for s in reversed(steps) if s.commit.hash == commits[hi].hash), steps[0])
    groups = [g for s in steps for g in (_slowness(s.good_runs), _slowness(s.candidate_runs))]
    noise = decide.pooled_noise(groups)
    change, low, high = decide.shift_interval(_slowness(where.candidate_runs), _slowness(where.good_runs), noise)
    if plan.higher_is_better:  # slowness is minus the log: the metric moved by the inverse factor
        change, low, high = 1 / (1 + change) - 1, 1 / (1 + high) - 1, 1 / (1 + low) - 1
    result.shift = (change, low, high)
    result.good_value, result.bad_value = where.median("good"), where.median("candidate")
    return result


def _record(step: int, commit: Commit, decision: Decision, runs: dict[int, tuple[ProfiledRun, ProfiledRun]]
            ) -> StepRecord:
    ordered = [runs[i] for i in sorted(runs)]
    return StepRecord(step, commit, decision, [c for _, c in ordered], [g for g, _ in ordered])


def _slowness(runs: list[ProfiledRun]) -> list[float]:
    return [r.slowness for r in runs]


def _attribute(mlflow, steps: list[StepRecord], first_bad: Commit) -> Attribution:
    """Which operators moved between the good runs and the first bad commit's runs (trends' attribution)."""
    from yolo_mlops.trends.attribution import attribute_runs
    from yolo_mlops.trends.history import record_from_run

    where = next((s for s in reversed(steps) if s.commit.hash == first_bad.hash), steps[0])

    def records(runs: list[ProfiledRun]) -> list:
        found = [record_from_run(queries.find_run(mlflow, r.run_id)) for r in runs]
        return [x for x in found if x is not None]

    return attribute_runs(mlflow, records(where.good_runs), records(where.candidate_runs))


def _log_parent(mlflow, parent_id: str, result: BisectResult) -> None:
    tags = {names.BISECT_RESULT: result.result, names.BISECT_STEPS: str(len(result.steps))}
    metrics = {names.BISECT_RUNS_METRIC: float(result.runs), names.BISECT_STEPS_METRIC: float(len(result.steps))}
    if result.first_bad is not None:
        tags[names.BISECT_FIRST_BAD] = result.first_bad.hash
    if result.last_good is not None and result.first_known_bad is not None:
        tags[names.BISECT_RANGE] = f"{result.last_good.hash}..{result.first_known_bad.hash}"
    if result.shift is not None:
        metrics.update({names.BISECT_SHIFT_PCT: 100 * result.shift[0], names.BISECT_SHIFT_CI_LOW: 100 * result.shift[1],
                        names.BISECT_SHIFT_CI_HIGH: 100 * result.shift[2]})
    writes.log_values(mlflow, parent_id, tags=tags, metrics=metrics)
    writes.log_text(mlflow, parent_id, result.report, names.BISECT_REPORT_MD)


# report -----------------------------------------------------------------------------------------------------

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
        if good is None or bad is None:  # _bisect sets the narrowed range with the inconclusive result
            raise ValueError("an inconclusive bisection result lacks its narrowed range")
        lines.append(f"inconclusive: step {last.step} (commit {last.commit.short}) stayed undecided after "
                     f"{len(last.candidate_runs)} runs a side; the first bad commit is after "
                     f"{good.short} and at or before {bad.short}: `git log {good.short}..{bad.short}`")
    else:
        if result.first_bad is None or result.shift is None:  # _bisect sets both with the first_bad result
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
