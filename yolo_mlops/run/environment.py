"""Environment fingerprint (versions, device), the code's git commit, and the series key of a run."""

from __future__ import annotations

import hashlib
import json
import os
import platform
import socket
import subprocess
from dataclasses import asdict, dataclass
from pathlib import Path

from yolo_mlops.run.config import RunSpec


@dataclass(frozen=True)
class Environment:
    python: str
    platform: str
    hostname: str
    cpu_count: int
    torch: str
    torch_cuda: str | None  # CUDA version torch was built with
    cudnn: str | None
    ultralytics: str
    mlflow: str
    prefect: str
    device_type: str  # "cuda" or "cpu"
    device_name: str
    gpu_count: int
    git_commit: str | None
    git_dirty: bool | None

    def as_params(self) -> dict[str, str]:
        """`env.*` MLflow params; missing values say so instead of being left out."""
        return {f"env.{k}": "none" if v is None else str(v) for k, v in asdict(self).items()}

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2)


def capture_environment(device: str) -> Environment:
    import mlflow
    import prefect
    import torch
    import ultralytics

    cuda = device != "cpu" and torch.cuda.is_available()
    index = cuda_indices(device)[0] if cuda else None
    commit, dirty = git_state()
    return Environment(
        python=platform.python_version(),
        platform=platform.platform(),
        hostname=socket.gethostname(),
        cpu_count=os.cpu_count() or 0,
        torch=torch.__version__,
        torch_cuda=torch.version.cuda,
        cudnn=str(torch.backends.cudnn.version()) if torch.backends.cudnn.is_available() else None,
        ultralytics=ultralytics.__version__,
        mlflow=mlflow.__version__,
        prefect=prefect.__version__,
        device_type="cuda" if cuda else "cpu",
        device_name=torch.cuda.get_device_name(index) if cuda else (platform.processor() or platform.machine()),
        gpu_count=torch.cuda.device_count() if torch.cuda.is_available() else 0,
        git_commit=commit,
        git_dirty=dirty,
    )


def resolve_device(requested: str | None) -> str:
    """The device string ultralytics gets: the user's choice, else '0' with a GPU, else 'cpu'."""
    import torch

    if requested:
        return requested
    return "0" if torch.cuda.is_available() else "cpu"


def cuda_indices(device: str) -> list[int]:
    """CUDA device indices of an ultralytics device string ('0', '0,1', 'cuda:1'); [0] for plain 'cuda'."""
    if device == "cpu":
        return []
    parts = [p.strip().removeprefix("cuda:") for p in device.split(",")]
    return [int(p) for p in parts if p.isdigit()] or [0]


def git_state() -> tuple[str | None, bool | None]:
    """Commit of the code that runs. Set explicitly on runs: MLflow would guess it from sys.argv[0],
    which under a Prefect worker is the worker's own checkout, not this project."""
    if os.environ.get("YOLO_MLOPS_GIT_COMMIT"):  # baked into images that ship without .git
        return os.environ["YOLO_MLOPS_GIT_COMMIT"], None
    repo = Path(__file__).resolve().parent.parent
    try:
        commit = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True,
                                text=True, timeout=5, check=True).stdout.strip()
        status = subprocess.run(["git", "-C", str(repo), "status", "--porcelain", "--untracked-files=no"],
                                capture_output=True, text=True, timeout=5, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None, None
    return commit, bool(status.strip())


def series_key(spec: RunSpec, env: Environment, data_identity: str) -> str:
    """Hash of everything that must match for two runs' speed to be comparable."""
    fields = {
        "model": Path(spec.model).name,
        "data": data_identity,
        "imgsz": spec.imgsz,
        "batch": spec.batch,
        "workers": spec.workers,
        "variant": spec.variant,
        "device": env.device_name,
        "torch": env.torch,
        "cuda": env.torch_cuda,
        "ultralytics": env.ultralytics,
    }
    return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:16]
