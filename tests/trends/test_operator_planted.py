"""An operator made slower from outside the project, found by its own series where step time cannot see it.

Real runs: 9 tiny CPU trainings (YOLO11n, 64 px, batch 4, 6 steps, 3 profiled), run in-process through the
pipeline's steps (prepare, train, analyze, track: what the nightly flow's `profile_training` runs, without Prefect)
into the session's SQLite MLflow store, as three benchmark nights of 3 runs. Every run has an operator planted from
this test's code: a forward hook on the model's first layer that spends a fixed time in
`record_function("test_planted::postprocess")`: it spins on the clock until a fixed wall time has passed (a sleep
would wake late whenever another process holds the core; a spin overshoots only when preempted at its very end, so
the machine's CPU contention hardly moves it, and a run preempted at that moment is an outlier of its night, set
aside). Nights 1 and 2 plant 3 ms a forward pass; night 3 plants 3.9 ms: +0.9 ms a profiled step, a few percent of
the step, below what step time can show in one night even on a core of its own (the finding says how far below the
step time's detection power), while the operator's own series moves by many times its noise. The plant is large
enough to stay among the operators a run logs when a loaded machine slows every other operator down. Night 2 runs
another commit than night 1 (a version boundary with no change); night 3 another commit and, from this test, a
torch version string of its own (`+planted`: the upgrade that made the operator slower). Nothing else is planted,
copied or edited: every number is what the runs measured and logged.

The nights are judged by `nightly.judge_night` (the nightly flow's judging, at its defaults) over the store:
night 2 must open no operator event (the no-change history, its version boundary included); night 3 must find the
planted operator as an operator regression at its night, named, with the version boundary and the bisect command
deciding on the operator's series.
"""

from __future__ import annotations

import dataclasses
import io
import json
import time
from contextlib import redirect_stderr, redirect_stdout

import pytest
import torch
import workloads

from yolo_mlops import names
from yolo_mlops.trends import nightly
from yolo_mlops.trends.trend import DetectionSettings, is_operator

pytestmark = pytest.mark.slow

EXPERIMENT = f"operator-planted-{time.time_ns()}"
PLANTED = "test_planted::postprocess"
PLANTED_METRIC = names.operator_metric("operator", PLANTED)
SPIN_S = {1: 0.003, 2: 0.003, 3: 0.0039}  # per forward pass, by night
COMMITS = {1: "1" * 40, 2: "2" * 40, 3: "3" * 40}
RUNS_A_NIGHT = 3
WARMUP_RUNS = 2  # trainings of the process before the history's first


def _spec(night: int, experiment: str):
    from yolo_mlops.config import build_run_spec

    spec = build_run_spec(
        workloads.tiny(
            max_steps=6,
            experiment=experiment,
            profiler={**workloads.TINY_PROFILER, "warmup": 1, "active": 3},
        )
    )
    return spec.model_copy(update={"run_kind": "benchmark", "tags": {names.BENCHMARK_NIGHT: f"night-{night}"}})


def _one_run(night: int, monkeypatch: pytest.MonkeyPatch, experiment: str = EXPERIMENT) -> str:
    """One profiled run of the night, the planted operator's sleep and the night's versions set from here."""
    from yolo_mlops.run import pipeline, training
    from yolo_mlops.tracking import connection, run_end

    original_start = training._Instrumentation.on_train_start
    original_env = pipeline.capture_environment

    def on_train_start(self, trainer):
        original_start(self, trainer)

        def planted(module, args, output):
            with torch.profiler.record_function(PLANTED):
                end = time.perf_counter() + SPIN_S[night]
                while time.perf_counter() < end:  # wall-clock work: late only when preempted at its very end
                    pass

        trainer.model.model[0].register_forward_hook(planted)

    def capture_environment(device: str):
        env = original_env(device)
        return dataclasses.replace(env, torch=env.torch + ("+planted" if night == 3 else ""))

    with monkeypatch.context() as mp:
        mp.setattr(training._Instrumentation, "on_train_start", on_train_start)
        mp.setattr(pipeline, "capture_environment", capture_environment)
        mp.setenv("YOLO_MLOPS_GIT_COMMIT", COMMITS[night])
        prepared = pipeline.prepare(_spec(night, experiment))
        mlflow = connection.client()
        with run_end.run_guard(mlflow, prepared.run_id, salvage=pipeline.RunSalvage(mlflow, prepared)):
            outcome = pipeline.train(prepared)
            analysis = pipeline.analyze(prepared, outcome)
            pipeline.track(prepared, outcome, analysis)
    return prepared.run_id


