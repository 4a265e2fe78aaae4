"""Trace analysis entry points: load -> per-rank analyses -> `TraceAnalysis` (JSON / text)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import msgspec
import numpy as np

from yolo_mlops.analysis import gpu as gpu_mod
from yolo_mlops.analysis.attribution import CauseTime, gpu_idle_by_cause, step_time_by_phase
from yolo_mlops.analysis.gpu import KernelTotal, KernelTypeShare, StreamIdle, TemporalBreakdown
from yolo_mlops.analysis.host import (
    PHASE_LABEL_PREFIX,
    CategoryTime,
    Steps,
    categories_by_name,
    find_steps,
    host_category_times,
    host_event_mask,
    top_host_ops,
)
from yolo_mlops.analysis.memory import MemoryProfile, memory_profile
from yolo_mlops.analysis.trace_loader import RankTrace, load_traces
from yolo_mlops.render import fmt

GPU_WINDOW_HTA = "all but the last ProfilerStep (as HTA)"
GPU_WINDOW_ALL = "whole trace (fewer than 2 ProfilerSteps)"


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

    def to_dict(self) -> dict:
        """Plain JSON values; rank keys become strings (JSON object keys)."""
        return to_builtins(self)

    def to_json(self, indent: int = 2) -> str:
        return json_text(self.to_dict(), indent)


def to_builtins(value) -> object:
    """Dataclasses (recursively), numpy scalars and int dict keys as JSON-ready builtins (msgspec: ~20x
    dataclasses.asdict on an analysis)."""
    return msgspec.to_builtins(value, str_keys=True, enc_hook=_numpy_scalar)


def json_text(value, indent: int = 2) -> str:
    """Indented JSON of builtins (msgspec's encoder: ~10x json.dumps with indent, the pure-Python path)."""
    return msgspec.json.format(msgspec.json.encode(value, enc_hook=_numpy_scalar), indent=indent).decode()


def _numpy_scalar(value):
    if isinstance(value, np.bool_):
        return bool(value)
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.floating):
        return float(value)
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


def analyze_rank(trace: RankTrace) -> RankAnalysis:
    host = host_event_mask(trace)
    steps = find_steps(trace, host)
    category_by_name = categories_by_name(trace.names)
    category_times = host_category_times(trace, host, steps, category_by_name)
    total_step_us = float(steps.duration.sum())
    host_summary = [
        CategoryTime(category, float(v[0].sum()), _pct(float(v[0].sum()), total_step_us), int(v[1].sum()))
        for category, v in category_times.items()
    ]

    window_end = float(np.ceil(steps.start[-1])) if steps.count >= 2 else None
    all_acts = gpu_mod.select_gpu_activities(trace)
    window_acts = all_acts if window_end is None else gpu_mod.launched_before(all_acts, window_end)
    breakdown = gpu_mod.temporal_breakdown(window_acts)
    has_gpu = breakdown is not None
    memory = memory_profile(trace, steps)
    device_name, device_memory, capability = _device_properties(trace)
    gpu_summary = None
    if has_gpu:
        gpu_summary = GpuSummary.from_breakdown(breakdown, window_acts.count)
        gpu_summary.reduced_precision_kernel_pct = gpu_mod.kernel_time_share_pct(
            window_acts, trace.names, gpu_mod.is_reduced_precision_kernel
        )
        gpu_summary.layout_conversion_kernel_pct = gpu_mod.kernel_time_share_pct(
            window_acts, trace.names, gpu_mod.is_layout_conversion_kernel
        )
        if gpu_summary.layout_conversion_kernel_pct is not None:
            durations = float((window_acts.end - window_acts.start).sum())
            gpu_summary.layout_conversion_time_us = gpu_summary.layout_conversion_kernel_pct / 100 * durations

    # the steps the GPU window covers (HTA drops the last one when there are two or more)
    window_steps = steps.count - 1 if window_end is not None else steps.count
    window_step_us = float(steps.duration[:window_steps].sum()) if steps.count else 0.0
    return RankAnalysis(
        rank=trace.rank,
        path=trace.path,
        event_count=trace.event_count,
        device_name=device_name if has_gpu else None,
        device_memory_total_bytes=device_memory if has_gpu else None,
        device_compute_capability=capability if has_gpu else None,
        step_time=_step_time_stats(steps),
        host=host_summary,
        gpu=gpu_summary,
        gpu_window=(GPU_WINDOW_HTA if window_end is not None else GPU_WINDOW_ALL) if has_gpu else None,
        kernel_types=gpu_mod.kernel_type_breakdown(window_acts) if has_gpu else [],
        idle_breakdown=gpu_mod.idle_breakdown(window_acts) if has_gpu else [],
        top_kernels=gpu_mod.top_kernels(window_acts, trace.names) if has_gpu else [],
        top_host_ops=[HostOp(*op) for op in top_host_ops(trace, host)],
        memory=memory,
        steps=_step_summaries(all_acts, steps, category_times, memory),
        gpu_idle_by_cause=gpu_idle_by_cause(trace, host, steps, window_acts, window_steps, window_step_us,
                                           category_by_name)
        if has_gpu else [],
        step_by_phase=step_time_by_phase(trace, host, steps, category_by_name),
        window_steps=window_steps,
        window_step_us=window_step_us,
    )


