from pathlib import Path

import pytest

from yolo_mlops.config import ProfilerSettings, build_run_spec, load_run_spec
from yolo_mlops.errors import ConfigError


def test_defaults_validate_and_window_arithmetic():
    spec = build_run_spec({})
    assert spec.model == "yolo11n.yaml" and spec.data is None
    assert ProfilerSettings(skip_first=2, wait=1, warmup=1, active=3, repeat=2).window_end_step == 12


@pytest.mark.parametrize(
    "fields, fragment",
    [
        ({"profiler": {"active": 0}}, "profiler.active"),
        ({"max_steps": 4, "profiler": {"wait": 2, "warmup": 1, "active": 3}}, "needs 6 steps"),
        ({"model": "yolo11n.onnx"}, "must be a .yaml config or a .pt"),
        ({"train_args": {"batch": 4}}, "train_args may not set ['batch']"),
        ({"imgsz": 0}, "imgsz"),
        ({"unknown_field": 1}, "unknown_field"),
    ],
)
def test_bad_fields_give_one_line_errors(fields, fragment):
    with pytest.raises(ConfigError) as err:
        build_run_spec(fields)
    message = str(err.value)
    assert fragment in message and "\n" not in message


def test_yaml_config_with_cli_overrides(tmp_path: Path):
    path = tmp_path / "run.yaml"
    path.write_text("model: yolo11s.yaml\nimgsz: 320\nprofiler:\n  active: 5\n  wait: 2\n")
    spec = load_run_spec(path, {"imgsz": 256, "profiler": {"wait": 0}})
    assert (spec.model, spec.imgsz) == ("yolo11s.yaml", 256)
    assert (spec.profiler.active, spec.profiler.wait) == (5, 0)


def test_missing_and_malformed_config_files(tmp_path: Path):
    with pytest.raises(ConfigError, match="config file not found"):
        load_run_spec(tmp_path / "nope.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("- just\n- a list\n")
    with pytest.raises(ConfigError, match="mapping"):
        load_run_spec(bad)


def test_cli_flags_fill_the_same_spec(tmp_path: Path):
    from yolo_mlops import cli

    args = cli.build_parser().parse_args(
        [
            "profile",
            "--imgsz",
            "320",
            "--max-steps",
            "50",
            "--active",
            "5",
            "--nvml-backend",
            "none",
            "--nvml-devices",
            "0,1",
            "--with-stack",
        ]
    )
    spec = cli.spec_from_args(args)
    assert (spec.imgsz, spec.max_steps, spec.profiler.active, spec.profiler.with_stack) == (320, 50, 5, True)
    assert (spec.nvml.backend, spec.nvml.devices) == ("none", [0, 1])