@dataclasses.dataclass
class Nights:
    runs: dict[int, list[str]]
    judged: dict[int, nightly.JudgedSeries]  # nights 2 and 3, each judged once its runs were made


@pytest.fixture(scope="module")
def nights(mlflow_client) -> Nights:
    """The three nights, each of nights 2 and 3 judged as the nightly flow judges it, right after its runs (its
    first round, a new regression held back for 3 confirmation runs)."""
    mp = pytest.MonkeyPatch()
    runs: dict[int, list[str]] = {}
    judged = {}
    try:
        # a process' first two trainings run some operators slower than the ones after (aten::fill_: docs/trends.md),
        # which would set night 1 apart from the nights after it: two runs outside the history take that
        for _ in range(WARMUP_RUNS):
            _one_run(1, mp, experiment=EXPERIMENT + "-warmup")
        for night in (1, 2, 3):
            runs[night] = [_one_run(night, mp) for _ in range(RUNS_A_NIGHT)]
            if night > 1:
                (judged[night],) = nightly.judge_night(
                    mlflow_client, EXPERIMENT, runs[night], DetectionSettings(), nightly.JudgingRound(confirm_repeats=3)
                )
    finally:
        mp.undo()
    return Nights(runs, judged)


def test_every_run_logged_its_operators_with_the_planted_one(nights, mlflow_client):
    for night, ids in nights.runs.items():
        for run_id in ids:
            metrics = mlflow_client.get_run(run_id).data.metrics
            ops = [m for m in metrics if m.startswith(names.OP_PREFIX)]
            assert 22 <= len(ops) <= 2 * 30 + 2, len(ops)  # the top 20 at least, 30 a table at most, step and floor
            assert metrics[names.OP_STEP_MS] > 0 and names.OP_FLOOR_MS in metrics
            planted_ms = metrics[PLANTED_METRIC]
            # one forward pass a step: the spin, plus the range's own cost (and a preemption on a loaded machine)
            assert SPIN_S[night] * 1000 <= planted_ms < SPIN_S[night] * 1000 + 5, (night, planted_ms)


def test_a_night_without_change_opens_no_operator_event(nights, mlflow_client):
    judged = nights.judged[2]
    assert judged.status != "insufficient_history"
    op_lines = [line for line in judged.new_changes if " self time " in line or "rename candidate" in line]
    assert not op_lines, (op_lines, _values_by_night(mlflow_client, nights, op_lines))
    assert not [m for m in judged.confirm_metrics if is_operator(m)], judged.confirm_metrics
    if not judged.confirm_metrics:  # logged (a step-time event would have held it back for confirmation)
        tags = mlflow_client.get_run(nights.runs[2][0]).data.tags
        # an operator series is tagged only when it is not stable: none is
        assert not [k for k in tags if k.startswith(names.TREND_PREFIX + names.OP_PREFIX)], tags


def _values_by_night(mlflow_client, nights: Nights, lines: list[str]) -> dict[str, dict[int, list[float]]]:
    """The ms/step each run logged of the operators these finding lines name, by night (what a failure shows)."""
    ops = {line.split(" self time ", 1)[0] for line in lines if " self time " in line}
    metrics = {op: names.operator_metric("operator", op) for op in ops}
    return {
        op: {
            night: [round(mlflow_client.get_run(r).data.metrics.get(m, float("nan")), 3) for r in ids]
            for night, ids in nights.runs.items()
        }
        for op, m in metrics.items()
    }


