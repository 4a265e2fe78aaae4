"""A slow machine explained by what moved: its operators and phases against its peers', read from the runs'
key_averages tables in a real SQLite MLflow store.

Each run is profiled for real by the pipeline's profiler (`TrainingProfiler` over a few steps of a small workload)
and its tables are logged the way the pipeline logs them (`TrainingProfiler.tables`, `writes.log_table` under
`profiler/`). Four machines run the same workload; on two of them one operator of their own is slower: a
`record_function` around a sleep (a floor of wall-clock time that load can only lengthen), a different operator on
each. The report must name each machine's own operator, and not the other's, and no machine of the other two."""

from __future__ import annotations

import json
import time

import pytest
import torch
from machines import benchmark_tags, cpu_node

from yolo_mlops.trends import fleet

COMMON = "test_fleet::common_work"  # every machine: COMMON_MS a step
SLOW_OPS = {"node-c": "test_fleet::slow_copy", "node-d": "test_fleet::slow_decode"}  # +SLOW_MS a step there
# A loaded machine lengthens a sleep by its wake-up delay, tens of ms at worst: a common step of 20 ms keeps the
# healthy machines' run-to-run noise a fraction of their step, and 160 ms more makes the slow ones slower beyond it
COMMON_MS, SLOW_MS = 20, 160
STEPS = 5  # profiled steps a run (its step time is their median, so one delayed step does not move it)
RUNS = 3  # runs a machine


