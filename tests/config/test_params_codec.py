"""The params codec: every field a RunSpec and the environment write reads back, and runs of every earlier
layout (a stored fixture each) still give their series identity, versions and workload."""

from __future__ import annotations

import json
from dataclasses import fields
from pathlib import Path

import pytest
from machines import gpu_node

from yolo_mlops import names
from yolo_mlops.config import DdpSettings, NvmlSettings, ProfilerSettings, TorchSettings, build_run_spec
from yolo_mlops.config.params import (
    NONE,
    UNLOGGED,
    VERSION_FIELDS,
    LoggedParams,
    environment_params,
    param_text,
    spec_params,
)
from yolo_mlops.run.environment import series_identity_from_params, versions_from_params

LAYOUTS = json.loads((Path(__file__).parents[1] / "fixtures" / "params_layouts.json").read_text())

SPEC = build_run_spec(
    {
        "model": "yolo11s.yaml",
        "data": "/data/coco8.yaml",
        "imgsz": 320,
        "batch": 12,
        "workers": 3,
        "seed": 7,
        "max_steps": 40,
        "device": "0,1",
        "val": False,
        "variant": "amp_on",
        "torch": {"cudnn_benchmark": True, "pin_memory": False},
        "profiler": {
            "skip_first": 5,
            "wait": 2,
            "warmup": 3,
            "active": 4,
            "repeat": 2,
            "record_shapes": False,
            "with_stack": True,
            "row_limit": 12,
        },
        "nvml": {"backend": "fake", "interval_ms": 50.0, "devices": [0, 1]},
        "ddp": {"bucket_cap_mb": 50.0, "static_graph": True, "no_sync_accumulation": True},
    }
)
TRAINING_ARGS = {
    "model": "yolo11s.yaml",
    "data": "/data/coco8.yaml",
    "imgsz": 320,
    "batch": 12,
    "epochs": 2,
    "device": "0,1",
    "workers": 3,
    "seed": 7,
    "val": False,
    "project": "/tmp/out",
    "name": "ultralytics",
    "cache": "ram",
}


def test_every_section_field_is_written_and_reads_back():
    logged = LoggedParams(spec_params(SPEC, TRAINING_ARGS, steps_expected=40))
    sections = (
        (names.TORCH_PARAM, TorchSettings, SPEC.torch),
        (names.PROFILER_PARAM, ProfilerSettings, SPEC.profiler),
        (names.SAMPLER_PARAM, NvmlSettings, SPEC.nvml),
        (names.DDP_PARAM, DdpSettings, SPEC.ddp),
    )
    for prefix, model, section in sections:
        for field in model.model_fields:
            value = getattr(section, field)
            assert logged.values[prefix + field] == param_text(value), prefix + field
            assert logged.text(prefix + field) == (None if value is None else str(value))
    assert logged.world_size == 2
    assert logged.profiler_window == (5, 2, 3, 4, 2)
    assert logged.profiled_steps == 8
    assert logged.integer(names.TRAIN_PARAM + "steps_expected") == 40
    # machine-local output folders are not params; extra training arguments are
    assert names.TRAIN_PARAM + "project" not in logged.values and logged.train("cache") == "ram"


def test_run_spec_round_trip():
    logged = LoggedParams(spec_params(SPEC, TRAINING_ARGS, steps_expected=40))
    rebuilt = build_run_spec(logged.run_spec_fields(synthetic_data=False))
    for field in ("model", "data", "imgsz", "batch", "workers", "seed", "max_steps", "device", "variant", "val"):
        assert getattr(rebuilt, field) == getattr(SPEC, field), field
    for field in ("skip_first", "wait", "warmup", "active", "repeat"):
        assert getattr(rebuilt.profiler, field) == getattr(SPEC.profiler, field), field
    assert build_run_spec(logged.run_spec_fields(synthetic_data=True)).data is None


def test_environment_round_trip():
    # a machine named apart from its host, fields of every kind: text, numbers, a dirty checkout, None (cuDNN,
    # MLflow and the CPU clock not known)
    env = gpu_node(machine="node-a", cudnn=None, mlflow=None, git_commit="abc", git_dirty=True, cpu_mhz=None)
    params = env.as_params()
    assert params == environment_params({f.name: getattr(env, f.name) for f in fields(env)})
    logged = LoggedParams(params)
    for f in fields(env):
        value = getattr(env, f.name)
        assert params[names.ENV_PARAM + f.name] == param_text(value)
        assert logged.env(f.name) == (None if value is None else str(value))
    assert logged.machine == "node-a"
    assert logged.versions()["cudnn"] == NONE and logged.versions()["commit"] == "abc"


def test_none_placeholders_of_any_writer_read_as_missing():
    logged = LoggedParams({"train.max_steps": "none", "train.seed": "None", "train.batch": "", "train.val": "False"})
    assert logged.integer("train.max_steps") is None and logged.integer("train.seed") is None
    assert logged.integer("train.batch") is None and logged.flag("train.val") is False
    with pytest.raises(ValueError):
        LoggedParams({"train.val": "yes"}).flag("train.val")


@pytest.mark.parametrize("layout", LAYOUTS, ids=[entry["layout"] for entry in LAYOUTS])
def test_runs_of_every_earlier_layout_read_back(layout):
    params, tags = layout["params"], layout["tags"]
    logged = LoggedParams(params)
    identity = series_identity_from_params(params, tags)
    assert identity is not None
    # runs logged before env.machine existed: their host name, which was the machine's name then
    assert identity.machine == "ci-runner-7" and identity.model == "yolo11n.yaml" and identity.batch == 4
    assert identity.profiler_window == (1, 1, 1, 2, 1)
    assert identity.ranks == (2 if names.DDP_WORLD_SIZE in params else 0)
    versions = versions_from_params(params)
    assert set(versions) == set(VERSION_FIELDS) and versions["torch"] == "2.14.1+cu128"
    assert versions["driver"] == (NONE if "env.nvidia_driver" in params else UNLOGGED)
    spec = build_run_spec(logged.run_spec_fields(synthetic_data=tags.get(names.DATASET) == "synthetic"))
    assert (spec.model, spec.imgsz, spec.batch, spec.max_steps, spec.device, spec.val) == (
        "yolo11n.yaml",
        64,
        4,
        6,
        "cpu",
        False,
    )
    assert logged.profiled_steps == 2
