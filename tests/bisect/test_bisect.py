"""`yolo-mlops bisect`: the per-step decision's error rates (simulated), bad input (one line each), and end to end
on CPU: a clone of this project with a planted history of 4 commits, one of which sleeps in every training
step, bisected with real YOLO11n training runs of each commit's own code (real SQLite MLflow
store, real Prefect test server)."""

from __future__ import annotations

import math
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from workloads import tiny

from yolo_mlops import names
from yolo_mlops.bisect import decide
from yolo_mlops.stats import Noise
from yolo_mlops.trends.attribution import Key

REPO = Path(__file__).resolve().parents[2]
TINY: dict[str, Any] = tiny(max_steps=10)
TRAINING = "yolo_mlops/run/training.py"
# every training step runs this line (the forward hooks run only inside the profiler window)
HOOK = "        self.timer.batch_start()\n        self._in_step = True\n"
PLANTED = (
    "        import time as _time\n\n        import torch as _torch\n\n"
    '        with _torch.autograd.profiler.record_function("bisect_test::planted_sleep"):\n'
    "            _time.sleep(0.5)\n"
)
COMMITS, SLOW_AT = 4, 3  # the planted slow commit: the 3rd of 4 after good (the first look, the 2nd, is good)
# One operator a few ms slower: about 1.5 run-to-run sd of this workload's step time on a quiet machine (3 ms of
# a ~52 ms step whose runs vary by 2.5-5.4%, the test suite's recorded bisect runs), far below it on a loaded one.
OPERATOR = "bisect_test::planted_op"
PLANTED_OP = (
    "        import time as _time\n\n        import torch as _torch\n\n"
    f'        with _torch.autograd.profiler.record_function("{OPERATOR}"):\n'
    "            _time.sleep(0.003)\n"
)
OP_WORKLOAD = {**TINY, "max_steps": 18, "profiler": {**TINY["profiler"], "active": 8}}


# git histories built by the tests ---------------------------------------------------------------------------


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout.strip()


def _clone(tmp: Path) -> Path:
    repo = tmp / "repo"
    subprocess.run(["git", "clone", "--quiet", str(REPO), str(repo)], check=True, capture_output=True)
    _git(repo, "config", "user.email", "bisect-test@example.invalid")
    _git(repo, "config", "user.name", "bisect test")
    return repo


def _history(
    repo: Path,
    commits: int,
    slow_at: int | None,
    planted: str = PLANTED,
    message_slow: str = "Training: wait 500 ms in every training step",
) -> list[str]:
    """[good, c1, ..., c_commits]: harmless note changes, and at `slow_at` a sleep in every training step."""
    hashes = [_git(repo, "rev-parse", "HEAD")]
    for i in range(1, commits + 1):
        if i == slow_at:
            path = repo / TRAINING
            text = path.read_text()
            assert HOOK in text, "the planted hook's anchor moved: update HOOK"
            path.write_text(text.replace(HOOK, HOOK + planted))
            message = message_slow
        else:
            (repo / "docs" / "bisect-test-note.txt").write_text(f"note {i}\n")
            message = f"Docs: note {i}"
        _git(repo, "add", "-A")
        _git(repo, "commit", "--quiet", "-m", message)
        hashes.append(_git(repo, "rev-parse", "HEAD"))
    return hashes


def _workload_run(
    experiment: str,
    series: str = "b15ec7b15ec7b15e",
    commit: str | None = None,
    step_ms: float | None = None,
    workload: dict | None = None,
) -> str:
    """A finished run that logged the tiny workload's run_spec.yaml (and, for a history, a commit and a step
    time): what `--run` and `--series` read."""
    from yolo_mlops.tracking import connection, run_end, writes

    mlflow = connection.client()
    params = {names.ENV_PARAM + "git_commit": commit} if commit else {}
    run_id = writes.create_run(mlflow, experiment, "workload", {names.SERIES: series}, params)
    writes.log_text(
        mlflow, run_id, yaml.safe_dump({**(workload or TINY), "experiment": experiment}), names.RUN_SPEC_YAML
    )
    if step_ms is not None:
        writes.log_values(mlflow, run_id, metrics={names.STEP_TIME_P50: step_ms})
    run_end.end_run(mlflow, run_id, "FINISHED")
    return run_id