def _profiled_run(mlflow_client, experiment_id: str, machine: str, tmp_path) -> None:
    from mlflow.entities import Metric

    from yolo_mlops import names
    from yolo_mlops.config import build_run_spec
    from yolo_mlops.profiling.torch_profiler import TrainingProfiler
    from yolo_mlops.run import environment
    from yolo_mlops.run.pipeline import run_params
    from yolo_mlops.run.training import TrainingPlan
    from yolo_mlops.tracking import writes

    spec = build_run_spec(
        {
            "imgsz": 64,
            "batch": 4,
            "device": "cpu",
            "experiment": "fleet-moved",
            "profiler": {"wait": 0, "warmup": 1, "active": STEPS, "record_shapes": False, "profile_memory": False},
        }
    )
    env = cpu_node(
        hostname=machine,
        machine=machine,
        cpu_count=8,
        torch=torch.__version__,
        torch_cuda="none",
        cudnn="none",
        mlflow="3",
        prefect="3",
        device_name="Intel(R) Xeon(R) Processor",
        nvidia_driver="none",
        git_commit="b" * 40,
        cpu_mhz=2600.0,
    )
    data = environment.data_identity("/data/synthetic-1/data.yaml", True)
    plan = TrainingPlan(
        spec=spec, data_yaml=tmp_path / "data.yaml", device="cpu", output_dir=tmp_path, steps_expected=STEPS
    )
    run = mlflow_client.create_run(
        experiment_id, tags=benchmark_tags(spec, env, environment.series_key(spec, env, data, "cpu"))
    )
    run_id = run.info.run_id
    writes.log_values(mlflow_client, run_id, params=run_params(spec, plan, env))
    x = torch.ones(32, 32)
    step_ms = []
    with TrainingProfiler(spec.profiler, tmp_path / f"traces-{run_id}", with_cuda=False) as prof:
        for _ in range(1 + STEPS):  # the warm-up step, then the profiled ones
            t0 = time.perf_counter()
            with torch.profiler.record_function(COMMON):
                (x @ x).sum()
                time.sleep(COMMON_MS / 1000)
            if machine in SLOW_OPS:
                with torch.profiler.record_function(SLOW_OPS[machine]):
                    time.sleep(SLOW_MS / 1000)
            step_ms.append(1000 * (time.perf_counter() - t0))
            prof.step()
    for table in prof.tables():
        writes.log_table(mlflow_client, run_id, table.frame, names.profiler_table(table.name))
    step_ms = sorted(step_ms[1:])
    now = int(time.time() * 1000)
    mlflow_client.log_batch(run_id, metrics=[Metric(names.STEP_TIME_P50, step_ms[len(step_ms) // 2], now, 0)])
    mlflow_client.set_terminated(run_id)


@pytest.fixture(scope="module")
def moved_experiment(mlflow_client, tmp_path_factory) -> str:
    experiment = f"fleet-moved-{time.time_ns()}"
    experiment_id = mlflow_client.create_experiment(experiment)
    tmp = tmp_path_factory.mktemp("fleet-moved")
    for _ in range(RUNS):  # interleaved, as a nightly suite over several machines runs
        for machine in ("node-a", "node-b", "node-c", "node-d"):
            _profiled_run(mlflow_client, experiment_id, machine, tmp)
    return experiment


def test_each_slow_machine_is_explained_by_its_own_operator(mlflow_client, moved_experiment):
    report = fleet.explain(mlflow_client, fleet.load_fleet(mlflow_client, moved_experiment))
    (workload,) = report.workloads
    assert [m.machine for m in workload.machines if m.slow] == ["node-c", "node-d"]
    for slow in workload.slow_machines:
        own, other = SLOW_OPS[slow.machine], next(op for m, op in SLOW_OPS.items() if m != slow.machine)
        assert slow.moved is not None and slow.moved.runs_without_tables == ()
        assert len(slow.moved.after_runs) == RUNS and len(slow.moved.before_runs) == 2 * RUNS  # the healthy peers
        moved = fleet.moved_entries(slow.moved)
        assert moved and (moved[0].kind, moved[0].name) == ("operator", own), [(c.name, c.delta_ms) for c in moved]
        assert moved[0].delta_ms >= SLOW_MS and moved[0].before_ms == 0  # the planted sleep; no peer runs it
        assert moved[0].consistency == 1.0  # every run of the machine beyond its peers' median
        assert other not in {c.name for c in slow.moved.contributions}  # the other slow machine's, not here
        assert f"moved against its peers: operator {own} " in slow.explanation and other not in slow.explanation

    text = fleet.fleet_markdown(report)
    for machine, op in SLOW_OPS.items():
        line = next(s for s in text.splitlines() if s.startswith(f"`{machine}` is slower than its peers"))
        assert op in line and all(o not in line for o in SLOW_OPS.values() if o != op), line
        assert f"Phases and operators of `{machine}` against its peers (its newest {RUNS} runs" in text
    assert "`node-a` is slower" not in text and "`node-b` is slower" not in text
    data = json.loads(json.dumps(fleet.to_json(report)))
    by_machine = {s["machine"]: s for s in data["workloads"][0]["slow_machines"]}
    for machine, op in SLOW_OPS.items():
        assert by_machine[machine]["moved"]["moved"][0] == f"operator {op}"
        first = by_machine[machine]["moved"]["contributions"][0]
        assert first["name"] == op and first["before_ms"] < first["after_ms"]


def test_the_newest_runs_alone_are_read_and_the_nightly_section_names_the_operators(mlflow_client, moved_experiment):

    report = fleet.load_fleet(mlflow_client, moved_experiment)
    cache: dict = {}
    explained = fleet.explain(mlflow_client, report, runs_per_machine=2, cache=cache)
    (workload,) = explained.workloads
    newest = {m.machine: set(m.run_ids[-2:]) for m in workload.machines}
    assert set(cache) == set().union(*newest.values())  # 2 a machine, each peer's read once for both
    for slow in workload.slow_machines:
        assert slow.moved is not None
        assert set(slow.moved.after_runs) == newest[slow.machine]
    with pytest.raises(ValueError, match="runs_per_machine 0"):
        fleet.explain(mlflow_client, report, runs_per_machine=0)

    section = fleet.fleet_section(mlflow_client, moved_experiment)  # the nightly artifact's "Fleet" section
    for machine, op in SLOW_OPS.items():
        line = next(s for s in section.splitlines() if s.startswith(f"`{machine}` is slower than its peers"))
        assert f"moved against its peers: operator {op} " in line
