"""The GPU checks script, run in its dry-run mode on this CPU machine, so it cannot rot between GPU leases.

`benchmarks/run_gpu_checks.sh --dry-run` does everything a GPU run does before its first CUDA step: installs
this tree into a temporary target (as on the GPU machine; the wheelhouse is skipped here, its wheels are for
CPython 3.12), imports every module the checks use from that target, and checks each later step's command
(argument parsing, imports, run config, sweep plan) without running it. The test reads what it wrote.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HANG_S = 3300
SCRIPT = ROOT / "benchmarks" / "run_gpu_checks.sh"
STEPS = [
    "environment",
    "gpu_smoke",
    "gpu_ddp",
    "nvml_tests",
    "instrumentation_overhead",
    "gpu_sweep",
    "trace_analysis",
    "memory_by_holder",
    "diagnosis_tests",
    "gpu_sweep_devices",
    "gpu_sweep_compile",
]


def _run(
    tmp_path: Path, *args: str, env_extra: dict[str, str] | None = None, script: Path = SCRIPT
) -> tuple[subprocess.CompletedProcess, Path]:
    """`bash script ARGS` (benchmarks/run_gpu_checks.sh or a copy of it) as on a bare machine, out: tmp_path/out."""
    out = tmp_path / "out"
    env = {
        **os.environ,
        "OUT": str(out),
        "PYTHON": sys.executable,
        "GPU_WHEELHOUSE": str(tmp_path / "no-wheels"),
        "TMPDIR": str(tmp_path),
        **(env_extra or {}),
    }
    for name in ("PYTHONPATH", "MLFLOW_TRACKING_URI", "YOLO_MLOPS_HOME", "PREFECT_HOME"):
        env.pop(name, None)  # the script sets up its own environment, as on a bare machine
    # a hang guard, not a speed check: a loaded CI machine was seen 17x slower than an idle one at the dry run
    proc = subprocess.run(
        ["bash", str(script), *args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=HANG_S
    )
    return proc, out


@pytest.mark.timeout(HANG_S + 300)
def test_dry_run_stops_before_cuda_and_checks_every_step(tmp_path):
    proc, out = _run(tmp_path, "--dry-run")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["mode"] == "dry-run"
    assert summary["stopped_before"] == "gpu_smoke"
    assert summary["verified_on_gpu"] is False
    steps = {s["name"]: s for s in summary["steps"]}
    assert list(steps) == STEPS
    assert steps["environment"]["status"] == "passed"
    # every later step was checked, not run: no step reached a GPU
    assert {n: steps[n]["status"] for n in STEPS[1:]} == {n: "validated" for n in STEPS[1:]}
    assert "no CUDA call made" in steps["gpu_smoke"]["note"]
    assert "collected" in steps["nvml_tests"]["note"]
    assert "every option" in steps["instrumentation_overhead"]["note"]
    assert "plan of" in steps["gpu_sweep"]["note"]
    host = summary["host"]
    assert all(r["ok"] for r in host["imports"].values()), host["imports"]
    # the checks import the project from the installed target (where flows/ is yolo_mlops.flows), not the tree
    target = summary["install"]["target"]
    assert host["yolo_mlops_from"] == str(Path(target) / "yolo_mlops")
    assert not Path(target).exists()  # the install folder is removed when the script ends
    # the output layout the GPU machine returns: few files, at most two folders deep
    files = sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file())
    assert files == ["checks.log", "summary.json", "summary.md"]
    assert "Not a GPU measurement" in (out / "summary.md").read_text()
    assert "stops before the first CUDA step" in proc.stdout


@pytest.mark.slow
@pytest.mark.timeout(HANG_S + 300)
def test_cpu_rehearsal_runs_every_step_to_its_end(tmp_path):
    """Every step really run, at tiny sizes on the CPU: the dry run stops before a step's body, so only this
    catches a step script that no longer fits the library (a changed signature inside the profiled run)."""
    proc, out = _run(tmp_path, "--rehearse-on-cpu", env_extra={"GPU_CHECKS_TOTAL_S": str(HANG_S - 300)})
    summary = json.loads((out / "summary.json").read_text())
    steps = {s["name"]: s for s in summary["steps"]}
    assert proc.returncode == 0, {n: (s["status"], s.get("note")) for n, s in steps.items()}
    assert summary["mode"] == "cpu-rehearsal"
    assert summary["verified_on_gpu"] is False
    assert list(steps) == STEPS
    statuses = {n: s["status"] for n, s in steps.items()}
    # CPU timings are not judged against GPU goals ("ran"); only the CUDA-only compile sweep is skipped
    assert statuses == {
        "environment": "passed",
        "gpu_smoke": "passed",
        "gpu_ddp": "passed",
        "nvml_tests": "passed",
        "instrumentation_overhead": "ran",
        "gpu_sweep": "passed",
        "trace_analysis": "passed",
        "memory_by_holder": "ran",
        "diagnosis_tests": "passed",
        "gpu_sweep_devices": "passed",
        "gpu_sweep_compile": "skipped",
    }
    smoke_checks = steps["gpu_smoke"]["result"]["checks"]
    # on a CPU the CUDA and NVML checks are not applicable (None), never passed; the rest really passed
    assert {c["name"] for c in smoke_checks if c["ok"] is True} == {
        "trace files",
        "perf/step_time_ms_p50",
        "perf/images_per_s",
    }
    assert not [c for c in smoke_checks if c["ok"] is False]
    assert "Not a GPU measurement" in (out / "summary.md").read_text()


def _copy_tree(dest: Path) -> Path:
    """This tree's files (tracked, or new and not ignored) in a scratch folder, to break on purpose."""
    listed = subprocess.run(
        ["git", "-C", str(ROOT), "ls-files", "-co", "--exclude-standard"], capture_output=True, text=True, check=True
    ).stdout.splitlines()
    for rel in listed:
        src = ROOT / rel
        if src.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            (dest / rel).write_bytes(src.read_bytes())
    return dest


