"""The fleet view: the slow machine named beyond noise, its evidence, its error rates by simulation, and the
`fleet` command over a real SQLite MLflow store."""

from __future__ import annotations

import io
import json
import time
from contextlib import redirect_stdout

import numpy as np
import pytest
from mlflow.entities import Metric

from yolo_mlops.trends import fleet
from yolo_mlops.trends.history import RunRecord


def _logs(rng, machines: int, runs: int, noise: float, slow: dict[int, float]) -> dict[str, np.ndarray]:
    return {f"m{i}": np.log(100.0 * slow.get(i, 1.0)) + rng.normal(0.0, noise, runs) for i in range(machines)}


def test_false_alarm_rate_stays_within_alpha_by_simulation():
    # 5 machines x 4 runs, 8% run-to-run noise, no slow machine: a workload is flagged in at most alpha of
    # the seeds (binomial tolerance: 2000 seeds at 0.01 -> mean 20, 3 sd = 13)
    rng = np.random.default_rng(1)
    flagged = sum(bool(fleet.slow_machines(_logs(rng, 5, 4, 0.08, {}))) for _ in range(2000))
    assert flagged / 2000 <= 0.01 + 3 * np.sqrt(0.01 * 0.99 / 2000), flagged


def test_power_to_find_one_machine_20pct_slower_by_simulation():
    rng = np.random.default_rng(2)
    found = sum([m for m, *_ in fleet.slow_machines(_logs(rng, 5, 6, 0.08, {3: 1.2}))] == ["m3"]
                for _ in range(500))
    assert found / 500 >= 0.90, found  # 5 machines x 6 runs, 8% noise


def test_holm_adjusts_step_down():
    assert fleet.holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])


def _record(i: int, machine: str, step_ms: float, **metrics) -> RunRecord:
    return RunRecord(run_id=f"r{machine}{i}", experiment_id="1", start_time_ms=i, series=f"s-{machine}",
                     label="w", metrics={"perf/step_time_ms_p50": step_ms, **metrics}, versions={}, night=None,
                     profiled_steps=5, step_time_ms=step_ms, machine=machine, workload="w1",
                     workload_label="yolo11n 640px", host={"cpu_count": "16"})


def test_a_throttled_gpu_is_named_with_its_clock_and_absent_figures_are_not_invented():
    rng = np.random.default_rng(3)
    records = []
    for machine, slow, clock in (("a", 1.0, 1980.0), ("b", 1.0, 1975.0), ("c", 1.3, 1410.0)):
        records += [_record(i, machine, 100 * slow * rng.normal(1, 0.02), **{"gpu/sm_clock_mhz_mean": clock})
                    for i in range(4)]
    report = fleet.fleet_report(records)
    (workload,) = report.workloads
    (slow,) = workload.slow_machines
    assert slow.machine == "c" and slow.ratio == pytest.approx(1.3, rel=0.05)
    assert any(line.startswith("SM clock mean: 1410 MHz vs peers 1978 MHz") for line in slow.evidence)
    assert not any("power" in line for line in slow.evidence)  # no power figure recorded: none shown
    text = fleet.fleet_markdown(report)
    assert "**slower** x1.3" in text and "`c` is slower than its peers" in text
    bare = fleet.fleet_report([_record(i, m, 100 * (1.3 if m == "c" else 1) * rng.normal(1, 0.02))
                               for m in "abc" for i in range(4)])
    assert "nothing recorded explains it" in bare.workloads[0].slow_machines[0].evidence[0]


def test_one_machine_is_no_fleet():
    report = fleet.fleet_report([_record(i, "a", 100.0 + i) for i in range(5)])
    assert report.workloads == () and "no fleet to compare" in fleet.fleet_markdown(report)


def test_fleet_command_names_the_slow_machine_from_mlflow(mlflow_client, tmp_path, monkeypatch):
    """Runs logged with the params and tags a real run writes, on three machines, one planted 25% slower."""
    from yolo_mlops.cli import main
    from yolo_mlops.run import environment
    from yolo_mlops.run.config import build_run_spec
    from yolo_mlops.run.pipeline import run_params
    from yolo_mlops.run.training import TrainingPlan
    from yolo_mlops.tracking import names, store

    experiment = f"fleet-{time.time_ns()}"
    experiment_id = mlflow_client.create_experiment(experiment)
    spec = build_run_spec({"imgsz": 640, "batch": 16, "device": "0", "experiment": experiment})
    data = environment.data_identity("/data/synthetic-1/data.yaml", True)
    rng = np.random.default_rng(4)
    for machine, slow in (("node-1", 1.0), ("node-2", 1.0), ("node-3", 1.25)):
        env = environment.Environment(
            python="3.11.7", platform="Linux", hostname=machine, machine=machine, cpu_count=64,
            torch="2.14.1", torch_cuda="13.0", cudnn="92400", ultralytics="8.4.190", mlflow="3", prefect="3",
            device_type="cuda", device_name="NVIDIA H200", gpu_count=8, nvidia_driver="580", git_commit="a" * 40,
            git_dirty=False)
        plan = TrainingPlan(spec=spec, data_yaml=tmp_path / "data.yaml", device="0", output_dir=tmp_path,
                            steps_expected=60)
        for _ in range(3):
            run = mlflow_client.create_run(experiment_id, tags={
                names.SERIES: environment.series_key(spec, env, data, "0"), names.VARIANT: spec.variant,
                names.DEVICE_TYPE: "cuda", names.DATASET: "synthetic"})
            store.log_values(mlflow_client, run.info.run_id, params=run_params(spec, plan, env))
            now = int(time.time() * 1000)
            mlflow_client.log_batch(run.info.run_id, metrics=[
                Metric(names.STEP_TIME_P50, 80.0 * slow * rng.normal(1, 0.02), now, 0),
                Metric("gpu/sm_clock_mhz_mean", 1980.0 / slow, now, 0)])
            mlflow_client.set_terminated(run.info.run_id)
    out = io.StringIO()
    with redirect_stdout(out):
        assert main(["fleet", "--experiment", experiment, "--format", "json"]) == 0
    report = json.loads(out.getvalue())
    (workload,) = report["workloads"]
    assert [m["machine"] for m in workload["machines"]] == ["node-1", "node-2", "node-3"]
    assert [s["machine"] for s in workload["slow_machines"]] == ["node-3"]
    assert "SM clock mean" in workload["slow_machines"][0]["evidence"][0]
    plot = tmp_path / "fleet.png"
    with redirect_stdout(io.StringIO()):
        assert main(["fleet", "--experiment", experiment, "--plot", str(plot)]) == 0
    assert plot.stat().st_size > 0
    with redirect_stdout(io.StringIO()):
        assert main(["fleet", "--experiment", "no-such-experiment"]) == 2