# the per-step decision: error rates by simulation (pure) ----------------------------------------------------


def test_step_error_rates_by_simulation():
    s = decide.Settings(repeats=3, max_repeats=6, alpha=0.01)
    trials = 2000
    margin = 3 * math.sqrt(s.alpha * (1 - s.alpha) / trials)
    # a candidate exactly half-way: each wrong side at most alpha (the union bound over the looks)
    half = decide.simulate_step(8.0, "half", s, trials, seed=1)
    assert half.decided_bad <= s.alpha + margin and half.decided_good <= s.alpha + margin
    for truth in ("good", "bad"):  # a one-commit regression: no wrong decision, nearly always decided
        strong = decide.simulate_step(12.0, truth, s, trials, seed=2)
        assert strong.wrong <= 0.001 and strong.inconclusive <= 0.01, strong
        weak = decide.simulate_step(3.0, truth, s, trials, seed=3)  # too small for 6 runs: undecided, not wrong
        assert weak.wrong <= 0.002 and weak.inconclusive >= 0.5, weak


def test_premise_false_alarms_stay_below_alpha():
    s = decide.Settings(repeats=3, max_repeats=6, alpha=0.01)
    found, _ = decide.simulate_premise(0.0, s, trials=2000, seed=4)
    assert found <= s.alpha + 3 * math.sqrt(s.alpha / 2000)
    found, runs = decide.simulate_premise(8.0, s, trials=500, seed=5)  # +40% at 5% noise
    assert found >= 0.99 and runs < 3.5


def test_step_decision_reads_the_sides_right():
    noise = Noise(0.05, 10)
    good, bad = [0.0, 0.01, -0.01], [0.7, 0.71, 0.69]
    assert decide.step_decision(bad, good, bad, good, noise, 0.01).verdict == decide.BAD
    assert decide.step_decision(good, good, bad, good, noise, 0.01).verdict == decide.GOOD
    assert decide.step_decision([0.35] * 3, good, bad, good, noise, 0.01).verdict == decide.INCONCLUSIVE


# the trends report offers the command ----------------------------------------------------------------------


def test_a_regression_with_a_commit_range_offers_the_bisect_command():
    from yolo_mlops.trends.trend import ChangeEvent, VersionChange
    from yolo_mlops.trends.trend_report import bisect_command

    def change(direction, what):
        return ChangeEvent("perf/step_time_ms_p50", 4, "r" * 32, 0, 100.0, 150.0, 50.0, 1e-6, direction, what, (), ())

    commits = (VersionChange("commit", ("a" * 40,), ("b" * 40,)),)
    assert (
        bisect_command(change("regression", commits))
        == f"yolo-mlops bisect --good {'a' * 12} --bad {'b' * 12} --run {'r' * 32}"
    )
    assert bisect_command(change("improvement", commits)) is None
    assert bisect_command(change("regression", (VersionChange("torch", ("2.14",), ("2.15",)),))) is None


# bad input: one line each, exit code 2, before any run -----------------------------------------------------


@pytest.fixture(scope="module")
def small_history(tmp_path_factory, mlflow_client):
    repo = _clone(tmp_path_factory.mktemp("bisect-input"))
    return repo, _history(repo, 4, slow_at=None)


def _cli(capsys, *argv: str) -> tuple[int, list[str]]:
    from yolo_mlops import cli

    code = cli.main(["bisect", *argv])
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return code, [line for line in err.splitlines() if line.strip()]


