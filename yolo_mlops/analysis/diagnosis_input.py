"""What the diagnosis rules look at: `DiagnosisInput` (a trace analysis plus run context, None meaning 'not
known'), and the readers of it the rules share: the ranks with a GPU, the worst rank by a measure, the data-wait
share a trace holds, the data-parallel job's communication.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from yolo_mlops.analysis.communication import CommunicationAnalysis
from yolo_mlops.analysis.host import DATA_LOADER_CATEGORY
from yolo_mlops.analysis.model import GpuSummary, RankAnalysis, TraceAnalysis
from yolo_mlops.labels import PHASE_LABEL_PREFIX

DATA_WAIT_LABEL = PHASE_LABEL_PREFIX + "data_wait"
DEFAULT_WORKERS_SUGGESTION = 8  # loader workers suggested when the run context gives no count to double


@dataclass
class DiagnosisInput:
    """What the rules look at. Everything is optional; None means 'not known'."""

    analysis: TraceAnalysis | None = None
    data_wait_pct: float | None = None  # share of step time waiting for data (step timer)
    device_type: str | None = None  # "cpu" | "cuda"
    amp: bool | None = None
    cudnn_benchmark: bool | None = None
    gpu_memory_total_gib: float | None = None
    peak_memory_gib: float | None = None  # peak reserved (else allocated) GPU memory
    sm_util_pct: float | None = None  # NVML means over the run
    dram_util_pct: float | None = None
    batch_size: int | None = None
    workers: int | None = None
    step_time_ms: float | None = None  # mean step time (step timer); else the trace's
    rank_sm_clock_mhz: dict[int, float] = field(default_factory=dict)  # data-parallel jobs: each rank's NVML mean


def ranks(diagnosis_input: DiagnosisInput) -> list[RankAnalysis]:
    return diagnosis_input.analysis.ranks if diagnosis_input.analysis is not None else []


def gpu_ranks(diagnosis_input: DiagnosisInput) -> list[RankAnalysis]:
    return [r for r in ranks(diagnosis_input) if r.gpu is not None]


def gpu_of(rank: RankAnalysis) -> GpuSummary:
    """The GPU summary of a rank from `gpu_ranks`, which keeps only ranks that have one."""
    if rank.gpu is None:
        raise ValueError(f"rank {rank.rank} has no GPU summary")
    return rank.gpu


def on_gpu(diagnosis_input: DiagnosisInput) -> bool:
    if diagnosis_input.device_type is not None:
        return diagnosis_input.device_type == "cuda"
    return bool(gpu_ranks(diagnosis_input))


def communication_of(diagnosis_input: DiagnosisInput) -> CommunicationAnalysis | None:
    return diagnosis_input.analysis.communication if diagnosis_input.analysis is not None else None


def worst(rank_list: list[RankAnalysis], key) -> tuple[RankAnalysis, float] | None:
    scored = [(r, key(r)) for r in rank_list]
    scored = [(r, v) for r, v in scored if v is not None]
    return max(scored, key=lambda rv: rv[1]) if scored else None


def worst_over(rank_list: list[RankAnalysis], key, warn: float) -> tuple[RankAnalysis, float] | None:
    """The rank with the highest `key`, where that value reaches the rule's warning line; else None."""
    found = worst(rank_list, key)
    return found if found is not None and found[1] >= warn else None


def trace_data_wait_pct(rank: RankAnalysis) -> float | None:
    """The data_wait phase label when the training code emitted it, else DataLoader.__next__ time."""
    labelled = rank.host_pct(DATA_WAIT_LABEL)
    return labelled if labelled is not None else rank.host_pct(DATA_LOADER_CATEGORY)


def doubled_or(value: int | None, default: int) -> int:
    """Twice a count from the run context (workers, batch size), or `default` when it is unknown or 0."""
    return 2 * value if value else default
