"""Diagnosis: rules over a trace analysis plus run context, each yielding at most one Finding.

Every threshold is a module constant, listed with its reason in docs/analysis.md. A rule fires only
on evidence it actually has: unknown context (None) never fires a rule, so a CPU-only run or a run
without NVML gets fewer findings, never invented ones. Recommended variants are the names the
sweep engine implements (workers_<n>, pin_memory_off, cache_ram, batch_<n>,
compile, amp_bf16, amp_fp16, cudnn_benchmark, channels_last, tf32).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import cast

from yolo_mlops.analysis import idle_attribution
from yolo_mlops.analysis.communication import CommunicationAnalysis, stall_text
from yolo_mlops.analysis.host import CUDA_SYNC_CATEGORY, DATA_LOADER_CATEGORY
from yolo_mlops.analysis.model import GpuSummary, RankAnalysis, TraceAnalysis, to_builtins
from yolo_mlops.analysis.step_activity import ACTIVITY_TEXT, DATA_WAIT
from yolo_mlops.labels import PHASE_LABEL_PREFIX

HIGH, MEDIUM, LOW = "high", "medium", "low"

# data-wait share of step time (%): above WARN the GPU/CPU waits on input noticeably.
DATA_WAIT_PCT_WARN = 10.0
DATA_WAIT_PCT_HIGH = 25.0
DEFAULT_WORKERS_SUGGESTION = 8
# GPU idle attributed to launch overhead (host running Python/dispatch while the GPU waits for its next
# kernel), as a share (%) of the GPU's kernel-time span.
GPU_IDLE_PCT_WARN = 20.0
GPU_IDLE_PCT_HIGH = 50.0
# Mixed precision: assumed speed-up of the fp32 compute kernels (tensor cores; elementwise kernels gain less).
AMP_COMPUTE_SPEEDUP = 2.0
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
# Data-parallel jobs: collective time not overlapped with the rank's compute (% of step time), and data-wait
# shares that differ across ranks by more than this many points of step time.
DDP_EXPOSED_PCT_WARN = 10.0
DDP_EXPOSED_PCT_HIGH = 30.0
DDP_DATA_WAIT_IMBALANCE_PTS = 10.0
# a straggler whose mean SM clock is below this fraction of its peers' is slowed by its clocks
DDP_SLOW_CLOCK_FRACTION = 0.95
# the sweep variants that cut or hide DDP's gradient all-reduce (sweeps/variants.py)
DDP_COMMUNICATION_VARIANTS = ["ddp_no_sync_accumulate", "ddp_bucket_100mb", "ddp_grad_bucket_view"]
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
    step_time_ms: float | None = None  # mean step time (step timer); else the trace's
    rank_sm_clock_mhz: dict[int, float] = field(default_factory=dict)  # data-parallel jobs: each rank's NVML mean


@dataclass
class Saving:
    """Upper bound of the step time a finding's fix could save, from the measured time it accounts for."""

    ms_per_step: float
    pct_of_step: float
    assumption: str  # the condition under which the whole bound is saved

    def text(self) -> str:
        return f"saves up to {self.ms_per_step:.1f} ms/step ({self.pct_of_step:.0f}% of step) {self.assumption}"


@dataclass
class Finding:
    rule: str
    severity: str  # high | medium | low
    title: str
    evidence: dict[str, float | str]
    recommended_variants: list[str] = field(default_factory=list)
    saving: Saving | None = None  # None: the trace holds no time this finding accounts for
    no_saving_reason: str | None = None  # why there is no saving, when the finding costs no step time

    def to_dict(self) -> dict:
        return cast(dict, to_builtins(self))  # a dataclass converts to a dict

    def line(self) -> str:
        """One line: severity, title, what it could save, what to try."""
        saving = self.saving.text() if self.saving else (self.no_saving_reason or "saving not estimable from the trace")
        variants = ", ".join(self.recommended_variants) or "a code change"
        return f"[{self.severity}] {self.title}; {saving}; try: {variants}"


SEVERITY_ORDER = {HIGH: 0, MEDIUM: 1, LOW: 2}


def diagnose(diagnosis_input: DiagnosisInput) -> list[Finding]:
    """Every rule's finding, largest estimated saving first (unestimated last, then by severity)."""
    findings = [f for f in (rule(diagnosis_input) for rule in RULES) if f is not None]
    return sorted(findings, key=lambda f: (-(f.saving.ms_per_step if f.saving else -1.0), SEVERITY_ORDER[f.severity]))


