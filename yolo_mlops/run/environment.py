"""Environment fingerprint (versions, device), the code's git commit, and the series identity of a run.

A series is a workload on a kind of hardware: runs with the same series key are comparable, and a software
upgrade (torch, CUDA, cuDNN, ultralytics, NVIDIA driver, Python, the project's own commit) stays *inside*
the series, so the regression it causes shows up as a change point instead of starting a new series.
The versions are recorded on every run (`env.*` params) as the "what changed" dimensions of trends.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import platform
import re
import socket
import subprocess
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path

from yolo_mlops import names
from yolo_mlops.config import RunSpec
from yolo_mlops.config.params import PROFILER_WINDOW_FIELDS, LoggedParams, environment_params
from yolo_mlops.errors import ConfigError

MACHINE_VAR = "YOLO_MLOPS_MACHINE"
# A machine name becomes part of Prefect concurrency-limit names (gpu-<machine>-<index>) and work-queue names:
# letters, digits, '.', '_' and '-', starting with a letter or digit (every DNS host name qualifies).
_MACHINE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")


@dataclass(frozen=True)
class Environment:
    python: str
    platform: str
    hostname: str
    machine: str  # the machine's name in series keys and limit names (YOLO_MLOPS_MACHINE, else the host name)
    cpu_count: int
    torch: str
    torch_cuda: str | None  # CUDA version torch was built with
    cudnn: str | None
    ultralytics: str
    mlflow: str | None
    prefect: str | None
    device_type: str  # "cuda" or "cpu"
    device_name: str
    gpu_count: int
    nvidia_driver: str | None  # NVML's driver version; None without a GPU/NVML
    git_commit: str | None
    git_dirty: bool | None
    cpu_mhz: float | None = None  # mean CPU clock over the cores when the run started; None when unknown

    def as_params(self) -> dict[str, str]:
        """`env.*` MLflow params; missing values say so instead of being left out."""
        return environment_params(asdict(self))

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2)


def _installed_version(distribution: str) -> str | None:
    """A package's version from its metadata, without importing it (prefect's import alone takes seconds)."""
    from importlib import metadata

    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def capture_environment(device: str) -> Environment:
    import torch
    import ultralytics

    cuda = device != "cpu" and torch.cuda.is_available()
    index = cuda_indices(device)[0] if cuda else None
    commit, dirty = git_state()
    return Environment(
        python=platform.python_version(),
        platform=platform.platform(),
        hostname=socket.gethostname(),
        machine=machine_name(),
        cpu_count=os.cpu_count() or 0,
        torch=torch.__version__,
        torch_cuda=torch.version.cuda,
        cudnn=str(torch.backends.cudnn.version()) if torch.backends.cudnn.is_available() else None,
        ultralytics=ultralytics.__version__,
        mlflow=_installed_version("mlflow") or _installed_version("mlflow-skinny"),
        prefect=_installed_version("prefect"),
        device_type="cuda" if cuda else "cpu",
        device_name=torch.cuda.get_device_name(index) if cuda else cpu_model(),
        gpu_count=torch.cuda.device_count() if torch.cuda.is_available() else 0,
        nvidia_driver=nvidia_driver_version(),
        git_commit=commit,
        git_dirty=dirty,
        cpu_mhz=cpu_mhz(),
    )


def machine_name() -> str:
    """This machine's name: `YOLO_MLOPS_MACHINE`, else the host name. A container's host name is its id, so
    the Docker pool and the compose worker pass the host's name in through the variable."""
    name = os.environ.get(MACHINE_VAR, "").strip() or socket.gethostname()
    return check_machine_name(name, source=MACHINE_VAR if os.environ.get(MACHINE_VAR, "").strip() else "host name")