def _step_summaries(
    all_acts: gpu_mod.GpuActivities, steps: Steps, category_times: dict[str, np.ndarray], memory: MemoryProfile | None
) -> list[StepSummary]:
    launch_step = steps.index_of(all_acts.launch_ts)
    # Group activities by step once (sort), instead of one full-length mask per step.
    order = np.argsort(launch_step, kind="stable")
    bounds = np.searchsorted(launch_step[order], np.arange(steps.count + 1))
    summaries = []
    for i in range(steps.count):
        step_acts = all_acts.subset(order[bounds[i] : bounds[i + 1]])
        breakdown = gpu_mod.temporal_breakdown(step_acts)
        summaries.append(
            StepSummary(
                step=int(steps.number[i]),
                start_us=float(steps.start[i]),
                duration_us=float(steps.duration[i]),
                host_us={c: float(v[0][i]) for c, v in category_times.items()},
                gpu=GpuSummary.from_breakdown(breakdown, step_acts.count) if breakdown else None,
                peak_allocated_bytes=memory.step_peak_allocated_bytes[i] if memory else None,
                peak_reserved_bytes=memory.step_peak_reserved_bytes[i] if memory else None,
            )
        )
    return summaries


def _step_time_stats(steps: Steps) -> StepTimeStats | None:
    if steps.count == 0:
        return None
    d = steps.duration
    return StepTimeStats(
        count=steps.count,
        total_us=float(d.sum()),
        mean_us=float(d.mean()),
        median_us=_median(d),
        min_us=float(d.min()),
        max_us=float(d.max()),
    )


