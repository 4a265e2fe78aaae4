"""Diagnosis rules of the host side: the step waiting for data, the GPU idle while the host launches operators
(launch-bound), and synchronising CUDA calls inside the step. Each rule returns at most one Finding; its
thresholds are module constants, listed with their reasons in docs/analysis.md.
"""

from __future__ import annotations

from yolo_mlops.analysis import idle_attribution
from yolo_mlops.analysis.diagnosis_input import (
    DEFAULT_WORKERS_SUGGESTION,
    DiagnosisInput,
    doubled_or,
    gpu_of,
    gpu_ranks,
    on_gpu,
    ranks,
    trace_data_wait_pct,
    worst,
    worst_over,
)
from yolo_mlops.analysis.findings import MEDIUM, Finding, evidence_of, severity_at
from yolo_mlops.analysis.host import CUDA_SYNC_CATEGORY
from yolo_mlops.analysis.model import RankAnalysis
from yolo_mlops.analysis.savings import Saving, idle_saving, step_ms
from yolo_mlops.remedies import CACHE_IMAGES_IN_RAM, COMPILE_MODEL, LARGER_BATCH, MORE_LOADER_WORKERS, variant

# data-wait share of step time (%): above WARN the GPU/CPU waits on input noticeably.
DATA_WAIT_PCT_WARN = 10.0
DATA_WAIT_PCT_HIGH = 25.0
# GPU idle attributed to launch overhead (host running Python/dispatch while the GPU waits for its next
# kernel), as a share (%) of the GPU's kernel-time span.
GPU_IDLE_PCT_WARN = 20.0
GPU_IDLE_PCT_HIGH = 50.0
# Without a trace, NVML SM utilisation (%) below this means the GPU is mostly waiting.
SM_UTIL_LOW_PCT = 40.0
# Synchronising CUDA calls inside the step (% of step time).
SYNC_PCT_WARN = 1.0
SYNC_PCT_HIGH = 5.0


def _data_loader_idle_pct(rank: RankAnalysis) -> float | None:
    row = rank.idle_cause(idle_attribution.DATA_LOADER)
    return row.pct if row else None


def data_wait_high(diagnosis_input: DiagnosisInput) -> Finding | None:
    source, pct, rank = "step timer", diagnosis_input.data_wait_pct, None
    if pct is None:
        found = worst(ranks(diagnosis_input), trace_data_wait_pct)
        if found is None:
            return None
        rank, pct = found
        source = f"trace (rank {rank.rank})"
    if pct < DATA_WAIT_PCT_WARN:
        return None
    # no persistent_workers: ultralytics' InfiniteDataLoader already keeps its workers for the whole run
    variants = [
        variant(MORE_LOADER_WORKERS, doubled_or(diagnosis_input.workers, DEFAULT_WORKERS_SUGGESTION)),
        variant(CACHE_IMAGES_IN_RAM),
    ]
    idle = worst(gpu_ranks(diagnosis_input), _data_loader_idle_pct)
    evidence = evidence_of(
        data_wait_pct=pct,
        source=source,
        threshold_pct=DATA_WAIT_PCT_WARN,
        gpu_idle_data_loader_pct=None if idle is None else idle[1],
    )
    step = step_ms(diagnosis_input, rank)
    saving = None
    if step is not None:
        # The host waits pct% of each step; overlapped loading removes that wait and nothing more.
        saving = Saving(step * pct / 100, pct, "if data loading were fully overlapped with the step")
    return Finding(
        rule="data_wait_high",
        severity=severity_at(pct, DATA_WAIT_PCT_HIGH),
        title=f"{pct:.0f}% of step time is spent waiting for data",
        evidence=evidence,
        recommended_variants=variants,
        saving=saving,
    )