def _planted_values(mlflow_client, nights: Nights) -> dict[int, list[float]]:
    return {
        night: [round(mlflow_client.get_run(r).data.metrics[PLANTED_METRIC], 3) for r in ids]
        for night, ids in nights.runs.items()
    }


def test_the_slower_operator_is_found_at_its_night_with_its_version_boundary(nights, mlflow_client):
    judged = nights.judged[3]
    line = next((x for x in judged.new_changes if x.startswith(f"{PLANTED} self time")), None)
    assert line is not None, (judged.new_changes, _planted_values(mlflow_client, nights))
    first = nights.runs[3][0]
    assert f"(run {first}; " in line and "torch " in line and "+planted" in line, line
    assert "commit 22222222..33333333" in line, line  # the last commit before .. the first after
    assert "[regression; " in line and " of step, " in line
    assert f"--metric {PLANTED_METRIC}" in line  # bisect can start from it, deciding on the operator's series
    assert PLANTED_METRIC in judged.confirm_metrics  # held back for confirmation runs like a step-time regression
    assert "(below the step time's detection power of" in line, line  # step time alone cannot find it
    factor = float(line.split(" self time x", 1)[1].split(" ", 1)[0])
    assert 1.15 <= factor <= 1.6, line


def _cli(argv: list[str]) -> tuple[int, str]:
    from yolo_mlops.cli import main

    out = io.StringIO()
    with redirect_stdout(out), redirect_stderr(io.StringIO()):
        rc = main(argv)
    return rc, out.getvalue()


def test_trends_series_shows_the_operator_series_and_the_finding(nights, mlflow_client):
    key = mlflow_client.get_run(nights.runs[3][0]).data.tags[names.SERIES]
    rc, text = _cli(["trends", "--experiment", EXPERIMENT, "--series", key[:10]])
    assert rc == 0 and "## Operator series (" in text, text[-3000:]
    assert f"- {PLANTED} self time x" in text and "bisect it: yolo-mlops bisect" in text
    rc, text = _cli(["trends", "--experiment", EXPERIMENT, "--series", key, "--metric", PLANTED_METRIC])
    assert rc == 0 and "## perf/step_time_ms_p50" not in text and f"- {PLANTED} self time x" in text
    rc, text = _cli(["trends", "--experiment", EXPERIMENT, "--series", key, "--format", "json"])
    data = json.loads(text)
    assert PLANTED_METRIC in {m["metric"] for m in data["operators"]}
    assert PLANTED_METRIC in [f["metric"] for f in data["operator_findings"]]


def test_compare_names_the_planted_operator_beyond_its_own_noise(nights, mlflow_client):
    # compare judges every run it is given: a run the series set aside as an outlier of its night (preempted inside
    # the planted operator, listed by `trends --series`) is left out of the sets, as its reader would
    key = mlflow_client.get_run(nights.runs[3][0]).data.tags[names.SERIES]
    rc, text = _cli(["trends", "--experiment", EXPERIMENT, "--series", key, "--format", "json"])
    (planted_series,) = [m for m in json.loads(text)["operators"] if m["metric"] == PLANTED_METRIC]
    aside = set(planted_series["set_aside"])
    a = ",".join(r for r in nights.runs[1] + nights.runs[2] if r not in aside)
    b = ",".join(r for r in nights.runs[3] if r not in aside)
    rc, text = _cli(["compare", a, b, "--format", "json"])
    data = json.loads(text)
    beyond = [t["name"] for t in data["operators"] if t["beyond_noise"]]
    assert rc == 0 and PLANTED in beyond, data["operators"][:5]
    planted = next(t for t in data["operators"] if t["name"] == PLANTED)
    assert planted["noise_from"] == "the runs" and 1.15 <= planted["factor"] <= 1.6
    # two single runs: each operator's noise from the series' history
    rc, text = _cli(["compare", nights.runs[2][-1], nights.runs[3][-1]])
    assert rc == 0 and "operators beyond their own noise:" in text
    section = text.split("operators beyond their own noise:", 1)[1]
    row = next(line for line in section.splitlines() if line.startswith(f"| operator | {PLANTED} |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[6:] == ["the series history", cells[7], "yes"], row