def _median(values: np.ndarray) -> float:
    """np.median's first call imports numpy.ma (~15 ms of a CLI run's start); a sort does the same job."""
    ordered = np.sort(values)
    n = ordered.size
    return float((ordered[(n - 1) // 2] + ordered[n // 2]) / 2)


def _device_properties(trace: RankTrace) -> tuple[str | None, float | None, float | None]:
    """Name, memory and compute capability of the GPU this rank's kernels ran on (pid = device id)."""
    if not trace.device_properties:
        return None, None, None
    gpu = trace.gpu_mask()
    device_id = trace.pids[int(trace.pid_id[gpu].min())] if gpu.any() else None
    chosen = next((d for d in trace.device_properties if str(d.get("id")) == device_id), trace.device_properties[0])
    memory = chosen.get("totalGlobalMem")
    major, minor = chosen.get("computeMajor"), chosen.get("computeMinor")
    capability = float(f"{major}.{minor}") if isinstance(major, int) and isinstance(minor, int) else None
    return chosen.get("name"), float(memory) if isinstance(memory, (int, float)) else None, capability


def _pct(part: float, whole: float) -> float:
    return 100.0 * part / whole if whole > 0 else 0.0


def rank_spread(ranks: list[RankAnalysis]) -> RankSpread | None:
    means = {r.rank: r.step_time.mean_us for r in ranks if r.step_time is not None}
    if len(means) < 2:
        return None
    slowest = max(means, key=means.get)
    fastest = min(means, key=means.get)
    spread = means[slowest] - means[fastest]
    return RankSpread(means, spread, _pct(spread, means[fastest]), slowest, fastest)


def analyze_traces(path: str | Path) -> TraceAnalysis:
    """Analyse one trace file or a directory of per-rank traces. Raises TraceError on bad input."""
    ranks = [analyze_rank(trace) for trace in load_traces(path)]
    return TraceAnalysis(source=str(path), ranks=ranks, spread=rank_spread(ranks))


def analyze_command(path: str, fmt: str = "text", context=None) -> str:
    """`yolo-mlops analyze PATH [--format text|json]`: breakdowns, then the diagnosis of the trace.

    `context` is a DiagnosisInput holding what the trace cannot say (AMP, batch, workers, ...); its
    `analysis` is filled in here. The rules and thresholds are the ones a profiled run uses."""
    from dataclasses import replace

    from yolo_mlops.analysis.diagnosis import DiagnosisInput, diagnose, headline

    if fmt not in ("text", "json"):
        raise ValueError(f"unknown format {fmt!r}: expected 'text' or 'json'")
    analysis = analyze_traces(path)
    findings = diagnose(replace(context or DiagnosisInput(), analysis=analysis))
    if fmt == "json":
        doc = analysis.to_dict()
        doc["findings"] = [f.to_dict() for f in findings]
        doc["headline"] = headline(findings)
        return json_text(doc) + "\n"
    lines = [render_text(analysis), "findings (largest estimated saving first):"]
    lines += [f"  {f.line()}" for f in findings] or ["  none: no rule fired"]
    lines += ["", headline(findings)]
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------- text


def render_text(analysis: TraceAnalysis) -> str:
    lines = [f"Trace analysis of {analysis.source} ({len(analysis.ranks)} rank(s))"]
    for r in analysis.ranks:
        lines += [""] + _render_rank(r)
    if analysis.spread is not None:
        s = analysis.spread
        lines += [
            "",
            "Ranks: mean step time",
            *(f"  rank {k}: {v / 1000:.2f} ms" for k, v in s.step_time_mean_us_by_rank.items()),
            f"  spread {s.spread_us / 1000:.2f} ms ({s.spread_pct:.1f}%), slowest rank {s.slowest_rank}",
        ]
    return "\n".join(lines) + "\n"


def _render_rank(r: RankAnalysis) -> list[str]:
    lines = [f"== rank {r.rank}: {Path(r.path).name} ({r.event_count} events)"]
    if r.step_time is None:
        lines.append("steps: none (no ProfilerStep spans; call prof.step() each iteration)")
    else:
        st = r.step_time
        lines.append(
            f"steps: {st.count}, step time mean {st.mean_us / 1000:.2f} ms, median {st.median_us / 1000:.2f} ms, "
            f"min {st.min_us / 1000:.2f} ms, max {st.max_us / 1000:.2f} ms"
        )
    if r.host:
        lines.append("host time per category (share of step time):")
        lines += [f"  {c.category:<28} {c.time_us / 1000:10.2f} ms {c.pct:6.1f}%  ({c.count} events)" for c in r.host]
    if r.step_by_phase:
        lines.append("step time by phase (each instant counted once):")
        lines += [f"  {_phase_name(c.cause):<28} {fmt(c.ms_per_step, '.2f'):>10} ms/step {fmt(c.step_pct, '.1f'):>6}%"
                  for c in r.step_by_phase]
    if r.gpu is None:
        lines.append("gpu: none (CPU-only trace)")
    else:
        g = r.gpu
        lines += [
            f"gpu{f' ({r.device_name})' if r.device_name else ''}, window: {r.gpu_window}",
            f"  kernel time {g.kernel_time_us / 1000:.2f} ms: idle {g.idle_pct:.2f}%, compute {g.compute_pct:.2f}%, "
            f"non-compute {g.non_compute_pct:.2f}%",
            f"  reduced-precision kernels {_pct_text(g.reduced_precision_kernel_pct)} of kernel time, "
            f"layout conversions {_pct_text(g.layout_conversion_kernel_pct)}",
            "  kernel types:",
            *(f"    {k.kernel_type:<55} {k.time_us / 1000:10.2f} ms {k.pct:6.1f}%" for k in r.kernel_types),
            "  GPU idle by host cause (share of kernel-time span; of step time):",
            *(f"    {c.cause:<16} {fmt(c.ms_per_step, '.2f'):>10} ms/step {c.pct:6.1f}% {fmt(c.step_pct, '.1f'):>6}%"
              for c in r.gpu_idle_by_cause),
            "  idle time per stream:",
            *(
                f"    stream {i.stream:<5} {i.idle_category:<12} {i.idle_time_us / 1000:10.2f} ms "
                f"{100 * i.idle_ratio:6.1f}%"
                for i in r.idle_breakdown
            ),
            "  top kernels:",
            *(f"    {k.time_us / 1000:10.2f} ms  {k.count:6d}x  {_short(k.name)}" for k in r.top_kernels),
        ]
    if r.top_host_ops:
        lines.append("top host operators (inclusive):")
        lines += [f"    {o.time_us / 1000:10.2f} ms  {o.count:6d}x  {_short(o.name)}" for o in r.top_host_ops]
    if r.memory is not None:
        m = r.memory
        trend = "steadily rising" if m.steadily_rising else "no steady rise"
        slope = f"{m.growth_bytes_per_step / 2**20:+.1f} MiB/step" if m.growth_bytes_per_step is not None else "n/a"
        lines.append(
            f"memory ({m.device}): peak allocated {m.peak_allocated_bytes / 2**30:.3f} GiB"
            + (f", reserved {m.peak_reserved_bytes / 2**30:.3f} GiB" if m.peak_reserved_bytes is not None else "")
            + f"; across steps {slope}, {trend}"
        )
    return lines


def _phase_name(name: str) -> str:
    return name[len(PHASE_LABEL_PREFIX):] if name.startswith(PHASE_LABEL_PREFIX) else name


def _pct_text(pct: float | None) -> str:
    return "n/a" if pct is None else f"{pct:.1f}%"


def _short(name: str, width: int = 100) -> str:
    return name if len(name) <= width else name[: width - 3] + "..."