def test_bad_input_is_one_line(small_history, capsys):
    repo, h = small_history
    run = _workload_run("bisect-input")
    cases = [
        (["--good", "no-such-rev", "--bad", h[-1], "--run", run], "revision 'no-such-rev' does not name a commit"),
        (["--good", h[-1], "--bad", h[0], "--run", run], "is not an ancestor of bad commit"),
        (["--good", h[0], "--bad", h[-1]], "bisect needs one workload"),
        (
            ["--good", h[0], "--bad", h[-1], "--series", "0000dead", "--experiment", "bisect-input"],
            "no series '0000dead' in experiment 'bisect-input': it has no runs",
        ),
        (["--good", h[0], "--bad", h[-1], "--run", "f" * 32], "no MLflow run"),
    ]
    for argv, expected in cases:
        code, lines = _cli(capsys, *argv, "--repo", str(repo))
        assert code == 2 and len(lines) == 1 and lines[0].startswith("yolo-mlops: error: "), (argv, lines)
        assert expected in lines[0], (argv, lines)


def test_a_dirty_repository_is_refused(small_history, capsys, tmp_path):
    repo, h = small_history
    run = _workload_run("bisect-input")
    readme = repo / "README.md"
    original = readme.read_text()
    readme.write_text(original + "\nuncommitted\n")
    try:
        code, lines = _cli(capsys, "--good", h[0], "--bad", h[-1], "--run", run, "--repo", str(repo))
    finally:
        readme.write_text(original)
    assert code == 2 and len(lines) == 1 and "uncommitted changes to tracked files (README.md)" in lines[0]


def test_a_good_commit_already_slow_in_the_history_is_refused(small_history, capsys):
    repo, h = small_history
    series, experiment = "5105ed5105ed5105", "bisect-slow-good"
    for commit, ms in [
        (h[1], 100.0),
        (h[1], 101.0),
        (h[1], 99.0),
        (h[1], 100.5),
        (h[2], 150.0),
        (h[2], 151.0),
        (h[2], 149.0),
        (h[2], 150.5),
    ]:
        _workload_run(experiment, series, commit, ms)
    code, lines = _cli(
        capsys, "--good", h[2], "--bad", h[4], "--series", series[:8], "--experiment", experiment, "--repo", str(repo)
    )
    assert code == 2 and len(lines) == 1, lines
    assert f"good commit {h[2][:10]} is already slow" in lines[0] and "% from an earlier level" in lines[0]


# end to end: real runs of each commit's code --------------------------------------------------------------


def _bisect(repo: Path, good: str, bad: str, run_id: str, experiment: str):
    from yolo_mlops.flows.bisection import bisect

    return bisect(
        good=good, bad=bad, run_id=run_id, repo=str(repo), bisect_experiment=experiment, repeats=2, max_repeats=4
    )


@pytest.fixture(scope="module")
def planted(tmp_path_factory, prefect_server, mlflow_client):
    repo = _clone(tmp_path_factory.mktemp("bisect-planted"))
    hashes = _history(repo, COMMITS, slow_at=SLOW_AT)
    run = _workload_run("bisect-planted-workload")
    result = _bisect(repo, hashes[0], hashes[-1], run, "bisect-planted")
    print("\n" + result.report)
    return repo, hashes, result


@pytest.mark.slow
def test_bisect_names_the_planted_commit(planted):
    repo, hashes, result = planted
    assert result.result == "first_bad"
    assert result.first_bad.hash == hashes[SLOW_AT]
    assert result.first_bad.subject == "Training: wait 500 ms in every training step"
    # the premise + at most 2 bisection steps (walking the 4 commits one by one from good would take 3)
    assert len(result.steps) <= math.ceil(math.log2(COMMITS)) + 1
    assert result.shift[1] > 0.3  # the 95% interval of the slowdown is well above zero
    assert f"first bad commit: {hashes[SLOW_AT]}" in result.report
    assert "bisect_test::planted_sleep" in result.report  # the attribution names the planted operator
    assert len(_git(repo, "worktree", "list").splitlines()) == 1  # only the clone's own working tree