def headline(findings: list[Finding]) -> str:
    """The run's verdict in one line: the top finding and what fixing it could save."""
    if not findings:
        return "No finding: nothing stands out."
    return f"Top finding: {findings[0].line()}"


# ------------------------------------------------------------------------------------- helpers


def _ranks(diagnosis_input: DiagnosisInput) -> list[RankAnalysis]:
    return diagnosis_input.analysis.ranks if diagnosis_input.analysis is not None else []


def _gpu_ranks(diagnosis_input: DiagnosisInput) -> list[RankAnalysis]:
    return [r for r in _ranks(diagnosis_input) if r.gpu is not None]


def _gpu(rank: RankAnalysis) -> GpuSummary:
    """The GPU summary of a rank from `_gpu_ranks`, which keeps only ranks that have one."""
    if rank.gpu is None:
        raise ValueError(f"rank {rank.rank} has no GPU summary")
    return rank.gpu


def _on_gpu(diagnosis_input: DiagnosisInput) -> bool:
    if diagnosis_input.device_type is not None:
        return diagnosis_input.device_type == "cuda"
    return bool(_gpu_ranks(diagnosis_input))


def _worst(ranks: list[RankAnalysis], key) -> tuple[RankAnalysis, float] | None:
    scored = [(r, key(r)) for r in ranks]
    scored = [(r, v) for r, v in scored if v is not None]
    return max(scored, key=lambda rv: rv[1]) if scored else None


def _worst_over(ranks: list[RankAnalysis], key, warn: float) -> tuple[RankAnalysis, float] | None:
    """The rank with the highest `key`, where that value reaches the rule's warning line; else None."""
    worst = _worst(ranks, key)
    return worst if worst is not None and worst[1] >= warn else None


def _severity(value: float, high: float) -> str:
    return HIGH if value >= high else MEDIUM


def _evidence(**values: float | str | None) -> dict[str, float | str]:
    """A finding's evidence: the values measured, floats to 2 decimals; those not measured (None) left out."""
    return {k: round(v, 2) if isinstance(v, float) else v for k, v in values.items() if v is not None}


def _step_ms(diagnosis_input: DiagnosisInput, rank: RankAnalysis | None = None) -> float | None:
    """Mean step time from the same source as the share it multiplies: the rank's trace steps for a share
    measured on that rank, else the step timer's, else the slowest rank's."""
    if rank is not None and rank.step_time is not None:
        return rank.step_time.mean_us / 1000
    if diagnosis_input.step_time_ms:
        return diagnosis_input.step_time_ms
    timed = [r.step_time.mean_us / 1000 for r in _ranks(diagnosis_input) if r.step_time is not None]
    return max(timed) if timed else None


def _idle_saving(rank: RankAnalysis, cause: str, assumption: str) -> Saving | None:
    row = rank.idle_cause(cause)
    if row is None or row.ms_per_step is None or row.step_pct is None:  # no steps: no per-step saving
        return None
    return Saving(row.ms_per_step, row.step_pct, assumption)


def _doubled_or(value: int | None, default: int) -> int:
    return 2 * value if value else default


# --------------------------------------------------------------------------------------- rules


def _trace_data_wait_pct(rank: RankAnalysis) -> float | None:
    """The data_wait phase label when the training code emitted it, else DataLoader.__next__ time."""
    labelled = rank.host_pct(DATA_WAIT_LABEL)
    return labelled if labelled is not None else rank.host_pct(DATA_LOADER_CATEGORY)


def _data_loader_idle_pct(rank: RankAnalysis) -> float | None:
    row = rank.idle_cause(idle_attribution.DATA_LOADER)
    return row.pct if row else None


