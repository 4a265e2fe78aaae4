"""The bisection's commit process runs the pipeline of whichever commit it is given: the steps of today's code and
of code from before the analysis step was spelled `analyze`, and says so (UNSUPPORTED) for code too old to
have the steps. The commit's code here is a package written by the test in the layout of those commits."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from yolo_mlops.bisect import commit_process

COMMIT_PROCESS = Path(commit_process.__file__)


def _commit_code(root: Path, analysis_step: str | None) -> Path:
    """A `yolo_mlops` package with the modules the commit process loads; every step appends its name to steps.log."""
    files = {
        "__init__.py": "",
        "config/__init__.py": "def load_run_spec(path):\n    return open(path).read()\n",
        "tracking/__init__.py": "",
        "tracking/connection.py": "def client():\n    return 'client'\n",
        "tracking/run_end.py": textwrap.dedent("""
            import contextlib

            @contextlib.contextmanager
            def run_guard(mlflow, run_id, salvage=None):
                yield
            """),
        "run/__init__.py": "",
        "run/pipeline.py": textwrap.dedent("""
            import os

            def _log(step):
                with open(os.environ["STEPS_LOG"], "a") as f:
                    f.write(step + "\\n")

            class Prepared:
                run_id = "run-1"

            class RunSalvage:
                def __init__(self, mlflow, prepared):
                    pass

            def prepare(spec):
                _log("prepare " + spec.strip())
                return Prepared()

            def train(prepared):
                _log("train")
                return "outcome"

            def track(prepared, outcome, analysis):
                _log("track " + analysis)
            """),
    }
    if analysis_step is not None:
        files["run/pipeline.py"] += (
            f"\ndef {analysis_step}(prepared, outcome):\n    _log('{analysis_step}')\n    return 'analysis'\n"
        )
    for name, text in files.items():
        path = root / "yolo_mlops" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def _drive(tmp_path: Path, analysis_step: str | None) -> tuple[subprocess.CompletedProcess, list[str]]:
    code = _commit_code(tmp_path / "commit", analysis_step)
    spec = tmp_path / "spec.yaml"
    spec.write_text("model: yolo11n.yaml\n")
    log = tmp_path / "steps.log"
    done = subprocess.run(
        [sys.executable, "-P", str(COMMIT_PROCESS), str(spec)],
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(code), "STEPS_LOG": str(log), "PATH": "/usr/bin:/bin"},
        timeout=300,
    )
    return done, log.read_text().splitlines() if log.exists() else []


@pytest.mark.parametrize("analysis_step", ["analyze", "analyse"])
def test_the_commits_steps_run_in_order(tmp_path, analysis_step):
    done, steps = _drive(tmp_path, analysis_step)
    assert done.returncode == 0, done.stderr
    assert commit_process.RUN_ID_MARK + "run-1" in done.stdout.splitlines()
    assert steps == ["prepare model: yolo11n.yaml", "train", analysis_step, "track analysis"]


def test_code_without_the_steps_is_unsupported(tmp_path):
    done, steps = _drive(tmp_path, None)
    assert done.returncode == commit_process.UNSUPPORTED_EXIT, done.stderr
    assert done.stdout.startswith(commit_process.UNSUPPORTED_MARK) and steps == []
