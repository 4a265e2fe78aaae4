"""Series identity: what the key includes and excludes, and old-style runs read together with new ones.

The runs here are written into the session's real SQLite MLflow store with the params the pipeline logs
(`pipeline.run_params` over a hand-made GPU environment, since this machine has no GPU); old-style runs carry
only the legacy `yolo_mlops.series_key` tag (computed with the old formula, which hashed library versions) and
lack the params added since (the driver version)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import time
from pathlib import Path

import pytest
from machines import gpu_node
from mlflow.entities import Metric

from yolo_mlops import names
from yolo_mlops.config import build_run_spec
from yolo_mlops.run.environment import (
    Environment,
    data_identity,
    series_identity,
    series_identity_from_params,
    series_key,
)
from yolo_mlops.run.pipeline import run_params
from yolo_mlops.run.training import TrainingPlan
from yolo_mlops.tracking import writes
from yolo_mlops.trends import history, trend

DATA_YAML = Path("/data/yolo-mlops/datasets/synthetic-0123456789/data.yaml")


def spec(**changes):
    base = {
        "imgsz": 640,
        "batch": 16,
        "workers": 8,
        "device": "0",
        "experiment": "series-id",
        "profiler": {"skip_first": 10, "wait": 5, "warmup": 2, "active": 5},
    }
    base.update(changes)
    return build_run_spec(base)


def key(s=None, env=None, device="0") -> str:
    return series_key(s or spec(), env or gpu_node(), data_identity(DATA_YAML, synthetic=True), device)


def test_versions_stay_inside_the_series():
    base = key()
    for change in (
        {"torch": "2.15.0+cu130"},
        {"torch_cuda": "13.1"},
        {"cudnn": "92500"},
        {"ultralytics": "8.4.200"},
        {"nvidia_driver": "590.10"},
        {"python": "3.12.1"},
        {"git_commit": "b" * 40},
        {"hostname": "node-2"},
        {"gpu_count": 4},
    ):
        assert key(env=gpu_node(**change)) == base, change


def test_workload_and_hardware_define_the_series():
    base = key()
    different = [
        key(spec(batch=32)),
        key(spec(imgsz=320)),
        key(spec(workers=4)),
        key(spec(variant="amp")),
        key(spec(model="yolo11s.yaml")),
        key(spec(profiler={"skip_first": 10, "wait": 5, "warmup": 2, "active": 3})),
        key(env=gpu_node(device_name="NVIDIA A100-SXM4-80GB")),
        key(device="0,1"),
        series_key(spec(), gpu_node(), data_identity(DATA_YAML.with_name("x") / "data.yaml", True), "0"),
        series_key(spec(), gpu_node(), data_identity("/data/coco.yaml", synthetic=False), "0"),
        key(spec(device="cpu"), gpu_node(device_type="cpu", device_name="AMD EPYC 9654", gpu_count=0), "cpu"),
        key(env=gpu_node(machine="node-2")),
    ]
    assert base not in different
    assert len(set(different)) == len(different)


def test_key_rebuilt_from_logged_params_equals_the_key_of_the_run():
    s, env = spec(), gpu_node()
    params, tags = _logged(s, env)
    identity = series_identity_from_params(params, tags)
    assert identity == series_identity(s, env, data_identity(DATA_YAML, True), "0")
    assert identity.key == key(s, env)
    assert identity.label == "yolo11n.yaml 640px b16 w8 baseline on 1x NVIDIA H200 @ node-1"
    assert series_identity_from_params({k: v for k, v in params.items() if k != "train.batch"}, tags) is None


def old_series_key(s, env: Environment, data_identity_: str) -> str:
    """The formula runs used before the `yolo_mlops.series` tag: it hashed library versions."""
    fields = {
        "model": Path(s.model).name,
        "data": data_identity_,
        "imgsz": s.imgsz,
        "batch": s.batch,
        "workers": s.workers,
        "variant": s.variant,
        "device": env.device_name,
        "torch": env.torch,
        "cuda": env.torch_cuda,
        "ultralytics": env.ultralytics,
    }
    return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:16]


def _logged(s, env: Environment, device: str = "0") -> tuple[dict[str, str], dict[str, str]]:
    plan = TrainingPlan(spec=s, data_yaml=DATA_YAML, device=device, output_dir=Path("/tmp/unused"), steps_expected=60)
    params = run_params(s, plan, env)
    tags = {
        names.RUN_KIND: "benchmark",
        names.VARIANT: s.variant,
        names.DEVICE_TYPE: env.device_type,
        names.DATASET: "synthetic",
    }
    return params, tags


def _create(mlflow, experiment_id: str, params, tags, step_ms: float) -> str:
    run = mlflow.create_run(experiment_id, tags=tags)
    writes.log_values(mlflow, run.info.run_id, params=params)
    mlflow.log_batch(run.info.run_id, metrics=[Metric(names.STEP_TIME_P50, step_ms, int(time.time() * 1000), 0)])
    mlflow.set_terminated(run.info.run_id)
    time.sleep(0.005)  # distinct start times order the history
    return run.info.run_id


def test_old_and_new_runs_read_as_one_series(mlflow_client):
    experiment_id = mlflow_client.create_experiment(f"series-migration-{time.time_ns()}")
    s = spec()
    old_env, new_env = gpu_node(torch="2.13.0+cu128", torch_cuda="12.8"), gpu_node()
    old_ids = []
    for ms in (100.0, 101.0, 99.5, 100.4, 99.8, 100.2):  # old-style: legacy tag, no driver param
        params, tags = _logged(s, old_env)
        params.pop("env.nvidia_driver")
        params.pop(names.ENV_MACHINE)
        tags[names.SERIES_KEY] = old_series_key(s, old_env, data_identity(DATA_YAML, True))
        old_ids.append(_create(mlflow_client, experiment_id, params, tags, ms))
    new_ids = []
    for i, ms in enumerate((111.0, 110.2, 111.5, 110.8, 111.1, 110.5)):  # the series tag; torch upgraded
        params, tags = _logged(s, new_env)
        if i < 3:  # logged before the machine was in the key: no env.machine, the machine-less series tag
            params.pop(names.ENV_MACHINE)
            tags[names.SERIES] = series_identity(s, new_env, data_identity(DATA_YAML, True), "0").workload_key
        else:
            tags[names.SERIES] = key(s, new_env)
        new_ids.append(_create(mlflow_client, experiment_id, params, tags, ms))
    other, tags = _logged(spec(batch=32), new_env)  # another workload: must not join
    _create(mlflow_client, experiment_id, other, {**tags, names.SERIES: key(spec(batch=32), new_env)}, 300.0)

    grouped = history.group_series(history.load_history(mlflow_client, [experiment_id]))
    assert len(grouped) == 2
    runs = grouped[key(s, new_env)]
    assert [r.run_id for r in runs] == old_ids + new_ids
    assert {r.versions["driver"] for r in runs[:6]} == {"?"} and runs[-1].versions["driver"] == "580.65.06"

    step = trend.series_trend(runs).metric(names.STEP_TIME_P50)
    assert step is not None
    (change,) = step.changes
    assert change.run_id == new_ids[0] and change.direction == "regression"
    assert change.change_pct == pytest.approx(100 * (110.85 - 100.15) / 100.15, rel=1e-3)
    changed = {c.name: c for c in change.what_changed}
    assert set(changed) == {"torch", "cuda", "driver"}  # same commit on both sides: no commit range
    assert changed["torch"].text() == "torch 2.13.0+cu128 -> 2.14.1+cu130"


def test_machine_is_in_the_series_but_not_in_the_workload():
    s = spec()
    here = series_identity(s, gpu_node(), data_identity(DATA_YAML, True), "0")
    there = series_identity(s, gpu_node(machine="node-2", hostname="c0ffee"), data_identity(DATA_YAML, True), "0")
    assert here.key != there.key
    assert here.workload_key == there.workload_key
    assert here.workload_label == there.workload_label and here.label != there.label


def test_machine_name_comes_from_the_variable_else_the_host_name(monkeypatch):
    import socket

    from yolo_mlops.errors import ConfigError
    from yolo_mlops.run.environment import MACHINE_VAR, check_machine_name, machine_name

    monkeypatch.setenv(MACHINE_VAR, "gpu-host-07")
    assert machine_name() == "gpu-host-07"
    monkeypatch.delenv(MACHINE_VAR)
    assert machine_name() == socket.gethostname()
    for bad in ("two words", "a/b", "-dash-first", "x" * 64, ""):
        with pytest.raises(ConfigError, match="cannot name a machine"):
            check_machine_name(bad)
    monkeypatch.setenv(MACHINE_VAR, "no/slash")
    with pytest.raises(ConfigError, match="YOLO_MLOPS_MACHINE 'no/slash'"):
        machine_name()


def test_machines_are_judged_together_only_on_request(mlflow_client):
    experiment_id = mlflow_client.create_experiment(f"series-machines-{time.time_ns()}")
    s = spec()
    ids = {}
    for machine in ("node-1", "node-2"):
        env = gpu_node(machine=machine)
        params, tags = _logged(s, env)
        tags[names.SERIES] = key(s, env)
        ids[machine] = [_create(mlflow_client, experiment_id, params, tags, ms) for ms in (100.0, 101.0)]
    records = history.load_history(mlflow_client, [experiment_id])
    apart = history.group_series(records)
    assert sorted(len(v) for v in apart.values()) == [2, 2]
    assert {r.machine for r in records} == {"node-1", "node-2"}
    (together,) = history.group_series(records, across_machines=True).values()
    assert sorted(r.run_id for r in together) == sorted(ids["node-1"] + ids["node-2"])
    assert together[0].label.endswith("@ all machines")


def test_a_data_parallel_job_is_a_series_of_its_own_and_reads_back_from_its_params():
    cpu = gpu_node(device_type="cpu", device_name="AMD EPYC 9654", gpu_count=0)
    single = spec(device="cpu")
    job = spec(device="cpu", ddp={"ranks": 2})
    keys = {key(single, cpu, "cpu"), key(job, cpu, "cpu"), key(spec(device="cpu", ddp={"ranks": 4}), cpu, "cpu")}
    assert len(keys) == 3  # the world size is part of the workload: CPU ranks are not in device_count
    # a single-process run keeps the key it had before data-parallel jobs existed (no `ranks` in its hash)
    legacy = {
        k: v
        for k, v in dataclasses.asdict(series_identity(single, cpu, data_identity(DATA_YAML, True), "cpu")).items()
        if k != "ranks"
    }
    legacy["profiler_window"] = list(legacy["profiler_window"])
    assert key(single, cpu, "cpu") == hashlib.sha256(json.dumps(legacy, sort_keys=True).encode()).hexdigest()[:16]
    params, tags = _logged(job, cpu, device="cpu")
    identity = series_identity_from_params(params, tags)
    assert identity is not None and identity.ranks == 2 and identity.key == key(job, cpu, "cpu")
    assert "ddp2" in identity.label