def data_wait_high(diagnosis_input: DiagnosisInput) -> Finding | None:
    source, pct, rank = "step timer", diagnosis_input.data_wait_pct, None
    if pct is None:
        worst = _worst(_ranks(diagnosis_input), _trace_data_wait_pct)
        if worst is None:
            return None
        rank, pct = worst
        source = f"trace (rank {rank.rank})"
    if pct < DATA_WAIT_PCT_WARN:
        return None
    # no persistent_workers: ultralytics' InfiniteDataLoader already keeps its workers for the whole run
    variants = [f"workers_{_doubled_or(diagnosis_input.workers, DEFAULT_WORKERS_SUGGESTION)}", "cache_ram"]
    idle = _worst(_gpu_ranks(diagnosis_input), _data_loader_idle_pct)
    evidence = _evidence(
        data_wait_pct=pct,
        source=source,
        threshold_pct=DATA_WAIT_PCT_WARN,
        gpu_idle_data_loader_pct=None if idle is None else idle[1],
    )
    step_ms = _step_ms(diagnosis_input, rank)
    saving = None
    if step_ms is not None:
        # The host waits pct% of each step; overlapped loading removes that wait and nothing more.
        saving = Saving(step_ms * pct / 100, pct, "if data loading were fully overlapped with the step")
    return Finding(
        rule="data_wait_high",
        severity=_severity(pct, DATA_WAIT_PCT_HIGH),
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
    if not _on_gpu(diagnosis_input):
        return None
    variants = ["compile", f"batch_{_doubled_or(diagnosis_input.batch_size, 32)}"]
    if not _gpu_ranks(diagnosis_input):
        if diagnosis_input.sm_util_pct is None or diagnosis_input.sm_util_pct >= SM_UTIL_LOW_PCT:
            return None
        return Finding(
            rule="gpu_idle_host_wait",
            severity=MEDIUM,
            title=f"GPU SM utilisation is only {diagnosis_input.sm_util_pct:.0f}% (NVML)",
            evidence={"sm_util_pct": round(diagnosis_input.sm_util_pct, 2), "threshold_pct": SM_UTIL_LOW_PCT},
            recommended_variants=variants,
        )
    worst = _worst_over(_gpu_ranks(diagnosis_input), _launch_idle_pct, GPU_IDLE_PCT_WARN)
    if worst is None:
        return None
    rank, launch_pct = worst
    return Finding(
        rule="gpu_idle_host_wait",
        severity=_severity(launch_pct, GPU_IDLE_PCT_HIGH),
        title=f"GPU idle {launch_pct:.0f}% of the time while the host launches operators (launch-bound)",
        evidence=_evidence(
            rank=str(rank.rank),
            gpu_idle_pct=_gpu(rank).idle_pct,
            gpu_idle_launch_overhead_pct=launch_pct,
            threshold_pct=GPU_IDLE_PCT_WARN,
            sm_util_pct=diagnosis_input.sm_util_pct,
        ),
        recommended_variants=variants,
        saving=_idle_saving(
            rank,
            idle_attribution.LAUNCH_OVERHEAD,
            "if the host queued kernels ahead of the GPU (compiled / captured graphs)",
        ),
    )


def no_reduced_precision(diagnosis_input: DiagnosisInput) -> Finding | None:
    if not _on_gpu(diagnosis_input) or diagnosis_input.amp is True:
        return None
    measured = [
        (r, r.gpu.reduced_precision_kernel_pct)
        for r in _ranks(diagnosis_input)
        if r.gpu is not None and r.gpu.reduced_precision_kernel_pct is not None
    ]
    if not measured:
        if diagnosis_input.amp is False:  # no (usable) trace: the configuration alone says fp32
            return Finding(
                "no_reduced_precision",
                MEDIUM,
                "Training runs in fp32 (AMP off)",
                {"amp": "off"},
                ["amp_bf16", "amp_fp16"],
                saving=None,
            )
        return None
    rank, pct = min(measured, key=lambda rank_pct: rank_pct[1])
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
        saving=_per_step(
            rank,
            _gpu(rank).compute_time_us * (1 - 1 / AMP_COMPUTE_SPEEDUP),
            f"if mixed precision ran the fp32 compute kernels {AMP_COMPUTE_SPEEDUP:g}x faster",
        ),
    )


def _per_step(rank: RankAnalysis, window_us: float, assumption: str) -> Saving | None:
    """A time measured over the rank's GPU window as a saving per step of that window."""
    if rank.window_steps <= 0 or rank.window_step_us <= 0:
        return None
    return Saving(window_us / 1000 / rank.window_steps, 100.0 * window_us / rank.window_step_us, assumption)


def cudnn_autotune_off(diagnosis_input: DiagnosisInput) -> Finding | None:
    if not _on_gpu(diagnosis_input) or diagnosis_input.cudnn_benchmark is not False:
        return None
    return Finding(
        rule="cudnn_autotune_off",
        severity=LOW,
        title="cudnn.benchmark is off: cuDNN does not pick the fastest convolution algorithms",
        evidence={"cudnn_benchmark": "off"},
        recommended_variants=["cudnn_benchmark"],
    )