@pytest.mark.slow
def test_bisect_evidence_in_mlflow(planted, mlflow_client):
    from yolo_mlops.tracking import queries

    _, hashes, result = planted
    parent = mlflow_client.get_run(result.parent_run_id)
    tags = parent.data.tags
    assert parent.info.status == "FINISHED"
    assert tags[names.RUN_KIND] == names.RUN_KIND_BISECT
    assert (tags[names.BISECT_GOOD], tags[names.BISECT_BAD]) == (hashes[0], hashes[-1])
    assert tags[names.BISECT_RESULT] == "first_bad" and tags[names.BISECT_FIRST_BAD] == hashes[SLOW_AT]
    assert names.BISECT_SHIFT_PCT in parent.data.metrics
    children = queries.child_runs(mlflow_client, result.parent_run_id)
    assert len(children) == result.runs == sum(len(s.candidate_runs) + len(s.good_runs) for s in result.steps)
    assert {c.status for c in children} == {"FINISHED"}
    assert {c.tags[names.BISECT_ROLE] for c in children} == {"candidate", "good"}
    by_step: dict[int, set[str]] = {}
    for c in children:
        assert c.tags[names.BISECT_COMMIT] in hashes and c.tags[names.RUN_KIND] == names.RUN_KIND_BISECT_RUN
        assert c.tags[names.GIT_COMMIT_TAG] == c.tags[names.BISECT_COMMIT]  # the code of that commit ran
        by_step.setdefault(int(c.tags[names.BISECT_STEP]), set()).add(c.tags[names.BISECT_COMMIT])
    assert by_step == {s.step: {hashes[0], s.commit.hash} for s in result.steps}


@pytest.mark.slow
def test_no_slowing_commit_means_no_regression(tmp_path, prefect_server, mlflow_client):
    repo = _clone(tmp_path)
    hashes = _history(repo, 3, slow_at=None)
    result = _bisect(repo, hashes[0], hashes[-1], _workload_run("bisect-flat-workload"), "bisect-flat")
    print("\n" + result.report)
    assert result.result == "no_regression" and result.first_bad is None
    assert "no regression between good and bad" in result.report
    assert len(result.steps) == 1  # the premise only: nothing bisected
    assert mlflow_client.get_run(result.parent_run_id).data.tags[names.BISECT_RESULT] == "no_regression"
    assert len(_git(repo, "worktree", "list").splitlines()) == 1


@pytest.mark.slow
@pytest.mark.timeout(1800)  # 18-30 real runs (3..6 a side): about 20 s each on a quiet core, far more on a busy one
def test_bisect_decides_on_the_operator_that_moved(tmp_path, prefect_server, mlflow_client):
    """A commit that makes one operator a few ms slower, a step-time shift within a few run-to-run sds: the
    premise names that operator, every step decides on it, and the report says so and checks step time."""
    from yolo_mlops.flows.bisection import bisect

    repo = _clone(tmp_path)
    hashes = _history(repo, COMMITS, SLOW_AT, PLANTED_OP, "Training: one operator 3 ms slower")
    run = _workload_run("bisect-op-workload", workload=OP_WORKLOAD)
    result = bisect(
        good=hashes[0],
        bad=hashes[-1],
        run_id=run,
        repo=str(repo),
        bisect_experiment="bisect-op",
        repeats=3,
        max_repeats=6,
        min_effect=0.0,
    )
    print("\n" + result.report)
    assert result.result == "first_bad" and result.first_bad.hash == hashes[SLOW_AT]
    assert result.figure is not None and result.figure.kind == "operator"
    assert result.figure.names == (OPERATOR,)  # the planted operator, and only it
    assert f"decided on: operator {OPERATOR}" in result.report and "step-time check:" in result.report
    assert all(s.step_time is not None for s in result.steps)  # step time tested beside the figure at every step
    tags = mlflow_client.get_run(result.parent_run_id).data.tags
    assert tags[names.BISECT_PREFIX + "decided_on"] == f"operator {OPERATOR}"


# the search over generated runs: what decides each step, and the report --------------------------------------


