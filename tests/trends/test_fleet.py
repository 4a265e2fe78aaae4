"""The fleet view: the slow machine named beyond noise, its evidence, its error rates by simulation, the
`fleet` command over a real SQLite MLflow store, and the nightly benchmark's Fleet section over real runs."""

from __future__ import annotations

import io
import json
import time
from contextlib import redirect_stderr, redirect_stdout

import numpy as np
import pytest
from machines import benchmark_tags, gpu_node
from mlflow.entities import Metric

from yolo_mlops.trends import fleet
from yolo_mlops.trends.history import HistoryRun

NOISE = 0.08  # run-to-run noise of the simulations: 8% (sd of log step time)


def _logs(rng, machines: int, runs: int, noise: float, slow: dict[int, float]) -> dict[str, np.ndarray]:
    return {f"m{i}": np.log(100.0 * slow.get(i, 1.0)) + rng.normal(0.0, noise, runs) for i in range(machines)}


def _tolerance(rate: float, seeds: int) -> float:
    return 3 * np.sqrt(rate * (1 - rate) / seeds)  # 3 binomial standard deviations


@pytest.mark.parametrize(("runs", "max_pvalue"), [(4, 0.01), (6, 0.01), (4, 0.05)])
def test_false_alarm_rate_stays_within_the_setting_by_simulation(runs, max_pvalue):
    # 5 machines, 8% noise, no slow machine: a workload is flagged in at most max_pvalue of the seeds
    rng = np.random.default_rng(1)
    seeds = 2000
    flagged = sum(bool(fleet.slow_machines(_logs(rng, 5, runs, NOISE, {}), max_pvalue)) for _ in range(seeds))
    assert flagged / seeds <= max_pvalue + _tolerance(max_pvalue, seeds), flagged


@pytest.mark.parametrize(("runs", "max_pvalue", "power"), [(6, 0.01, 0.90), (4, 0.05, 0.88), (4, 0.01, 0.65)])
def test_power_to_find_one_machine_20pct_slower_by_simulation(runs, max_pvalue, power):
    # found = that machine and only it; 5 x 4 at 0.01 cannot reach 90%: even with the noise known, Bonferroni's
    # first step needs z > 2.88 where the expected z is 4.08 (power <= 88.5%); measured ~72% (docs/trends.md)
    rng = np.random.default_rng(2)
    seeds = 1000
    found = sum(
        [m for m, *_ in fleet.slow_machines(_logs(rng, 5, runs, NOISE, {3: 1.2}), max_pvalue)] == ["m3"]
        for _ in range(seeds)
    )
    assert found / seeds >= power, found


def _record(i: int, machine: str, step_ms: float, host: dict | None = None, **metrics) -> HistoryRun:
    return HistoryRun(
        run_id=f"r{machine}{i}",
        experiment_id="1",
        start_time_ms=i,
        series=f"s-{machine}",
        label="w",
        metrics={"perf/step_time_ms_p50": step_ms, **metrics},
        versions={},
        night=None,
        profiled_steps=5,
        step_time_ms=step_ms,
        machine=machine,
        workload="w1",
        workload_label="yolo11n 640px",
        host={"cpu_count": "16"} if host is None else host,
    )


def test_the_records_path_agrees_with_the_simulated_test():
    rng = np.random.default_rng(5)
    for _ in range(20):
        logs = _logs(rng, 4, 3, NOISE, {1: 1.3})
        records = [_record(i, m, float(np.exp(v))) for m, values in logs.items() for i, v in enumerate(values)]
        (workload,) = fleet.fleet_report(records).workloads
        assert [s.machine for s in workload.slow_machines] == [m for m, *_ in fleet.slow_machines(logs)]
        assert [m.machine for m in workload.machines if m.slow] == [s.machine for s in workload.slow_machines]
        for m in workload.machines:
            assert m.ci_low <= m.median_step_ms <= m.ci_high and m.runs == 3
    assert fleet.fleet_report(records) == fleet.fleet_report(records)  # seeded bootstrap: same answer