@pytest.mark.timeout(HANG_S + 300)
def test_dry_run_fails_when_a_step_command_rots(tmp_path):
    """Options a step passes but its script no longer offers fail the dry run (our scripts and others')."""
    tree = _copy_tree(tmp_path / "tree")
    sweep = tree / "benchmarks" / "gpu_sweep.py"
    sweep.write_text(sweep.read_text().replace('"--warmup-steps"', '"--warmup"'))
    overhead = tree / "benchmarks" / "bench_instrumentation_overhead.py"
    overhead.write_text(overhead.read_text().replace('"--workers"', '"--loader-workers"'))
    proc, out = _run(
        tmp_path,
        "--dry-run",
        "--only",
        "gpu_sweep_compile,instrumentation_overhead",
        script=tree / "benchmarks" / "run_gpu_checks.sh",
    )
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    steps = {s["name"]: s for s in json.loads((out / "summary.json").read_text())["steps"]}
    assert list(steps) == ["environment", "instrumentation_overhead", "gpu_sweep_compile"]
    assert steps["gpu_sweep_compile"]["status"] == "failed"
    assert "--warmup-steps" in steps["gpu_sweep_compile"]["note"]
    assert steps["instrumentation_overhead"]["status"] == "failed"
    assert "--workers" in steps["instrumentation_overhead"]["note"]


def test_bad_invocations_get_one_clear_line(tmp_path):
    proc, _ = _run(tmp_path, "--dry-run", "--only", "gpu_smok")
    assert proc.returncode == 2
    assert "unknown step(s) ['gpu_smok']" in proc.stdout
    assert "Traceback" not in proc.stdout + proc.stderr
    if sys.version_info[:2] != (3, 12):  # a CPython 3.12 wheelhouse with another interpreter: refused up front
        wheels = tmp_path / "wheels"
        wheels.mkdir()
        (wheels / "x-1.0-cp312-cp312-manylinux2014_x86_64.whl").write_bytes(b"")
        proc, _ = _run(tmp_path, "--dry-run", env_extra={"GPU_WHEELHOUSE": str(wheels)})
        assert proc.returncode == 3
        assert "holds CPython 3.12 wheels" in proc.stdout
