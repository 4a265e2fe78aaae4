"""The trace analysis data model: what `analyze_traces` returns and the JSON it writes.

Plain dataclasses, apart from the analyzer (trace_analysis.py) and the rules that read them (diagnosis.py),
so those two import this module and not each other.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import cast

import msgspec
import numpy as np

from yolo_mlops.analysis.communication import CommunicationAnalysis
from yolo_mlops.analysis.gpu import KernelTotal, KernelTypeShare, StreamIdle, TemporalBreakdown
from yolo_mlops.analysis.host import CategoryTime
from yolo_mlops.analysis.idle_attribution import CauseTime
from yolo_mlops.analysis.memory import MemoryProfile


@dataclass
class GpuSummary:
    """HTA's temporal breakdown: shares of the span from the first kernel start to the last end."""

    idle_time_us: float
    compute_time_us: float
    non_compute_time_us: float
    kernel_time_us: float
    idle_pct: float
    compute_pct: float
    non_compute_pct: float
    kernel_count: int
    # Kernel mix over the whole window: share of summed kernel time (None for per-step summaries, and
    # when the kernels have no time to share).
    reduced_precision_kernel_pct: float | None = None
    layout_conversion_kernel_pct: float | None = None
    layout_conversion_time_us: float | None = None  # summed duration of those kernels (whole window only)

    @classmethod
    def from_breakdown(cls, b: TemporalBreakdown, kernel_count: int) -> GpuSummary:
        return cls(
            idle_time_us=b.idle_time_us,
            compute_time_us=b.compute_time_us,
            non_compute_time_us=b.non_compute_time_us,
            kernel_time_us=b.kernel_time_us,
            idle_pct=b.idle_pct,
            compute_pct=b.compute_pct,
            non_compute_pct=b.non_compute_pct,
            kernel_count=kernel_count,
        )


@dataclass
class StepSummary:
    step: int
    start_us: float
    duration_us: float
    host_us: dict[str, float]  # host category -> time in this step
    gpu: GpuSummary | None  # kernels launched from this step
    peak_allocated_bytes: float | None
    peak_reserved_bytes: float | None


@dataclass
class StepTimeStats:
    count: int
    total_us: float
    mean_us: float
    median_us: float
    min_us: float
    max_us: float


@dataclass
class HostOp:
    name: str
    time_us: float
    count: int


@dataclass
class RankAnalysis:
    rank: int
    path: str
    event_count: int
    device_name: str | None
    device_memory_total_bytes: float | None
    device_compute_capability: float | None  # e.g. 8.0 for A100, from deviceProperties
    step_time: StepTimeStats | None
    host: list[CategoryTime]  # over all profiled steps; pct of total step time
    gpu: GpuSummary | None  # None for CPU-only traces
    gpu_window: str | None
    kernel_types: list[KernelTypeShare]
    idle_breakdown: list[StreamIdle]
    top_kernels: list[KernelTotal]
    top_host_ops: list[HostOp]
    memory: MemoryProfile | None
    steps: list[StepSummary] = field(default_factory=list)
    # GPU idle time of the window by host cause (every cause listed; empty on CPU traces)
    gpu_idle_by_cause: list[CauseTime] = field(default_factory=list)
    # step time, each instant to one phase label (or built-in category) or `between_phases`
    step_by_phase: list[CauseTime] = field(default_factory=list)
    # the profiled steps the GPU window covers (HTA drops the last of two or more) and their total time
    window_steps: int = 0
    window_step_us: float = 0.0
    # profiled steps (ProfilerStep numbers) that held an epoch boundary: the work between two epochs (validation,
    # the checkpoint, the next epoch's start) is inside them (analysis/step_activity.py)
    boundary_steps: list[int] = field(default_factory=list)

    def idle_cause(self, cause: str) -> CauseTime | None:
        return next((c for c in self.gpu_idle_by_cause if c.cause == cause), None)

    def host_pct(self, category: str) -> float | None:
        for c in self.host:
            if c.category == category:
                return c.pct
        return None


@dataclass
class RankSpread:
    """Straggler view across ranks: the spread of mean step time."""

    step_time_mean_us_by_rank: dict[int, float]
    spread_us: float
    spread_pct: float  # of the fastest rank's mean step time
    slowest_rank: int
    fastest_rank: int


@dataclass
class TraceAnalysis:
    source: str
    ranks: list[RankAnalysis]
    spread: RankSpread | None
    communication: CommunicationAnalysis | None = None  # data-parallel jobs: collectives per rank, waits
    warnings: list[str] = field(default_factory=list)  # parts of the traces left out of the analysis, and why

    def to_dict(self) -> dict:
        """Plain JSON values; rank keys become strings (JSON object keys)."""
        return cast(dict, to_builtins(self))  # a dataclass converts to a dict

    def to_json(self, indent: int = 2) -> str:
        return json_text(self.to_dict(), indent)


def to_builtins(value) -> object:
    """Dataclasses (recursively), numpy scalars and int dict keys as JSON-ready builtins (msgspec, in C: far
    faster than dataclasses.asdict on an analysis; docs/benchmarks.md, "Figures behind code choices")."""
    return msgspec.to_builtins(value, str_keys=True, enc_hook=_numpy_scalar)


def json_text(value, indent: int = 2) -> str:
    """Indented JSON of builtins (msgspec's encoder: json.dumps with indent takes the pure-Python path)."""
    return msgspec.json.format(msgspec.json.encode(value, enc_hook=_numpy_scalar), indent=indent).decode()


def _numpy_scalar(value):
    if isinstance(value, np.bool_):
        return bool(value)
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.floating):
        return float(value)
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")