def _gpu(clock: float, limit: float | None, power_cap_pct: float, **more) -> dict:
    metrics = {
        "gpu/sm_clock_mhz_mean": clock,
        "gpu/sm_clock_max_mhz": 1980.0,
        "gpu/sm_clock_mhz_min": clock - 50,
        "gpu/power_w_mean": 300.0,
        "gpu/temp_c_max": 70.0,
        "gpu/clocks_event_power_pct": power_cap_pct,
        "gpu/clocks_event_thermal_pct": 0.0,
        "gpu/pcie_gen": 5.0,
        "gpu/pcie_width": 16.0,
        **more,
    }
    if limit is not None:
        metrics["gpu/power_limit_w"] = limit
    if power_cap_pct:
        metrics["gpu/clocks_event_sw_power_cap_pct"] = power_cap_pct
    return metrics


def test_a_throttled_gpu_is_named_with_its_clock_limit_and_reasons():
    rng = np.random.default_rng(3)
    records = []
    for machine, factor, clock, limit, capped in (
        ("a", 1.0, 1980.0, 700.0, 0.0),
        ("b", 1.0, 1975.0, 700.0, 0.0),
        ("c", 1.3, 1410.0, 450.0, 85.0),
    ):
        records += [
            _record(i, machine, 100 * factor * rng.normal(1, 0.02), **_gpu(clock, limit, capped)) for i in range(4)
        ]
    report = fleet.fleet_report(records)
    (workload,) = report.workloads
    (slow,) = workload.slow_machines
    assert slow.machine == "c" and slow.ratio == pytest.approx(1.3, rel=0.05)
    by_name = {e.name: e for e in slow.evidence}
    assert by_name["SM clock mean"].text == "SM clock mean: 1410 MHz vs peers 1978 MHz"
    assert by_name["SM clock mean"].stands_out and by_name["power limit"].stands_out
    assert by_name["power limit"].text == "power limit: 450 W vs peers 700 W"
    assert by_name["SM clock mean / max"].machine == pytest.approx(100 * 1410 / 1980)
    assert by_name["clocks event sw_power_cap"].text == "clocks event sw_power_cap: 85 % of time vs peers 0 % of time"
    assert not by_name["SM clock max"].stands_out and not by_name["PCIe width"].stands_out  # same as the peers
    assert slow.evidence[0].stands_out and "SM clock mean" in slow.explanation and "power limit" in slow.explanation
    text = fleet.fleet_markdown(report)
    assert "`c` is slower than its peers (+30%" in text and "**slower** +30%" in text
    assert "- power limit: 450 W vs peers 700 W **<-**" in text
    assert "No machine" not in text


def test_absent_evidence_is_said_to_be_absent_never_zero():
    rng = np.random.default_rng(4)
    records = []
    for machine, factor in (("a", 1.0), ("b", 1.0), ("c", 1.3)):
        limit = None if machine == "c" else 700.0  # c's runs did not record the power limit
        host = {"cpu_count": "16"} if machine == "c" else {"cpu_count": "16", "cpu_mhz": "2600.0"}
        records += [
            _record(i, machine, 100 * factor * rng.normal(1, 0.02), host, **_gpu(1980.0, limit, 0.0)) for i in range(4)
        ]
    (slow,) = fleet.fleet_report(records).workloads[0].slow_machines
    by_name = {e.name: e for e in slow.evidence}
    assert by_name["power limit"].machine is None
    assert by_name["power limit"].text == "power limit: not recorded on c's runs (peers 700 W)"
    assert by_name["CPU clock"].text == "CPU clock: not recorded on c's runs (peers 2600 MHz)"
    assert by_name["clocks events"].text == "clocks events: none seen on this machine or its peers"
    assert slow.explanation == fleet.NOT_EXPLAINED  # nothing recorded stands out

    cpu = [
        _record(
            i,
            m,
            100 * (1.3 if m == "c" else 1) * rng.normal(1, 0.02),
            {"cpu_count": "8", "cpu_model": "Intel(R) Xeon(R)", "cpu_mhz": "2000" if m == "c" else "2600"},
        )
        for m in "abc"
        for i in range(4)
    ]
    (slow,) = fleet.fleet_report(cpu).workloads[0].slow_machines
    texts = [e.text for e in slow.evidence]
    assert texts[0] == "CPU clock: 2000 MHz vs peers 2600 MHz" and slow.evidence[0].stands_out
    assert "NVML figures: not recorded (CPU runs, or runs without a GPU sampler)" in texts
    assert "CPU model: Intel(R) Xeon(R) vs peers Intel(R) Xeon(R)" in texts
    assert not any(" 0 " in t for t in texts)


