"""`TraceAnalysis` as the plain-text report of `yolo-mlops analyze` (the Markdown/HTML run report is run_report.py)."""

from __future__ import annotations

from pathlib import Path

from yolo_mlops.analysis.collectives import RankCommunication
from yolo_mlops.analysis.communication import who_waits_text
from yolo_mlops.analysis.model import RankAnalysis, TraceAnalysis
from yolo_mlops.analysis.step_activity import boundary_text
from yolo_mlops.labels import PHASE_LABEL_PREFIX
from yolo_mlops.render import fmt


def render_text(analysis: TraceAnalysis) -> str:
    lines = [f"Trace analysis of {analysis.source} ({len(analysis.ranks)} rank(s))"]
    for r in analysis.ranks:
        lines += [""] + _render_rank(r)
    comm = analysis.communication
    if comm is not None:
        lines += [
            "",
            f"Communication ({comm.backend}, world size {comm.world_size})" + (f": {comm.note}" if comm.note else ""),
        ]
        lines += [f"  {_collectives_line(r)}" for r in comm.ranks]
        if comm.matched_collectives:
            lines.append(f"  who waits for whom: {who_waits_text(comm)}")
    boundaries = sorted({step for r in analysis.ranks for step in r.boundary_steps})
    if boundaries:
        lines += ["", boundary_text(boundaries)]
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
        lines += [
            f"  {_phase_name(c.cause):<28} {fmt(c.ms_per_step, '.2f'):>10} ms/step {fmt(c.step_pct, '.1f'):>6}%"
            for c in r.step_by_phase
        ]
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
            *(
                f"    {c.cause:<16} {fmt(c.ms_per_step, '.2f'):>10} ms/step {c.pct:6.1f}% {fmt(c.step_pct, '.1f'):>6}%"
                for c in r.gpu_idle_by_cause
            ),
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
        memory = r.memory
        trend = "steadily rising" if memory.steadily_rising else "no steady rise"
        growth = memory.growth_bytes_per_step
        slope = f"{growth / 2**20:+.1f} MiB/step" if growth is not None else "n/a"
        lines.append(
            f"memory ({memory.device}): peak allocated {memory.peak_allocated_bytes / 2**30:.3f} GiB"
            + (f", reserved {reserved / 2**30:.3f} GiB" if (reserved := memory.peak_reserved_bytes) is not None else "")
            + f"; across steps {slope}, {trend}"
        )
    return lines


def _collectives_line(r: RankCommunication) -> str:
    calls = ", ".join(f"{name} {n}" for name, n in (r.calls_by_kind or r.calls_by_collective).items())
    mib = "" if r.collective_bytes is None or not r.steps else f", {r.collective_bytes / 2**20 / r.steps:.2f} MiB/step"
    timed = (
        f"collective {_pct_text(r.collective_pct)}, exposed {_pct_text(r.exposed_pct)}, wait {_pct_text(r.wait_pct)} "
        "of step time"
        if r.collective_pct is not None
        else "collective time not measured"
    )
    return (
        f"rank {r.rank}: {r.collective_calls} collectives in {r.steps} steps ({fmt(r.calls_per_step, '.2f')}/step"
        + (f"; {calls}" if calls else "")
        + f"{mib}), found from {r.found_from or '-'}; {timed}"
    )


def _phase_name(name: str) -> str:
    return name[len(PHASE_LABEL_PREFIX) :] if name.startswith(PHASE_LABEL_PREFIX) else name


def _pct_text(pct: float | None) -> str:
    return "n/a" if pct is None else f"{pct:.1f}%"


def _short(name: str, width: int = 100) -> str:
    return name if len(name) <= width else name[: width - 3] + "..."