def host_wait_share_of_idle(rank: RankAnalysis) -> float | None:
    """The host_wait part (0..1) of the rank's GPU idle time (HTA's per-stream categories, summed over
    streams); None without idle time."""
    idle = sum(i.idle_time_us for i in rank.idle_breakdown)
    if idle <= 0:
        return None
    return sum(i.idle_time_us for i in rank.idle_breakdown if i.idle_category == "host_wait") / idle


def _launch_idle_pct(rank: RankAnalysis) -> float | None:
    row = rank.idle_cause(idle_attribution.LAUNCH_OVERHEAD)
    return row.pct if row is not None else None


def gpu_idle_host_wait(diagnosis_input: DiagnosisInput) -> Finding | None:
    """Launch-bound: GPU idle while the host runs Python/dispatch between operators. Idle the host spends
    waiting for data, in a sync, the optimizer or preprocessing belongs to those causes, not to this rule."""
    if not on_gpu(diagnosis_input):
        return None
    variants = [variant(COMPILE_MODEL), variant(LARGER_BATCH, doubled_or(diagnosis_input.batch_size, 32))]
    if not gpu_ranks(diagnosis_input):
        if diagnosis_input.sm_util_pct is None or diagnosis_input.sm_util_pct >= SM_UTIL_LOW_PCT:
            return None
        return Finding(
            rule="gpu_idle_host_wait",
            severity=MEDIUM,
            title=f"GPU SM utilisation is only {diagnosis_input.sm_util_pct:.0f}% (NVML)",
            evidence={"sm_util_pct": round(diagnosis_input.sm_util_pct, 2), "threshold_pct": SM_UTIL_LOW_PCT},
            recommended_variants=variants,
        )
    found = worst_over(gpu_ranks(diagnosis_input), _launch_idle_pct, GPU_IDLE_PCT_WARN)
    if found is None:
        return None
    rank, launch_pct = found
    return Finding(
        rule="gpu_idle_host_wait",
        severity=severity_at(launch_pct, GPU_IDLE_PCT_HIGH),
        title=f"GPU idle {launch_pct:.0f}% of the time while the host launches operators (launch-bound)",
        evidence=evidence_of(
            rank=str(rank.rank),
            gpu_idle_pct=gpu_of(rank).idle_pct,
            gpu_idle_launch_overhead_pct=launch_pct,
            threshold_pct=GPU_IDLE_PCT_WARN,
            sm_util_pct=diagnosis_input.sm_util_pct,
        ),
        recommended_variants=variants,
        saving=idle_saving(
            rank,
            idle_attribution.LAUNCH_OVERHEAD,
            "if the host queued kernels ahead of the GPU (compiled / captured graphs)",
        ),
    )


def sync_in_step(diagnosis_input: DiagnosisInput) -> Finding | None:
    found = worst_over(ranks(diagnosis_input), lambda r: r.host_pct(CUDA_SYNC_CATEGORY), SYNC_PCT_WARN)
    if found is None:
        return None
    rank, pct = found
    calls = next(c.count for c in rank.host if c.category == CUDA_SYNC_CATEGORY)
    steps = rank.step_time.count if rank.step_time else 1
    assumption = "if the step never waited for the GPU (no .item()/.cpu()/blocking copy inside it)"
    if rank.gpu is not None:
        # The host blocked in a sync is not lost time while the GPU works; the GPU idle the sync left behind is.
        saving = idle_saving(rank, idle_attribution.CUDA_SYNC, assumption)
    else:
        step = step_ms(diagnosis_input, rank)
        saving = Saving(step * pct / 100, pct, assumption) if step else None
    return Finding(
        rule="sync_in_step",
        severity=severity_at(pct, SYNC_PCT_HIGH),
        title=f"Synchronising CUDA calls take {pct:.1f}% of step time (.item(), .cpu(), blocking copies)",
        evidence=evidence_of(
            rank=str(rank.rank), sync_pct=pct, sync_calls_per_step=calls / steps, threshold_pct=SYNC_PCT_WARN
        ),
        recommended_variants=[],
        saving=saving,
    )
