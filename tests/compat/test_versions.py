"""The declared ranges and the check at start: a library outside its range is one line, before any run exists."""

from __future__ import annotations

import pytest

from yolo_mlops.compat import versions
from yolo_mlops.errors import ConfigError


def test_the_declared_ranges_come_from_the_installed_metadata_and_hold_what_is_installed():
    ranges = versions.declared_ranges()
    assert set(ranges) == set(versions.CHECKED)
    assert versions.out_of_range() == []


def test_a_release_outside_its_range_is_named_with_the_range(monkeypatch):
    installed = {"torch": "2.4.1", "ultralytics": "8.4.190", "mlflow": "2.22.0"}
    monkeypatch.setattr(versions, "installed_version", installed.get)
    found = versions.out_of_range({"torch": ">=2.5,<2.16", "ultralytics": "<8.5,>=8.3", "mlflow": "<4,>=3.5"})
    assert [f.line() for f in found] == [
        "torch 2.4.1 is outside the tested range torch>=2.5,<2.16",
        "mlflow 2.22.0 is outside the tested range mlflow<4,>=3.5",
    ]


def test_local_and_pre_release_builds_are_judged_by_their_version(monkeypatch):
    installed = {"torch": "2.11.0+cu130", "torchvision": "0.31.0.dev20261201"}
    monkeypatch.setattr(versions, "installed_version", installed.get)
    found = versions.out_of_range({"torch": ">=2.5,<2.16", "torchvision": ">=0.20,<0.31"})
    assert [f.package for f in found] == ["torchvision"]


def test_a_missing_package_is_left_to_its_import(monkeypatch):
    monkeypatch.setattr(versions, "installed_version", lambda package: None)
    assert versions.out_of_range({"prefect": ">=3.4,<4"}) == []


def test_mlflow_skinny_provides_mlflow(monkeypatch):
    from importlib import metadata

    known = {"mlflow-skinny": "3.17.2"}

    def version(name):
        if name not in known:
            raise metadata.PackageNotFoundError(name)
        return known[name]

    monkeypatch.setattr(versions.metadata, "version", version)
    assert versions.installed_version("mlflow") == "3.17.2"
    assert versions.installed_version("prefect") is None


def test_check_installed_refuses_in_one_line_unless_overridden(monkeypatch):
    monkeypatch.setattr(versions, "installed_version", {"torch": "2.4.1"}.get)
    monkeypatch.setattr(versions, "declared_ranges", lambda: {"torch": ">=2.5,<2.16"})
    monkeypatch.delenv(versions.OVERRIDE_VARIABLE, raising=False)
    with pytest.raises(ConfigError) as caught:
        versions.check_installed()
    assert "\n" not in str(caught.value)
    assert str(caught.value).startswith("torch 2.4.1 is outside the tested range torch>=2.5,<2.16")
    monkeypatch.setenv(versions.OVERRIDE_VARIABLE, "1")
    versions.check_installed()


def test_the_command_line_refuses_before_any_run_exists(monkeypatch, tmp_path, capsys):
    """`yolo-mlops profile` with a torch outside its range: exit 2, one line naming it, no MLflow store made."""
    from yolo_mlops.cli import main

    monkeypatch.setenv("YOLO_MLOPS_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.delenv(versions.OVERRIDE_VARIABLE, raising=False)
    monkeypatch.setattr(versions, "installed_version", {"torch": "2.4.1"}.get)
    monkeypatch.setattr(versions, "declared_ranges", lambda: {"torch": ">=2.5,<2.16"})
    assert main(["profile", "--device", "cpu", "--max-steps", "4"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "torch 2.4.1 is outside the tested range torch>=2.5,<2.16" in err[0]
    assert not (tmp_path / "home" / "mlflow.db").exists()


def test_version_at_least(monkeypatch):
    monkeypatch.setattr(versions, "installed_version", {"torch": "2.11.0+cu130"}.get)
    assert versions.version_at_least("torch", "2.11")
    assert not versions.version_at_least("torch", "2.12")
    assert not versions.version_at_least("prefect", "3.0")
