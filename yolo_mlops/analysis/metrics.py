"""A trace's analysis as flat `trace/*` metrics: the headline figures MLflow charts and `compare` reads
(names from yolo_mlops.names, made here where the data leaves the analysis)."""

from __future__ import annotations

from statistics import mean

from yolo_mlops import names
from yolo_mlops.analysis.communication import CommunicationAnalysis
from yolo_mlops.analysis.host import CUDA_SYNC_CATEGORY
from yolo_mlops.analysis.idle_attribution import IDLE_CAUSES
from yolo_mlops.analysis.model import TraceAnalysis
from yolo_mlops.analysis.rules_gpu import communication_pct, exposed_communication_pct
from yolo_mlops.analysis.rules_host import host_wait_share_of_idle
from yolo_mlops.labels import PHASE_LABEL_PREFIX


def headline_metrics(analysis: TraceAnalysis) -> dict[str, float]:
    """`trace/*` metrics, units in the name. Only what the trace measured: a CPU-only trace has no
    GPU metric, a trace without DataLoader events has no data-loader share. Across ranks: the mean
    of the per-rank values (and the step-time spread)."""
    ranks = analysis.ranks
    metrics: dict[str, float] = {}

    def put(name: str, values: list[float | None]) -> None:
        measured = [v for v in values if v is not None]
        if measured:
            metrics[name] = float(mean(measured))

    step_times = [r.step_time for r in ranks if r.step_time is not None]
    put(names.TRACE_STEP_TIME_MEAN, [t.mean_us / 1000 for t in step_times])
    put(names.TRACE_STEP_TIME_MEDIAN, [t.median_us / 1000 for t in step_times])
    if step_times:
        metrics[names.TRACE_STEP_TIME_MAX] = max(t.max_us for t in step_times) / 1000
        metrics[names.TRACE_PROFILED_STEPS] = float(min(t.count for t in step_times))
        metrics[names.TRACE_EPOCH_BOUNDARY_STEPS] = float(max(len(r.boundary_steps) for r in ranks))
    if analysis.spread is not None:
        metrics[names.TRACE_STEP_TIME_SPREAD_MS] = analysis.spread.spread_us / 1000
        metrics[names.TRACE_STEP_TIME_SPREAD_PCT] = analysis.spread.spread_pct

    for category in sorted({c.category for r in ranks for c in r.host}):
        put(names.trace_host_metric(category_token(category)), [r.host_pct(category) for r in ranks])
    gpu_ranks = [r for r in ranks if r.gpu is not None]
    gpus = [r.gpu for r in ranks if r.gpu is not None]  # the summaries of gpu_ranks, in the same order
    cuda_sync = names.trace_host_metric(category_token(CUDA_SYNC_CATEGORY))
    if gpu_ranks and cuda_sync not in metrics and step_times:
        # The profiler records every CUDA runtime call: on a GPU trace, no sync call is a measured 0.
        metrics[cuda_sync] = 0.0

    put(names.TRACE_GPU_IDLE, [g.idle_pct for g in gpus])
    put(names.TRACE_GPU_COMPUTE, [g.compute_pct for g in gpus])
    put(names.TRACE_GPU_NON_COMPUTE, [g.non_compute_pct for g in gpus])
    put(names.TRACE_GPU_KERNEL_TIME_MS, [g.kernel_time_us / 1000 for g in gpus])
    put(names.TRACE_GPU_COMMUNICATION, [communication_pct(r) for r in gpu_ranks])
    put(names.TRACE_GPU_COMMUNICATION_EXPOSED, [exposed_communication_pct(r) for r in gpu_ranks])
    host_wait_shares = [host_wait_share_of_idle(r) for r in gpu_ranks]
    put(names.TRACE_GPU_IDLE_HOST_WAIT, [None if s is None else 100.0 * s for s in host_wait_shares])
    put(names.TRACE_GPU_REDUCED_PRECISION, [g.reduced_precision_kernel_pct for g in gpus])
    for cause in IDLE_CAUSES:
        put(
            names.gpu_idle_cause_metric(cause),
            [row.pct for r in gpu_ranks for row in r.gpu_idle_by_cause if row.cause == cause],
        )

    for device in ("cuda", "cpu"):
        memories = [r.memory for r in ranks if r.memory is not None and r.memory.device == device]
        prefix = "gpu" if device == "cuda" else "cpu"
        if memories:
            metrics[names.trace_memory_metric(prefix, "peak_allocated_gib")] = (
                max(m.peak_allocated_bytes for m in memories) / 2**30
            )
            reserved = [m.peak_reserved_bytes for m in memories if m.peak_reserved_bytes is not None]
            if reserved:
                metrics[names.trace_memory_metric(prefix, "peak_reserved_gib")] = max(reserved) / 2**30
            put(
                names.trace_memory_metric(prefix, "growth_mib_per_step"),
                [None if m.growth_bytes_per_step is None else m.growth_bytes_per_step / 2**20 for m in memories],
            )
    metrics.update(communication_metrics(analysis.communication))
    return metrics


def communication_metrics(comm: CommunicationAnalysis | None) -> dict[str, float]:
    """`comm/*` of a data-parallel job: each rank's under `rank<r>/comm/*`, the job's the largest of any rank
    (the rank that spends the most on communication is the one the job's speed depends on). A figure the trace
    did not measure (collective time of a one-rank NCCL job, which runs no kernel) is not logged at all."""
    if comm is None:
        return {}
    metrics: dict[str, float] = {}
    per_rank = {
        names.COMM_COLLECTIVE_PCT: lambda r: r.collective_pct,
        names.COMM_EXPOSED_PCT: lambda r: r.exposed_pct,
        names.COMM_WAIT_PCT: lambda r: r.wait_pct,
        names.COMM_CALLS_PER_OPTIMIZER_STEP: lambda r: r.calls_per_optimizer_step,
        names.COMM_CALLS_PER_STEP: lambda r: r.calls_per_step,
        names.COMM_OTHER_CALLS_PER_STEP: lambda r: r.other_calls_per_step,
        names.COMM_MESSAGE_MIB_PER_STEP: lambda r: (
            None if r.collective_bytes is None or not r.steps else r.collective_bytes / 2**20 / r.steps
        ),
    }
    for name, value_of in per_rank.items():
        values = []
        for rank in comm.ranks:
            value = value_of(rank)
            if value is not None:
                metrics[names.rank_metric(rank.rank, name)] = float(value)
                values.append(float(value))
        if values:
            metrics[name] = max(values)
    if comm.wait_spread_pct is not None:
        metrics[names.COMM_WAIT_SPREAD_PCT] = comm.wait_spread_pct
    straggler = comm.straggler
    if straggler is not None:
        metrics[names.COMM_WAITED_FOR_RANK] = float(straggler.rank)
        metrics[names.COMM_STRAGGLER_LEAD_MS] = straggler.median_lead_ms
        metrics[names.COMM_STRAGGLER_STEPS_PCT] = 100.0 * straggler.steps_held / max(straggler.steady_steps, 1)
    if comm.matched_collectives:  # waits were measured: no stall is a measured 0
        metrics[names.COMM_STALLS] = float(len(comm.stalls))
        if comm.stalls:
            metrics[names.COMM_STALL_LEAD_MS_MAX] = max(s.lead_ms for s in comm.stalls)
    return metrics


def category_token(category: str) -> str:
    """yolo_mlops/data_wait -> data_wait; data_loader stays."""
    token = category[len(PHASE_LABEL_PREFIX) :] if category.startswith(PHASE_LABEL_PREFIX) else category
    return "".join(ch if ch.isalnum() else "_" for ch in token)
