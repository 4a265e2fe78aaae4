"""The environment step: the host's versions, GPUs and imports, written by a child (`gpu_checks.py --env-report
PATH`) so that a missing wheel shows up before any step needs it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from . import BENCH

if TYPE_CHECKING:
    from .runner import Checks, StepRun


# Modules the steps import; the environment step imports each once, so a missing wheel shows up first.
CHECKED_IMPORTS = (
    "torch",
    "torchvision",
    "pynvml",
    "ultralytics",
    "mlflow",
    "prefect",
    "pydantic",
    "msgspec",
    "ijson",
    "sqlalchemy",
    "alembic",
    "yolo_mlops.run.pipeline",
    "yolo_mlops.flows.profile_training",
    "yolo_mlops.flows.sweep",
    "yolo_mlops.analysis",
    "yolo_mlops.nvml.real",
    "yolo_mlops.cli",
)
# Versions recorded from the host (most come with the GPU machine, the rest from the carried wheelhouse).
RECORDED_VERSIONS = (
    "torch",
    "torchvision",
    "triton",
    "numpy",
    "pandas",
    "scipy",
    "matplotlib",
    "pillow",
    "opencv-python-headless",
    "nvidia-ml-py",
    "pyarrow",
    "typing-extensions",
    "anyio",
    "httpx",
    "click",
    "typer",
    "rich",
    "pyyaml",
    "requests",
    "pytest",
    "pytest-timeout",
    "setuptools",
    "pip",
    "ultralytics",
    "mlflow-skinny",
    "prefect",
    "pydantic",
    "pydantic-core",
    "sqlalchemy",
    "alembic",
    "fastapi",
    "starlette",
    "uvicorn",
    "msgspec",
    "ijson",
    "polars",
)


def cmd_env(ch: Checks) -> list[str]:
    return [ch.py, str(BENCH / "gpu_checks.py"), "--env-report", str(ch.work / "env.json")]


def judge_env(ch: Checks, run: StepRun, output: str) -> None:
    path = ch.work / "env.json"
    ch.host = json.loads(path.read_text()) if path.exists() else {}
    failed = [m for m, r in ch.host.get("imports", {}).items() if not r.get("ok")]
    run.result = {"failed_imports": failed, "requirement_conflicts": ch.host.get("requirement_conflicts", [])}
    run.status = "passed" if run.rc == 0 and not failed else "failed"
    torch = ch.host.get("versions", {}).get("torch")
    run.note = f"imports failed: {failed}" if failed else f"python {ch.host.get('python')}, torch {torch}"


def env_report(path: Path) -> int:
    import importlib
    import platform
    from importlib import metadata

    report: dict = {
        "python": platform.python_version(),
        "executable": sys.executable,
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "pythonpath": os.environ.get("PYTHONPATH", ""),
        "versions": {},
        "imports": {},
    }
    for name in RECORDED_VERSIONS:
        try:
            report["versions"][name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            report["versions"][name] = None
    report["nvidia_smi"] = _nvidia_smi()
    for module in CHECKED_IMPORTS:
        t = time.perf_counter()
        try:
            importlib.import_module(module)
            report["imports"][module] = {"ok": True, "s": round(time.perf_counter() - t, 2)}
        except Exception as exc:  # noqa: BLE001 - recorded: this is what the step reports
            report["imports"][module] = {"ok": False, "error": f"{type(exc).__name__}: {exc}"[:500]}
    package = sys.modules.get("yolo_mlops")
    report["yolo_mlops_from"] = str(Path(package.__file__).parent) if package and package.__file__ else None
    target = os.environ.get("GPU_CHECKS_TARGET")
    report["requirement_conflicts"], report["requirements_missing"] = _requirements(target) if target else ([], [])
    if "torch" in sys.modules:
        torch = sys.modules["torch"]
        report["torch_cuda_build"] = torch.version.cuda
        report["cudnn"] = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    path.write_text(json.dumps(report, indent=2, default=str))
    failed = [m for m, r in report["imports"].items() if not r["ok"]]
    for module in failed:
        print(f"import {module} failed: {report['imports'][module]['error']}")
    print(
        f"python {report['python']}; {len(CHECKED_IMPORTS) - len(failed)}/{len(CHECKED_IMPORTS)} imports ok; "
        f"{len(report['requirement_conflicts'])} version conflicts with the host"
    )
    return 1 if failed else 0


def _nvidia_smi() -> dict | None:
    if shutil.which("nvidia-smi") is None:
        return None
    fields = "name,driver_version,memory.total,compute_cap,clocks.max.sm,power.limit,pci.bus_id"
    try:
        out = subprocess.run(
            ["nvidia-smi", f"--query-gpu={fields}", "--format=csv,noheader"], capture_output=True, text=True, timeout=30
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"error": str(exc)}
    names = fields.split(",")
    rows = [dict(zip(names, (v.strip() for v in line.split(",")), strict=False)) for line in out.stdout.splitlines()]
    return {"gpus": rows, "rc": out.returncode, "stderr": out.stderr.strip()[-500:]}


def _requirements(target: str) -> tuple[list[str], list[str]]:
    """Requirements of the carried distributions that the host does not meet (wrong version / absent)."""
    from importlib import metadata

    from packaging.requirements import Requirement

    conflicts, missing = [], []
    for dist in metadata.distributions(path=[target]):
        for text in dist.requires or []:
            req = Requirement(text)
            if req.marker is not None and not req.marker.evaluate({"extra": ""}):
                continue
            try:
                version = metadata.version(req.name)
            except metadata.PackageNotFoundError:
                missing.append(f"{dist.metadata['Name']}: {text}")
                continue
            if req.specifier and not req.specifier.contains(version, prereleases=True):
                conflicts.append(f"{dist.metadata['Name']} needs {text}, host has {version}")
    return sorted(set(conflicts)), sorted(set(missing))
