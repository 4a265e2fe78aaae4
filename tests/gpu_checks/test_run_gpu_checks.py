"""The GPU checks script, run in its dry-run mode on this CPU machine, so it cannot rot between GPU leases.

`benchmarks/run_gpu_checks.sh --dry-run` does everything a GPU run does before its first CUDA step: installs
this tree into a temporary target (as on the GPU machine; the wheelhouse is skipped here, its wheels are for
CPython 3.12), imports every module the checks use from that target, and checks each later step's command
(argument parsing, imports, run config, sweep plan) without running it. The test reads what it wrote.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HANG_S = 3300
SCRIPT = ROOT / "benchmarks" / "run_gpu_checks.sh"
STEPS = [  # priority order: the first six must fit the GPU run's 420 s, the rest run as time allows
    "environment",
    "gpu_smoke",
    "trace_analysis",
    "gpu_ddp",
    "instrumentation_overhead",
    "gpu_sweep_fixes",
    "nvml_tests",
    "diagnosis_tests",
    "memory_by_holder",
    "gpu_sweep",
    "gpu_sweep_devices",
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
    assert "plan of 3 children" in steps["gpu_sweep_fixes"]["note"]  # baseline, compile, batch_32
    assert "--repeats 4" in " ".join(steps["instrumentation_overhead"]["command"])
    host = summary["host"]
    assert all(r["ok"] for r in host["imports"].values()), host["imports"]
    # the checks import the project from the installed target (where flows/ is yolo_mlops.flows), not the tree
    target = summary["install"]["target"]
    assert host["yolo_mlops_from"] == str(Path(target) / "yolo_mlops")
    # and so does pytest (`python -m pytest` in the repository root imported the source tree on the H100)
    installed = Path(target).resolve() / "yolo_mlops"
    tested = f"gpu_pytest: yolo_mlops from {installed}, yolo_mlops.flows from {installed / 'flows'}"
    assert (out / "checks.log").read_text().count(tested) == 2, "nvml_tests and diagnosis_tests, collected"
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
    # CPU timings are not judged against GPU goals ("ran")
    assert statuses == {
        "environment": "passed",
        "gpu_smoke": "passed",
        "trace_analysis": "passed",
        "gpu_ddp": "passed",
        "instrumentation_overhead": "ran",
        "gpu_sweep_fixes": "passed",
        "nvml_tests": "passed",
        "diagnosis_tests": "passed",
        "memory_by_holder": "ran",
        "gpu_sweep": "passed",
        "gpu_sweep_devices": "passed",
    }
    # pytest tested the installed tree, where flows/ is yolo_mlops.flows (the planted test's fixture needs it)
    installed = Path(summary["install"]["target"]).resolve() / "yolo_mlops"
    for name in ("nvml_tests", "diagnosis_tests"):
        assert steps[name]["result"]["yolo_mlops_from"] == str(installed), name
    # a one-rank gloo job times its collectives on gloo's threads (NCCL would run no kernel: see gpu_smoke.py)
    ddp_checks = {c["name"]: c for c in steps["gpu_ddp"]["result"]["checks"]}
    assert ddp_checks["rank0/comm/collective_pct"]["ok"] and ddp_checks["rank0/comm/calls_per_step"]["ok"]
    assert ddp_checks["ddp.backend_used param"]["value"] == "gloo"
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
    """Options a step passes but its script no longer offers fail the dry run (our scripts and others'); a pytest
    step that would import the source tree instead of the install fails it too."""
    tree = _copy_tree(tmp_path / "tree")
    sweep = tree / "benchmarks" / "gpu_sweep.py"
    sweep.write_text(sweep.read_text().replace('"--warmup-steps"', '"--warmup"'))
    overhead = tree / "benchmarks" / "bench_instrumentation_overhead.py"
    overhead.write_text(overhead.read_text().replace('"--workers"', '"--loader-workers"'))
    # the source tree first on sys.path, as `python -m pytest` in the repository root had it on the first GPU run
    runner = tree / "benchmarks" / "gpu_pytest.py"
    runner.write_text(
        runner.read_text().replace(
            "    import yolo_mlops\n", "    sys.path.insert(0, str(ROOT))\n    import yolo_mlops\n", 1
        )
    )
    proc, out = _run(
        tmp_path,
        "--dry-run",
        "--only",
        "gpu_sweep_fixes,instrumentation_overhead,nvml_tests",
        script=tree / "benchmarks" / "run_gpu_checks.sh",
    )
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    steps = {s["name"]: s for s in json.loads((out / "summary.json").read_text())["steps"]}
    assert list(steps) == ["environment", "instrumentation_overhead", "gpu_sweep_fixes", "nvml_tests"]
    assert steps["gpu_sweep_fixes"]["status"] == "failed"
    assert "--warmup-steps" in steps["gpu_sweep_fixes"]["note"]
    assert steps["instrumentation_overhead"]["status"] == "failed"
    assert "--workers" in steps["instrumentation_overhead"]["note"]
    assert steps["nvml_tests"]["status"] == "failed"
    assert "exited 3" in steps["nvml_tests"]["note"]


def _gpu_checks_module():
    """benchmarks/gpu_checks.py as a module (a script: the standard library only at module level); loading it puts
    benchmarks/ on sys.path, where its steps' package `gpu_check` is."""
    spec = importlib.util.spec_from_file_location("gpu_checks_under_test", ROOT / "benchmarks" / "gpu_checks.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_later_steps_never_cut_an_earlier_one_below_its_need(tmp_path, monkeypatch):
    """The H100's second run (`--only` of four steps, 259 s): the environment step's limit was the budget less the
    later steps' 240 s of reserves, 19 s; it needed 19.1 s and was killed. Its need is now its floor."""
    gc = _gpu_checks_module()
    args = gc.build_parser().parse_args(["--out", str(tmp_path / "out"), "--budget-s", "259"])
    checks = gc.Checks(args)
    shutil.rmtree(checks.work)  # its scratch folder (MLflow store, data): nothing runs here
    limits: list[float] = []

    def spawn(label: str, command: list[str], limit: float) -> tuple[int, float, str]:
        limits.append(limit)
        return 0, 1.0, ""

    monkeypatch.setattr(checks, "_spawn", spawn)
    environment = next(s for s in gc.STEPS if s.name == "environment")
    run = checks.run_step(environment, reserve_after=240.0)
    assert limits == [pytest.approx(environment.need_s)] and run.timeout_s == environment.need_s
    # as time allows: a step without the time it needs is skipped, not started to be killed
    sweep = next(s for s in gc.STEPS if s.name == "gpu_sweep")
    monkeypatch.setattr(checks, "left", lambda: sweep.need_s - 1)
    assert checks.run_step(sweep, reserve_after=0.0).status == "skipped" and len(limits) == 1


def test_the_overhead_and_the_fixes_from_the_h100_run():
    _gpu_checks_module()
    from gpu_check.overhead import pairs_ratio
    from gpu_check.sweeps import LAUNCH_BOUND_FIXES, launch_fixes

    # run2's two finished pairs: the ratio over them is reported when the step is cut short
    repeats = [
        {"repeat": 0, "mode": "plain", "median_ms": 54.45, "steps": 33},
        {"repeat": 0, "mode": "instrumented", "median_ms": 62.20, "steps": 33},
        {"repeat": 1, "mode": "instrumented", "median_ms": 60.52, "steps": 33},
        {"repeat": 1, "mode": "plain", "median_ms": 57.36, "steps": 33},
        {"repeat": 2, "mode": "plain", "median_ms": 55.0, "steps": 33},
    ]
    partial = pairs_ratio(repeats)
    assert partial["pairs"] == 2 and partial["per_pair"] == [1.142, 1.055]
    assert partial["ratio"] == pytest.approx(((62.20 + 60.52) / 2) / ((54.45 + 57.36) / 2), abs=1e-4)

    class Smoke:
        mode = "gpu"
        tiny = False

        def __init__(self, findings):
            self.findings = findings

        def result_of(self, name):
            return {"findings": self.findings} if name == "gpu_smoke" else {}

    launch_bound = {"severity": "high", "title": "launch-bound", "recommended_variants": ["compile", "batch_32"]}
    cudnn = {"severity": "low", "title": "cudnn.benchmark is off", "recommended_variants": ["cudnn_benchmark"]}
    assert launch_fixes(Smoke([launch_bound, cudnn])) == "compile,batch_32"  # the top finding's
    assert launch_fixes(Smoke([])) == LAUNCH_BOUND_FIXES == "compile,batch_32"


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
