"""Diagnosis: rules over a trace analysis plus run context, each yielding at most one Finding.

Every threshold is a module constant, listed with its reason in docs/analysis.md. A rule fires only
on evidence it actually has: unknown context (None) never fires a rule, so a CPU-only run or a run
without NVML gets fewer findings, never invented ones. Recommended variants are the names the
sweep engine implements (workers_<n>, pin_memory_off, cache_ram, batch_<n>,
compile, amp_bf16, amp_fp16, cudnn_benchmark, channels_last, tf32).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from yolo_mlops.analysis.host import CUDA_SYNC_CATEGORY, DATA_LOADER_CATEGORY, PHASE_LABEL_PREFIX
from yolo_mlops.analysis.trace_analysis import RankAnalysis, TraceAnalysis

HIGH, MEDIUM, LOW = "high", "medium", "low"

# data-wait share of step time (%): above WARN the GPU/CPU waits on input noticeably.
DATA_WAIT_PCT_WARN = 10.0
DATA_WAIT_PCT_HIGH = 25.0
DEFAULT_WORKERS_SUGGESTION = 8
# GPU idle share of its busy span (%), and the part of that idle time that is host_wait.
GPU_IDLE_PCT_WARN = 20.0
GPU_IDLE_PCT_HIGH = 50.0
HOST_WAIT_SHARE_OF_IDLE_MIN = 0.5
# Without a trace, NVML SM utilisation (%) below this means the GPU is mostly waiting.
SM_UTIL_LOW_PCT = 40.0
# Reduced-precision kernels below this share (%) of kernel time: the run computes in fp32.
REDUCED_PRECISION_PCT_MIN = 1.0
BF16_MIN_COMPUTE_CAPABILITY = 8.0  # Ampere and newer have bf16 and TF32 tensor cores
# NCHW<->NHWC conversion kernels above this share (%) of kernel time: use channels_last.
LAYOUT_CONVERSION_PCT_WARN = 2.0
# Synchronising CUDA calls inside the step (% of step time).
SYNC_PCT_WARN = 1.0
SYNC_PCT_HIGH = 5.0
# Communication not overlapped with compute, as a share (%) of GPU busy time.
COMMUNICATION_PCT_WARN = 20.0
COMMUNICATION_PCT_HIGH = 40.0
# Peak GPU memory as a share (%) of device memory.
MEMORY_NEAR_CAPACITY_PCT = 90.0

DATA_WAIT_LABEL = PHASE_LABEL_PREFIX + "data_wait"


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


@dataclass
class Finding:
    rule: str
    severity: str  # high | medium | low
    title: str
    evidence: dict[str, float | str]
    recommended_variants: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)


def diagnose(inp: DiagnosisInput) -> list[Finding]:
    findings = [rule(inp) for rule in RULES]
    order = {HIGH: 0, MEDIUM: 1, LOW: 2}
    return sorted((f for f in findings if f is not None), key=lambda f: order[f.severity])


# ------------------------------------------------------------------------------------- helpers


def _ranks(inp: DiagnosisInput) -> list[RankAnalysis]:
    return inp.analysis.ranks if inp.analysis is not None else []


def _gpu_ranks(inp: DiagnosisInput) -> list[RankAnalysis]:
    return [r for r in _ranks(inp) if r.gpu is not None]


def _on_gpu(inp: DiagnosisInput) -> bool:
    if inp.device_type is not None:
        return inp.device_type == "cuda"
    return bool(_gpu_ranks(inp))


def _worst(ranks: list[RankAnalysis], key) -> tuple[RankAnalysis, float] | None:
    scored = [(r, key(r)) for r in ranks]
    scored = [(r, v) for r, v in scored if v is not None]
    return max(scored, key=lambda rv: rv[1]) if scored else None


def _severity(value: float, high: float) -> str:
    return HIGH if value >= high else MEDIUM


def _double(value: int | None, default: int) -> int:
    return 2 * value if value else default


# --------------------------------------------------------------------------------------- rules


def _trace_data_wait_pct(rank: RankAnalysis) -> float | None:
    """The data_wait phase label when the training code emitted it, else DataLoader.__next__ time."""
    labelled = rank.host_pct(DATA_WAIT_LABEL)
    return labelled if labelled is not None else rank.host_pct(DATA_LOADER_CATEGORY)


def data_wait_high(inp: DiagnosisInput) -> Finding | None:
    source, pct = "step timer", inp.data_wait_pct
    if pct is None:
        worst = _worst(_ranks(inp), _trace_data_wait_pct)
        if worst is None:
            return None
        source, pct = f"trace (rank {worst[0].rank})", worst[1]
    if pct < DATA_WAIT_PCT_WARN:
        return None
    # no persistent_workers: ultralytics' InfiniteDataLoader already keeps its workers for the whole run
    variants = [f"workers_{_double(inp.workers, DEFAULT_WORKERS_SUGGESTION)}", "cache_ram"]
    return Finding(
        rule="data_wait_high",
        severity=_severity(pct, DATA_WAIT_PCT_HIGH),
        title=f"{pct:.0f}% of step time is spent waiting for data",
        evidence={"data_wait_pct": round(pct, 2), "source": source, "threshold_pct": DATA_WAIT_PCT_WARN},
        recommended_variants=variants,
    )


def host_wait_share_of_idle(rank: RankAnalysis) -> float | None:
    """The host_wait part (0..1) of the rank's GPU idle time, summed over streams; None without idle time."""
    idle = sum(i.idle_time_us for i in rank.idle_breakdown)
    if idle <= 0:
        return None
    return sum(i.idle_time_us for i in rank.idle_breakdown if i.idle_category == "host_wait") / idle