def check_machine_name(name: str, source: str = "machine name") -> str:
    """`name` if it can be part of a concurrency-limit name; ConfigError (one line) otherwise."""
    if not _MACHINE_NAME.fullmatch(name):
        raise ConfigError(
            f"{source} {name!r} cannot name a machine: use 1-63 letters, digits, '.', '_' or '-', "
            f"starting with a letter or digit (set {MACHINE_VAR})"
        )
    return name


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
        commit = subprocess.run(
            ["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5, check=True
        ).stdout.strip()
        status = subprocess.run(
            ["git", "-C", str(repo), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=5,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None, None
    return commit, bool(status.strip())


def cpu_model() -> str:
    """The CPU's model name (/proc/cpuinfo on Linux), else what `platform` knows (often just the architecture)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def cpu_mhz() -> float | None:
    """The CPU clock now, MHz: the mean of the cores' `cpu MHz` in /proc/cpuinfo (Linux), else
    psutil.cpu_freq(); None when neither knows (never a made-up number)."""
    try:
        values = [
            float(line.split(":", 1)[1])
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("cpu MHz")
        ]
    except (OSError, ValueError):
        values = []
    if not values:
        try:
            import psutil

            freq = psutil.cpu_freq()
            values = [freq.current] if freq is not None and freq.current > 0 else []
        except Exception:  # psutil missing, or no frequency interface on this platform
            values = []
    return round(sum(values) / len(values), 1) if values else None


def nvidia_driver_version() -> str | None:
    """The NVIDIA driver version from NVML; None where there is no driver (CPU machines)."""
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:  # no libnvidia-ml, no driver, no GPU: all mean "no driver to record"
        return None
    try:
        version = pynvml.nvmlSystemGetDriverVersion()
        return version.decode() if isinstance(version, bytes) else str(version)
    except Exception:
        return None
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:
            pass


# series identity ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SeriesIdentity:
    """What must match for two runs' speed to be comparable: the workload and the kind of hardware."""

    model: str  # model config file name (yolo11n.yaml)
    data: str  # dataset identity: "synthetic:<cache folder>" or the dataset YAML path
    imgsz: int
    batch: int
    workers: int
    variant: str
    profiler_window: tuple[int, ...]  # skip_first, wait, warmup, active, repeat
    device_type: str  # "cuda" or "cpu"
    device_name: str  # GPU model, or CPU model on CPU
    device_count: int  # GPUs the run trained on (0 on CPU)
    machine: str  # host-to-host differences (clocks, power caps, cooling, PCIe, CPU) stay out of one history
    # ranks of a data-parallel job (CPU ranks count here, GPUs also in device_count); 0: a single process, which
    # keeps the key every run logged before data-parallel jobs existed
    ranks: int = 0

    @property
    def key(self) -> str:
        """The series: this workload on this machine."""
        return _identity_hash(self, with_machine=True)

    @property
    def workload_key(self) -> str:
        """The same workload on any machine of the same hardware kind: what a fleet view compares across
        machines, and what `trends --across-machines` judges as one history."""
        return _identity_hash(self, with_machine=False)

    def _fields(self, with_machine: bool) -> dict:
        fields = asdict(self)
        fields["profiler_window"] = list(self.profiler_window)
        if not self.ranks:
            del fields["ranks"]
        if not with_machine:
            del fields["machine"]
        return fields

    @property
    def workload_label(self) -> str:
        device = self.device_name if self.device_type == "cpu" else f"{self.device_count}x {self.device_name}"
        ranks = f" ddp{self.ranks}" if self.ranks else ""
        return f"{self.model} {self.imgsz}px b{self.batch} w{self.workers} {self.variant}{ranks} on {device}"

    @property
    def label(self) -> str:
        """Short human-readable name of the series."""
        return f"{self.workload_label} @ {self.machine}"


def _hash(fields: dict) -> str:
    return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:16]


@functools.lru_cache(maxsize=65536)
def _identity_hash(identity: SeriesIdentity, with_machine: bool) -> str:
    """Remembered per identity: a history types every run of a series, and every run of one series has the same
    identity (hashing it again was most of the time `fleet` spent typing a year of runs)."""
    return _hash(identity._fields(with_machine))


@functools.lru_cache(maxsize=65536)
def data_identity(yaml_path: Path | str, synthetic: bool) -> str:
    """Dataset identity in the series key: the synthetic dataset's cache folder (it names its settings),
    or the user's dataset YAML path."""
    return f"synthetic:{Path(yaml_path).parent.name}" if synthetic else str(yaml_path)


def series_identity(spec: RunSpec, env: Environment, data_identity_: str, device: str) -> SeriesIdentity:
    cuda = env.device_type == "cuda"
    return SeriesIdentity(
        model=Path(spec.model).name,
        data=data_identity_,
        imgsz=spec.imgsz,
        batch=spec.batch,
        workers=spec.workers,
        variant=spec.variant,
        profiler_window=tuple(getattr(spec.profiler, f) for f in PROFILER_WINDOW_FIELDS),
        device_type=env.device_type,
        device_name=env.device_name,
        device_count=len(cuda_indices(device)) if cuda else 0,
        machine=env.machine,
        ranks=spec.world_size if spec.data_parallel else 0,
    )


def series_key(spec: RunSpec, env: Environment, data_identity_: str, device: str) -> str:
    """Key of the run's series (the `yolo_mlops.series` tag): a hash of `series_identity`, no versions."""
    return series_identity(spec, env, data_identity_, device).key


def series_identity_from_params(params: Mapping[str, str], tags: Mapping[str, str]) -> SeriesIdentity | None:
    """The identity of a logged run, rebuilt from its params and tags: how runs logged before the
    `yolo_mlops.series` tag existed join their series. None when the run lacks a needed param."""
    logged = LoggedParams(params)
    try:
        device_type = logged.env("device_type") or tags[names.DEVICE_TYPE]
        data, device = logged.train("data"), logged.train("device")
        window, machine = logged.profiler_window, logged.machine
        model, device_name = logged.model_name(), logged.env("device_name")
        if None in (data, device, window, machine, model, device_name):
            return None
        return SeriesIdentity(
            model=str(model),
            data=data_identity(str(data), tags.get(names.DATASET) == "synthetic"),
            imgsz=_required(logged.integer(names.TRAIN_PARAM + "imgsz")),
            batch=_required(logged.integer(names.TRAIN_PARAM + "batch")),
            workers=_required(logged.integer(names.TRAIN_PARAM + "workers")),
            variant=logged.train("variant") or tags[names.VARIANT],
            profiler_window=tuple(window or ()),
            device_type=device_type,
            device_name=str(device_name),
            device_count=len(cuda_indices(str(device))) if device_type == "cuda" else 0,
            machine=str(machine),
            ranks=logged.world_size,
        )
    except (KeyError, ValueError):
        return None


# The tags series_identity_from_params reads (a run's params name the rest).
_IDENTITY_TAGS = (names.DEVICE_TYPE, names.DATASET, names.VARIANT)


def remembered_series_identity(params: Mapping[str, str], tags: Mapping[str, str]) -> SeriesIdentity | None:
    """series_identity_from_params, remembered per distinct params and identity tags: the runs of a series log
    the same params (up to the versions, which change with the code), so a year of history rebuilds each identity
    once per distinct layout rather than once per run (what it saves: docs/benchmarks.md, "History at scale")."""
    return _identity_of(tuple(params.items()), tuple((k, tags[k]) for k in _IDENTITY_TAGS if k in tags))


@functools.lru_cache(maxsize=2048)  # keys hold a run's params (a few KB): a few MB at most
def _identity_of(params: tuple[tuple[str, str], ...], tags: tuple[tuple[str, str], ...]) -> SeriesIdentity | None:
    return series_identity_from_params(dict(params), dict(tags))


def _required(value: int | None) -> int:
    if value is None:
        raise KeyError("param not recorded")
    return value


def versions_from_params(params: Mapping[str, str]) -> dict[str, str]:
    """The software versions a run recorded (`NONE` where a version does not apply, `UNLOGGED` where not
    logged)."""
    return LoggedParams(params).versions()