def test_one_machine_is_no_fleet():
    report = fleet.fleet_report([_record(i, "a", 100.0 + i) for i in range(5)])
    assert report.workloads == () and report.single_machine_workloads == 1
    assert "no fleet to compare" in fleet.fleet_markdown(report)
    assert "no fleet to compare" in fleet.to_json(report)["note"]


def _main(*args: str) -> tuple[int, str, str]:
    from yolo_mlops.cli import main

    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main(list(args))
    return code, out.getvalue(), err.getvalue()


def test_fleet_command_names_the_slow_machine_from_mlflow(mlflow_client, tmp_path):
    """Runs logged with the params and tags a real run writes, on three machines, one planted 25% slower with
    a lower SM clock."""
    from yolo_mlops import names
    from yolo_mlops.config import build_run_spec
    from yolo_mlops.run import environment
    from yolo_mlops.run.pipeline import run_params
    from yolo_mlops.run.training import TrainingPlan
    from yolo_mlops.tracking import writes

    experiment = f"fleet-{time.time_ns()}"
    experiment_id = mlflow_client.create_experiment(experiment)
    spec = build_run_spec({"imgsz": 640, "batch": 16, "device": "0", "experiment": experiment})
    data = environment.data_identity("/data/synthetic-1/data.yaml", True)
    rng = np.random.default_rng(4)
    stack = dict(torch="2.14.1", mlflow="3", prefect="3", nvidia_driver="580", cpu_mhz=2600.0)  # alike on all three
    for machine, slow in (("node-1", 1.0), ("node-2", 1.0), ("node-3", 1.25)):
        env = gpu_node(hostname=machine, machine=machine, **stack)
        plan = TrainingPlan(
            spec=spec, data_yaml=tmp_path / "data.yaml", device="0", output_dir=tmp_path, steps_expected=60
        )
        for _ in range(3):
            run = mlflow_client.create_run(
                experiment_id, tags=benchmark_tags(spec, env, environment.series_key(spec, env, data, "0"))
            )
            writes.log_values(mlflow_client, run.info.run_id, params=run_params(spec, plan, env))
            now = int(time.time() * 1000)
            mlflow_client.log_batch(
                run.info.run_id,
                metrics=[
                    Metric(names.STEP_TIME_P50, 80.0 * slow * rng.normal(1, 0.02), now, 0),
                    Metric(names.GPU_SM_CLOCK_MEAN, 1980.0 / slow, now, 0),
                    Metric(names.GPU_SM_CLOCK_MAX, 1980.0, now, 0),
                ],
            )
            mlflow_client.set_terminated(run.info.run_id)
    code, out, _ = _main("fleet", "--experiment", experiment, "--format", "json")
    assert code == 0
    report = json.loads(out)
    (workload,) = report["workloads"]
    assert [m["machine"] for m in workload["machines"]] == ["node-1", "node-2", "node-3"]
    assert [m["slow"] for m in workload["machines"]] == [False, False, True]
    (slow,) = workload["slow_machines"]
    assert slow["machine"] == "node-3" and slow["slower_pct"] == pytest.approx(25, abs=5)
    first = slow["evidence"][0]
    assert first["name"] == "SM clock mean" and first["stands_out"]
    assert first["machine"] == pytest.approx(1584) and first["peers"] == pytest.approx(1980)
    evidence = {e["name"]: e for e in slow["evidence"]}
    assert evidence["power limit"]["machine"] is None  # not recorded: null, never 0
    assert evidence["CPU clock"]["text"] == "CPU clock: 2600 MHz vs peers 2600 MHz"
    # these runs logged no key_averages tables: the phases and operators are said to be missing, not guessed
    assert slow["moved"]["note"] == "no attribution: none of node-3's newest 5 runs has key_averages tables"
    assert slow["moved"]["contributions"] == [] and "moved against" not in slow["explanation"]

    plot = tmp_path / "fleet.png"
    code, out, err = _main("fleet", "--experiment", experiment, "--plot", str(plot))
    assert code == 0 and "`node-3` is slower than its peers" in out, err
    assert "Phases and operators of `node-3` against its peers: no attribution: none of node-3's" in out
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # bad input: one line each, exit 2
    for args, message in (
        (["--experiment", "no-such-experiment"], "does not exist"),
        (["--experiment", experiment, "--plot", str(tmp_path / "nope" / "f.png")], "does not exist"),
        (["--experiment", experiment, "--max-pvalue", "1.5"], "must be a probability in (0, 1)"),
    ):
        code, out, err = _main("fleet", *args)
        assert code == 2 and message in err and len(err.strip().splitlines()) == 1, err
    # an experiment whose workloads ran on one machine: said plainly, exit 0
    lone = mlflow_client.create_experiment(f"fleet-lone-{time.time_ns()}")
    run = mlflow_client.create_run(lone, tags={names.SERIES: "x"})
    mlflow_client.set_terminated(run.info.run_id)
    code, out, _ = _main("fleet", "--experiment", mlflow_client.get_experiment(lone).name)
    assert code == 0 and "no fleet to compare" in out and len(out.strip().splitlines()) == 1