def _search(effect: float, op_noise: float | None, seed: int, commits: int = 8, slow_at: int = 5):
    """search.bisect over generated runs (no process, no MLflow): the step's sd of log step time 5%, the
    commit at `slow_at` slows it by `effect`; with op_noise, each run also has a profile where one operator,
    10x slower from that commit on, carries the whole shift, beside 50 that never move."""
    import numpy as np

    from yolo_mlops.bisect import search
    from yolo_mlops.bisect.bisection_report import report
    from yolo_mlops.bisect.commit_runs import CommitRunner
    from yolo_mlops.bisect.git import Commit
    from yolo_mlops.bisect.models import BisectPlan, BisectRequest, ProfiledRun
    from yolo_mlops.config import RunSpec

    rng = np.random.default_rng(seed)
    chain = [Commit(f"{i:040x}", f"commit {i}") for i in range(commits + 1)]
    plan = BisectPlan(
        BisectRequest(good=chain[0].hash, bad=chain[-1].hash, run_id="r"),
        Path("."),
        chain[0],
        chain[-1],
        tuple(chain[1:]),
        RunSpec(),
        "r",
        "workload",
        False,
        "not checked",
    )

    class Generated(CommitRunner):
        def __init__(self) -> None:
            self.plan, self.count = plan, 0

        def run(self, commit, step, role):
            self.count += 1
            bad = chain.index(commit) >= slow_at
            step_ms = 52.0 * (1 + effect if bad else 1.0) * math.exp(rng.normal(0.0, 0.05))
            entries: dict[Key, float] | None = None
            if op_noise is not None:
                base = 52.0 * effect / 9
                op = (10 * base if bad else base) * math.exp(rng.normal(0.0, op_noise))
                entries = {("operator", "planted"): op, ("phase", "forward_loss"): 10.0 + op}
                entries.update(
                    {("operator", f"op{i}"): (1 + i / 10) * math.exp(rng.normal(0.0, 0.05)) for i in range(50)}
                )
            return ProfiledRun(commit, step, role, f"run{self.count}", step_ms, math.log(step_ms), step_ms, entries)

    runner = Generated()
    result = search.bisect(plan, runner, "parent")
    result.runs = runner.count
    result.report = report(plan, result)
    return chain, result


def test_a_moved_operator_decides_every_step():
    chain, result = _search(0.075, 0.04, seed=11)  # +7.5% step time: 1.5 sd of its run-to-run noise
    assert result.result == "first_bad" and result.first_bad == chain[5], result.report
    assert result.figure is not None and (result.figure.kind, result.figure.names) == ("operator", ("planted",))
    assert all(s.step_time is not None for s in result.steps)
    assert result.runs <= 30
    assert "decided on: operator planted" in result.report and "step-time check: " in result.report
    assert "each decision errs with probability at most alpha = 0.01" in result.report


def test_without_profiles_step_time_decides():
    chain, result = _search(0.6, None, seed=12)  # +60%: 12 sd, step time alone decides
    assert result.result == "first_bad" and result.first_bad == chain[5], result.report
    assert result.figure is None and all(s.step_time is None for s in result.steps)
    assert "decided on: step time" in result.report and "step-time check" not in result.report


def test_bisection_simulation_names_a_small_regression_by_its_operator():
    """1.5 step-time sds, figure noise 0.07 (the median measured on recorded runs): named nearly always within
    30 runs; by step time alone almost never; and with nothing slower the premise stays within alpha."""
    s = decide.Settings()
    by_operator = decide.simulate_bisection(1.5, 8, 0.07, s, trials=200, seed=3, null_entries=50)
    assert by_operator["right_within"] >= 0.95 and by_operator["wrong"] <= 0.01, by_operator
    by_step = decide.simulate_bisection(1.5, 8, None, s, trials=200, seed=3)
    assert by_step["right"] <= 0.05, by_step
    null = decide.simulate_bisection(0.0, 8, 0.07, s, trials=300, seed=4, null_entries=50)
    assert 1 - null["no_regression"] <= s.alpha + 3 * math.sqrt(s.alpha / 300), null
