"""Fixtures for the trace-analysis tests: HTA-checked GPU traces, a real CPU trace, trace builders, the
diagnosis input of a healthy GPU run."""

from __future__ import annotations

import gzip
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from trace_events import complete_event, memory_event

from yolo_mlops.analysis.diagnosis import DiagnosisInput
from yolo_mlops.analysis.model import TraceAnalysis

PHASES = ("data_wait", "preprocess", "forward_loss", "backward", "optimizer_step")
ACTIVE_STEPS = 3


GPU_TRACES = Path(__file__).resolve().parents[1] / "fixtures" / "gpu_traces"


@pytest.fixture(scope="session")
def gpu_traces_dir() -> Path:
    """tests/fixtures/gpu_traces (real GPU traces from HTA's test data, see its README), or $YOLO_MLOPS_GPU_TRACES."""
    directory = Path(os.environ.get("YOLO_MLOPS_GPU_TRACES") or GPU_TRACES)
    if not (directory / "hta_reference.json").is_file():
        pytest.fail(f"GPU trace fixtures missing at {directory.resolve()} (YOLO_MLOPS_GPU_TRACES overrides the folder)")
    return directory


@pytest.fixture(scope="session")
def hta_reference(gpu_traces_dir: Path) -> dict:
    return json.loads((gpu_traces_dir / "hta_reference.json").read_text())


@pytest.fixture(scope="session")
def cpu_trace_dir(tmp_path_factory) -> Path:
    """A real torch.profiler CPU trace: tiny CNN, DataLoader, phase labels, 3 active steps."""
    import torch
    from torch.profiler import ProfilerActivity, profile, record_function, schedule, tensorboard_trace_handler
    from torch.utils.data import DataLoader, TensorDataset

    from yolo_mlops.analysis.host import PHASE_LABEL_PREFIX

    out = tmp_path_factory.mktemp("cpu_trace")
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1),
        torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(),
        torch.nn.Linear(8, 2),
    )
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    data = TensorDataset(torch.randn(64, 3, 16, 16), torch.randint(0, 2, (64,)))
    batches = iter(DataLoader(data, batch_size=8))

    def label(phase: str):
        return record_function(PHASE_LABEL_PREFIX + phase)

    with profile(
        activities=[ProfilerActivity.CPU],
        schedule=schedule(wait=0, warmup=1, active=ACTIVE_STEPS, repeat=1),
        on_trace_ready=tensorboard_trace_handler(str(out), use_gzip=True),
        profile_memory=True,
    ) as prof:
        for _ in range(1 + ACTIVE_STEPS):
            with label("data_wait"):
                x, y = next(batches)
            with label("preprocess"):
                x = (x - x.mean()) / (x.std() + 1e-6)
            with label("forward_loss"):
                loss = torch.nn.functional.cross_entropy(model(x), y)
            with label("backward"):
                loss.backward()
            with label("optimizer_step"):
                optimizer.step()
                optimizer.zero_grad()
            prof.step()
    files = list(out.glob("*.pt.trace.json.gz"))
    assert len(files) == 1, files
    return out


@pytest.fixture(scope="session")
def cpu_trace_spec() -> tuple[tuple[str, ...], int]:
    """(phase labels, number of active steps) of the cpu_trace_dir trace."""
    return PHASES, ACTIVE_STEPS


@pytest.fixture(scope="session")
def cpu_trace_file(cpu_trace_dir: Path) -> Path:
    return next(cpu_trace_dir.glob("*.pt.trace.json.gz"))


class TraceBuilder:
    """Builds small Kineto-shaped traces whose true numbers are known by construction."""

    def __init__(self, rank: int | None = None) -> None:
        self.events: list[dict] = []
        self.rank = rank
        self._correlation = 0

    def step(self, number: int, start: float, dur: float) -> TraceBuilder:
        self.events.append(_x("user_annotation", f"ProfilerStep#{number}", start, dur, pid=1, tid=1))
        return self

    def host(self, name: str, start: float, dur: float, cat: str = "user_annotation") -> TraceBuilder:
        self.events.append(_x(cat, name, start, dur, pid=1, tid=1))
        return self

    def kernel(self, name: str, launch: float, start: float, dur: float, stream: int = 7) -> TraceBuilder:
        self._correlation += 1
        corr = self._correlation
        self.events.append(_x("cuda_runtime", "cudaLaunchKernel", launch, 2.0, pid=1, tid=1, correlation=corr))
        cat = "gpu_memcpy" if name.startswith("Memcpy") else "kernel"
        self.events.append(_x(cat, name, start, dur, pid=0, tid=stream, correlation=corr, stream=stream))
        return self

    def memory(self, ts: float, allocated: float, reserved: float, device_type: int = 1) -> TraceBuilder:
        self.events.append(memory_event(ts, allocated, reserved, size=1, addr=1, device_type=device_type))
        return self

    def document(self) -> dict:
        doc: dict = {"schemaVersion": 1}
        if self.rank is not None:
            doc["distributedInfo"] = {"backend": "nccl", "rank": self.rank, "world_size": 2}
        doc["deviceProperties"] = [{"id": 0, "name": "Test GPU", "totalGlobalMem": 16 * 2**30}]
        doc["traceEvents"] = self.events
        return doc

    def write(self, path: Path) -> Path:
        text = json.dumps(self.document())
        if path.name.endswith(".gz"):
            path.write_bytes(gzip.compress(text.encode()))
        else:
            path.write_text(text)
        return path


def _x(cat, name, ts, dur, pid, tid, correlation=None, stream=None) -> dict:
    args: dict = {"External id": 1}
    if correlation is not None:
        args["correlation"] = correlation
    if stream is not None:
        args["stream"] = stream
        args["device"] = 0
    return complete_event(cat, name, pid, tid, ts, dur, args)


@pytest.fixture
def trace_builder():
    return TraceBuilder


def _clean_context(analysis: TraceAnalysis | None, **overrides: Any) -> DiagnosisInput:
    """The diagnosis input of a healthy GPU run around `analysis` (little data wait, AMP and cudnn.benchmark on,
    memory to spare, busy SMs), with `overrides` of any of its fields."""
    values: dict[str, Any] = dict(
        analysis=analysis,
        data_wait_pct=2.0,
        device_type="cuda",
        amp=True,
        cudnn_benchmark=True,
        gpu_memory_total_gib=16.0,
        peak_memory_gib=6.0,
        sm_util_pct=85.0,
        dram_util_pct=40.0,
        batch_size=16,
        workers=8,
    )
    values.update(overrides)
    return DiagnosisInput(**values)


@pytest.fixture
def clean_context() -> Callable[..., DiagnosisInput]:
    """Builds the diagnosis input of a healthy GPU run: `clean_context(analysis, **overrides)`."""
    return _clean_context