def gpu_idle_host_wait(inp: DiagnosisInput) -> Finding | None:
    if not _on_gpu(inp):
        return None
    worst = _worst(_gpu_ranks(inp), lambda r: r.gpu.idle_pct)
    variants = ["compile", f"batch_{_double(inp.batch_size, 32)}"]
    if worst is None:
        if inp.sm_util_pct is None or inp.sm_util_pct >= SM_UTIL_LOW_PCT:
            return None
        return Finding(
            rule="gpu_idle_host_wait",
            severity=MEDIUM,
            title=f"GPU SM utilisation is only {inp.sm_util_pct:.0f}% (NVML)",
            evidence={"sm_util_pct": round(inp.sm_util_pct, 2), "threshold_pct": SM_UTIL_LOW_PCT},
            recommended_variants=variants,
        )
    rank, idle_pct = worst
    if idle_pct < GPU_IDLE_PCT_WARN:
        return None
    share = host_wait_share_of_idle(rank)
    if share is None or share < HOST_WAIT_SHARE_OF_IDLE_MIN:
        return None
    evidence: dict[str, float | str] = {
        "rank": str(rank.rank),
        "gpu_idle_pct": round(idle_pct, 2),
        "host_wait_share_of_idle": round(share, 3),
        "threshold_pct": GPU_IDLE_PCT_WARN,
    }
    if inp.sm_util_pct is not None:
        evidence["sm_util_pct"] = round(inp.sm_util_pct, 2)
    return Finding(
        rule="gpu_idle_host_wait",
        severity=_severity(idle_pct, GPU_IDLE_PCT_HIGH),
        title=f"GPU idle {idle_pct:.0f}% of the time, mostly waiting for the host to launch work",
        evidence=evidence,
        recommended_variants=variants,
    )


def no_reduced_precision(inp: DiagnosisInput) -> Finding | None:
    if not _on_gpu(inp) or inp.amp is True:
        return None
    ranks = [r for r in _gpu_ranks(inp) if r.gpu.reduced_precision_kernel_pct is not None]
    if not ranks:
        if inp.amp is False:  # no (usable) trace: the configuration alone says fp32
            return Finding("no_reduced_precision", MEDIUM, "Training runs in fp32 (AMP off)",
                           {"amp": "off"}, ["amp_bf16", "amp_fp16"])
        return None
    rank = min(ranks, key=lambda r: r.gpu.reduced_precision_kernel_pct)
    pct = rank.gpu.reduced_precision_kernel_pct
    if pct >= REDUCED_PRECISION_PCT_MIN:
        return None
    capability = rank.device_compute_capability
    modern = capability is None or capability >= BF16_MIN_COMPUTE_CAPABILITY
    variants = ["amp_bf16", "amp_fp16", "tf32"] if modern else ["amp_fp16"]
    return Finding(
        rule="no_reduced_precision",
        severity=MEDIUM,
        title="No fp16/bf16 kernels: the GPU computes in fp32",
        evidence={
            "reduced_precision_kernel_pct": round(pct, 3),
            "threshold_pct": REDUCED_PRECISION_PCT_MIN,
            "compute_capability": str(capability) if capability is not None else "unknown",
        },
        recommended_variants=variants,
    )


def cudnn_autotune_off(inp: DiagnosisInput) -> Finding | None:
    if not _on_gpu(inp) or inp.cudnn_benchmark is not False:
        return None
    return Finding(
        rule="cudnn_autotune_off",
        severity=LOW,
        title="cudnn.benchmark is off: cuDNN does not pick the fastest convolution algorithms",
        evidence={"cudnn_benchmark": "off"},
        recommended_variants=["cudnn_benchmark"],
    )


def layout_conversions(inp: DiagnosisInput) -> Finding | None:
    worst = _worst(_gpu_ranks(inp), lambda r: r.gpu.layout_conversion_kernel_pct)
    if worst is None or worst[1] < LAYOUT_CONVERSION_PCT_WARN:
        return None
    return Finding(
        rule="layout_conversions",
        severity=LOW,
        title=f"{worst[1]:.1f}% of kernel time converts tensors between NCHW and NHWC",
        evidence={"rank": str(worst[0].rank), "layout_conversion_kernel_pct": round(worst[1], 2),
                  "threshold_pct": LAYOUT_CONVERSION_PCT_WARN},
        recommended_variants=["channels_last"],
    )