SLEEP_S = 1.0  # planted: the slow machine's forward pass sleeps this long every step (far above the step-time
# noise of training beside other test workers on 2 cores)


@pytest.mark.slow
def test_nightly_artifact_fleet_section_names_the_slow_machine(prefect_server, mlflow_client, monkeypatch):
    """Two machines run the nightly flow (tiny CPU runs, real training); `fleet-slow`'s forward pass is slowed
    from this test's code (a forward hook that sleeps), the other is not."""
    import torch
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

    from yolo_mlops.config import BenchmarkSuite, build_run_spec
    from yolo_mlops.flows.benchmark import benchmark
    from yolo_mlops.run import training
    from yolo_mlops.run.environment import MACHINE_VAR

    experiment = f"fleet-night-{time.time_ns()}"
    tiny = build_run_spec(
        {
            "imgsz": 64,
            "batch": 4,
            "epochs": 2,
            "max_steps": 5,
            "workers": 0,
            "device": "cpu",
            "synthetic_images": 8,
            "experiment": experiment,
            "val": False,
            "profiler": {"wait": 0, "warmup": 1, "active": 1, "record_shapes": False, "profile_memory": False},
        }
    )
    suite = BenchmarkSuite(runs=[tiny], repeats=3, fail_on_regression=False)
    monkeypatch.setenv(MACHINE_VAR, "fleet-fast")
    benchmark(suite)

    original = training._Instrumentation.on_train_start

    def on_train_start(self, trainer):
        original(self, trainer)

        def slow(module, args, output):
            with torch.profiler.record_function("test_injected::slow_machine"):
                time.sleep(SLEEP_S)

        trainer.model.model[0].register_forward_hook(slow)

    monkeypatch.setattr(training._Instrumentation, "on_train_start", on_train_start)
    monkeypatch.setenv(MACHINE_VAR, "fleet-slow")
    benchmark(suite)

    with get_client(sync_client=True) as client:
        artifacts = client.read_artifacts(
            artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=["benchmark-trends"]))
        )
    texts = [str(a.data) for a in artifacts if f"Experiment `{experiment}`" in str(a.data)]
    assert len(texts) == 2
    first, second = sorted(texts, key=lambda t: "fleet-slow" in t)
    assert "## Fleet" in first and "no fleet to compare" in first  # one machine after the first night
    fleet_part = second[second.index("## Fleet") :]
    assert "`fleet-slow` is slower than its peers" in fleet_part
    # explained by what moved: the planted operator, from the runs' key_averages tables against its peer's
    slow_line = next(line for line in fleet_part.splitlines() if line.startswith("`fleet-slow` is slower"))
    assert "moved against its peers: " in slow_line and "operator test_injected::slow_machine" in slow_line
    assert "Phases and operators of `fleet-slow` against its peers (its newest 3 runs vs 3 of its peers'" in fleet_part
    assert "`fleet-fast` is slower" not in fleet_part
    assert "| `fleet-fast` | 3 |" in fleet_part and "| `fleet-slow` | 3 |" in fleet_part