def layout_conversions(diagnosis_input: DiagnosisInput) -> Finding | None:
    worst = _worst_over(
        _gpu_ranks(diagnosis_input), lambda r: r.gpu.layout_conversion_kernel_pct, LAYOUT_CONVERSION_PCT_WARN
    )
    if worst is None:
        return None
    rank, pct = worst
    return Finding(
        rule="layout_conversions",
        severity=LOW,
        title=f"{pct:.1f}% of kernel time converts tensors between NCHW and NHWC",
        evidence=_evidence(
            rank=str(rank.rank), layout_conversion_kernel_pct=pct, threshold_pct=LAYOUT_CONVERSION_PCT_WARN
        ),
        recommended_variants=["channels_last"],
        # conversion kernels may overlap other streams' work: their summed time bounds what removing them saves
        saving=_per_step(
            rank, _gpu(rank).layout_conversion_time_us or 0.0, "if channels_last removed every conversion kernel"
        ),
    )


def sync_in_step(diagnosis_input: DiagnosisInput) -> Finding | None:
    worst = _worst_over(_ranks(diagnosis_input), lambda r: r.host_pct(CUDA_SYNC_CATEGORY), SYNC_PCT_WARN)
    if worst is None:
        return None
    rank, pct = worst
    calls = next(c.count for c in rank.host if c.category == CUDA_SYNC_CATEGORY)
    steps = rank.step_time.count if rank.step_time else 1
    assumption = "if the step never waited for the GPU (no .item()/.cpu()/blocking copy inside it)"
    if rank.gpu is not None:
        # The host blocked in a sync is not lost time while the GPU works; the GPU idle the sync left behind is.
        saving = _idle_saving(rank, idle_attribution.CUDA_SYNC, assumption)
    else:
        step_ms = _step_ms(diagnosis_input, rank)
        saving = Saving(step_ms * pct / 100, pct, assumption) if step_ms else None
    return Finding(
        rule="sync_in_step",
        severity=_severity(pct, SYNC_PCT_HIGH),
        title=f"Synchronising CUDA calls take {pct:.1f}% of step time (.item(), .cpu(), blocking copies)",
        evidence=_evidence(
            rank=str(rank.rank), sync_pct=pct, sync_calls_per_step=calls / steps, threshold_pct=SYNC_PCT_WARN
        ),
        recommended_variants=[],
        saving=saving,
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


def communication_high(diagnosis_input: DiagnosisInput) -> Finding | None:
    worst = _worst_over(_gpu_ranks(diagnosis_input), exposed_communication_pct, COMMUNICATION_PCT_WARN)
    if worst is None:
        return None
    rank, pct = worst
    return Finding(
        rule="communication_high",
        severity=_severity(pct, COMMUNICATION_PCT_HIGH),
        title=f"{pct:.0f}% of GPU busy time is communication not overlapped with compute",
        evidence=_evidence(rank=str(rank.rank), exposed_communication_pct=pct, threshold_pct=COMMUNICATION_PCT_WARN),
        recommended_variants=[f"batch_{_doubled_or(diagnosis_input.batch_size, 32)}"],
        saving=_per_step(
            rank,
            sum(
                k.time_us
                for k in rank.kernel_types
                if "COMMUNICATION" in k.kernel_type and "COMPUTATION" not in k.kernel_type
            ),
            "if communication were fully overlapped with compute",
        ),
    )


def _communication(diagnosis_input: DiagnosisInput) -> CommunicationAnalysis | None:
    return diagnosis_input.analysis.communication if diagnosis_input.analysis is not None else None


def ddp_exposed_communication(diagnosis_input: DiagnosisInput) -> Finding | None:
    comm = _communication(diagnosis_input)
    if comm is None or comm.backend == "nccl":
        return None  # NCCL kernels: communication_high judges them as HTA does, against GPU busy time

    # time a rank waits inside a collective for a slower peer is the straggler's cost (ddp_straggler), not the
    # transfer's: what no compute hides and no waiting explains is what hiding or skipping collectives saves;
    # collectives found from host calls only have no exposed time to judge (None: not measured)
    def transfer_us(r) -> float:
        if r.exposed_time_us is None:
            return 0.0
        return max(r.exposed_time_us - (r.wait_time_us or 0.0), 0.0)

    rank = max(comm.ranks, key=transfer_us)
    pct = 100.0 * transfer_us(rank) / rank.step_time_us if rank.step_time_us > 0 else 0.0
    if pct < DDP_EXPOSED_PCT_WARN or rank.steps <= 0:
        return None
    return Finding(
        rule="ddp_exposed_communication",
        severity=_severity(pct, DDP_EXPOSED_PCT_HIGH),
        title=f"{pct:.0f}% of rank {rank.rank}'s step is gradient communication ({comm.backend}) that no compute hides",
        evidence=_evidence(
            rank=str(rank.rank),
            backend=comm.backend,
            exposed_pct=rank.exposed_pct,
            exposed_not_waiting_pct=pct,
            wait_pct=rank.wait_pct or 0.0,
            collective_pct=rank.collective_pct,
            collective_calls=rank.collective_calls,
            threshold_pct=DDP_EXPOSED_PCT_WARN,
            calls_per_optimizer_step=rank.calls_per_optimizer_step,
        ),
        recommended_variants=list(DDP_COMMUNICATION_VARIANTS),
        saving=Saving(
            transfer_us(rank) / 1000 / rank.steps,
            pct,
            "if the collectives were hidden behind compute or skipped on accumulated micro-batches",
        ),
    )


def ddp_straggler(diagnosis_input: DiagnosisInput) -> Finding | None:
    """The rank the others wait for step after step (communication.judge_steps), with the evidence of its own
    trace: what it did more than its peers in the steady steps it held back (its data wait, its compute), and on
    GPUs its clocks against its peers'. Stalls (a step held back once, an epoch boundary) are named apart."""
    comm = _communication(diagnosis_input)
    if comm is None or comm.straggler is None:
        return None
    straggler = comm.straggler
    slow, lost_ms = straggler.rank, straggler.median_lead_ms
    by_rank = {r.rank: r for r in _ranks(diagnosis_input)}
    evidence: dict[str, float | str] = {
        "rank": str(slow),
        "others_wait_ms_per_step": round(lost_ms, 2),
        "steps_held": f"{straggler.steps_held} of {straggler.steady_steps} steady steps",
        "wait_spread_pct": round(comm.wait_spread_pct or 0.0, 2),
    }
    extra = straggler.extra_ms
    top = max((name for name in extra if name != DATA_WAIT), key=extra.__getitem__, default=None)
    own = ""
    if top is not None and extra[top] > 0:
        own = f"{ACTIVITY_TEXT.get(top, top)}: {extra[top]:+.0f} ms/step against its peers; "
    cause, variants = f"its own compute ({own}compare its operators and clocks with its peers')", []
    if DATA_WAIT in extra:
        evidence["extra_data_wait_ms_per_step"] = round(extra[DATA_WAIT], 2)
        if extra[DATA_WAIT] >= 0.5 * lost_ms:
            cause = f"its data loading ({extra[DATA_WAIT]:.0f} ms/step more data wait than its peers)"
            variants = [f"workers_{DEFAULT_WORKERS_SUGGESTION}", "cache_ram"]
    if top is not None:
        evidence[f"extra_{top}_ms_per_step"] = round(extra[top], 2)
    clocks = diagnosis_input.rank_sm_clock_mhz
    peer_clocks = [mhz for rank, mhz in clocks.items() if rank != slow]
    if slow in clocks and peer_clocks:
        peers_mhz = sum(peer_clocks) / len(peer_clocks)
        evidence["sm_clock_mhz_mean"] = round(clocks[slow], 1)
        evidence["peers_sm_clock_mhz_mean"] = round(peers_mhz, 1)
        if not variants and clocks[slow] < DDP_SLOW_CLOCK_FRACTION * peers_mhz:
            cause = (
                f"its GPU's slower clocks ({clocks[slow]:.0f} MHz mean SM clock against its peers' "
                f"{peers_mhz:.0f}; rank{slow}/gpu/clocks_event_* says why)"
            )
    evidence["cause"] = cause
    if comm.stalls:
        evidence["stalls_apart"] = "; ".join(stall_text(s) for s in comm.stalls)
    step_ms = _step_ms(diagnosis_input, by_rank.get(slow))
    lost_pct = 100.0 * lost_ms / step_ms if step_ms else 0.0
    return Finding(
        rule="ddp_straggler",
        severity=HIGH if lost_pct >= 20.0 else MEDIUM,
        title=(
            f"The other ranks wait for rank {slow} in {straggler.steps_held} of {straggler.steady_steps} steady steps "
            f"({lost_ms:.0f} ms/step inside collectives); cause: {cause}"
        ),
        evidence=evidence,
        recommended_variants=variants,
        saving=Saving(lost_ms, lost_pct, f"if rank {slow} kept pace with the others") if lost_ms > 0 else None,
    )


def ddp_unbalanced_data(diagnosis_input: DiagnosisInput) -> Finding | None:
    if _communication(diagnosis_input) is None:
        return None
    shares = {r.rank: _trace_data_wait_pct(r) for r in _ranks(diagnosis_input)}
    measured = {rank: pct for rank, pct in shares.items() if pct is not None}
    if len(measured) < 2:
        return None
    high, low = max(measured, key=measured.__getitem__), min(measured, key=measured.__getitem__)
    gap = measured[high] - measured[low]
    if gap < DDP_DATA_WAIT_IMBALANCE_PTS:
        return None
    return Finding(
        rule="ddp_unbalanced_data",
        severity=MEDIUM,
        title=f"Data wait differs across ranks: rank {high} {measured[high]:.0f}% of its step, rank {low} "
        f"{measured[low]:.0f}%",
        evidence={
            "rank": str(high),
            "data_wait_pct": round(measured[high], 2),
            "lowest_rank": str(low),
            "lowest_data_wait_pct": round(measured[low], 2),
            "threshold_pts": DDP_DATA_WAIT_IMBALANCE_PTS,
        },
        recommended_variants=[f"workers_{DEFAULT_WORKERS_SUGGESTION}", "cache_ram"],
        no_saving_reason="the job's cost of it is the slowest rank's: see ddp_straggler",
    )


def memory_growth(diagnosis_input: DiagnosisInput) -> Finding | None:
    rising = [(r, r.memory) for r in _ranks(diagnosis_input) if r.memory is not None and r.memory.steadily_rising]
    if not rising:
        return None
    rank, memory = max(rising, key=lambda rank_memory: rank_memory[1].growth_bytes_per_step or 0.0)
    return Finding(
        rule="memory_growth",
        severity=MEDIUM,
        title="Allocated memory rises every step (a tensor kept alive across steps?)",
        evidence={
            "rank": str(rank.rank),
            "device": memory.device,
            "growth_mib_per_step": round((memory.growth_bytes_per_step or 0.0) / 2**20, 2),
        },
        recommended_variants=[],
        no_saving_reason="no step time to save: growing memory ends in an out-of-memory error, not a slower step",
    )


def memory_near_capacity(diagnosis_input: DiagnosisInput) -> Finding | None:
    peak, total, source = diagnosis_input.peak_memory_gib, diagnosis_input.gpu_memory_total_gib, "run context"
    if peak is None or total is None:
        for r in _gpu_ranks(diagnosis_input):
            if r.memory is not None and r.memory.device == "cuda" and r.device_memory_total_bytes:
                trace_peak = (r.memory.peak_reserved_bytes or r.memory.peak_allocated_bytes) / 2**30
                if peak is None or trace_peak > peak:
                    peak, total, source = trace_peak, r.device_memory_total_bytes / 2**30, f"trace (rank {r.rank})"
    if peak is None or not total:
        return None
    pct = 100.0 * peak / total
    if pct < MEMORY_NEAR_CAPACITY_PCT:
        return None
    smaller_batch = f"batch_{max(1, diagnosis_input.batch_size // 2)}" if diagnosis_input.batch_size else "batch_8"
    variants = [smaller_batch] if diagnosis_input.amp is True else [smaller_batch, "amp_bf16"]
    return Finding(
        rule="memory_near_capacity",
        severity=HIGH,
        title=f"Peak GPU memory is {pct:.0f}% of the device's {total:.1f} GiB",
        evidence={
            "peak_memory_gib": round(peak, 3),
            "gpu_memory_total_gib": round(total, 3),
            "memory_pct": round(pct, 2),
            "source": source,
            "threshold_pct": MEMORY_NEAR_CAPACITY_PCT,
        },
        recommended_variants=variants,
        no_saving_reason="no step time to save: it is a risk of running out of memory, not a cost per step",
    )


RULES = (
    data_wait_high,
    gpu_idle_host_wait,
    no_reduced_precision,
    cudnn_autotune_off,
    layout_conversions,
    sync_in_step,
    communication_high,
    ddp_exposed_communication,
    ddp_straggler,
    ddp_unbalanced_data,
    memory_growth,
    memory_near_capacity,
)