def sync_in_step(inp: DiagnosisInput) -> Finding | None:
    worst = _worst(_ranks(inp), lambda r: r.host_pct(CUDA_SYNC_CATEGORY))
    if worst is None or worst[1] < SYNC_PCT_WARN:
        return None
    rank, pct = worst
    calls = next(c.count for c in rank.host if c.category == CUDA_SYNC_CATEGORY)
    steps = rank.step_time.count if rank.step_time else 1
    return Finding(
        rule="sync_in_step",
        severity=_severity(pct, SYNC_PCT_HIGH),
        title=f"Synchronising CUDA calls take {pct:.1f}% of step time (.item(), .cpu(), blocking copies)",
        evidence={"rank": str(rank.rank), "sync_pct": round(pct, 2), "sync_calls_per_step": round(calls / steps, 2),
                  "threshold_pct": SYNC_PCT_WARN},
        recommended_variants=[],
    )


def _kernel_type_pct(rank: RankAnalysis, counts) -> float | None:
    """Share (%) of GPU busy time in the kernel-type rows whose label satisfies counts."""
    busy = sum(k.time_us for k in rank.kernel_types)
    if busy <= 0:
        return None
    return 100.0 * sum(k.time_us for k in rank.kernel_types if counts(k.kernel_type)) / busy


def communication_pct(rank: RankAnalysis) -> float | None:
    """Communication, overlapped or not, as % of GPU busy time."""
    return _kernel_type_pct(rank, lambda label: "COMMUNICATION" in label)


def exposed_communication_pct(rank: RankAnalysis) -> float | None:
    """Communication not overlapped with computation, as % of GPU busy time."""
    return _kernel_type_pct(rank, lambda label: "COMMUNICATION" in label and "COMPUTATION" not in label)


def communication_high(inp: DiagnosisInput) -> Finding | None:
    worst = _worst(_gpu_ranks(inp), exposed_communication_pct)
    if worst is None or worst[1] < COMMUNICATION_PCT_WARN:
        return None
    rank, pct = worst
    return Finding(
        rule="communication_high",
        severity=_severity(pct, COMMUNICATION_PCT_HIGH),
        title=f"{pct:.0f}% of GPU busy time is communication not overlapped with compute",
        evidence={"rank": str(rank.rank), "exposed_communication_pct": round(pct, 2),
                  "threshold_pct": COMMUNICATION_PCT_WARN},
        recommended_variants=[f"batch_{_double(inp.batch_size, 32)}"],
    )


def memory_growth(inp: DiagnosisInput) -> Finding | None:
    rising = [r for r in _ranks(inp) if r.memory is not None and r.memory.steadily_rising]
    if not rising:
        return None
    rank = max(rising, key=lambda r: r.memory.growth_bytes_per_step or 0.0)
    return Finding(
        rule="memory_growth",
        severity=MEDIUM,
        title="Allocated memory rises every step (a tensor kept alive across steps?)",
        evidence={"rank": str(rank.rank), "device": rank.memory.device,
                  "growth_mib_per_step": round((rank.memory.growth_bytes_per_step or 0.0) / 2**20, 2)},
        recommended_variants=[],
    )


def memory_near_capacity(inp: DiagnosisInput) -> Finding | None:
    peak, total, source = inp.peak_memory_gib, inp.gpu_memory_total_gib, "run context"
    if peak is None or total is None:
        for r in _gpu_ranks(inp):
            if r.memory is not None and r.memory.device == "cuda" and r.device_memory_total_bytes:
                trace_peak = (r.memory.peak_reserved_bytes or r.memory.peak_allocated_bytes) / 2**30
                if peak is None or trace_peak > peak:
                    peak, total, source = trace_peak, r.device_memory_total_bytes / 2**30, f"trace (rank {r.rank})"
    if peak is None or not total:
        return None
    pct = 100.0 * peak / total
    if pct < MEMORY_NEAR_CAPACITY_PCT:
        return None
    smaller_batch = f"batch_{max(1, inp.batch_size // 2)}" if inp.batch_size else "batch_8"
    variants = [smaller_batch] if inp.amp is True else [smaller_batch, "amp_bf16"]
    return Finding(
        rule="memory_near_capacity",
        severity=HIGH,
        title=f"Peak GPU memory is {pct:.0f}% of the device's {total:.1f} GiB",
        evidence={"peak_memory_gib": round(peak, 3), "gpu_memory_total_gib": round(total, 3),
                  "memory_pct": round(pct, 2), "source": source, "threshold_pct": MEMORY_NEAR_CAPACITY_PCT},
        recommended_variants=variants,
    )


RULES = (
    data_wait_high,
    gpu_idle_host_wait,
    no_reduced_precision,
    cudnn_autotune_off,
    layout_conversions,
    sync_in_step,
    communication_high,
    memory_growth,
    memory_near_capacity,
)
