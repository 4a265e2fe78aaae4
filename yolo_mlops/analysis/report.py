"""Run report (Markdown + self-contained HTML + PNG plots) and headline `trace/*` metrics.

The report is built once as a list of blocks (heading, paragraph, table, image) and rendered to
both formats, so the two never disagree. Plots are pyplot-free Agg figures (yolo_mlops.render).
"""

from __future__ import annotations

import base64
import html
import shutil
from dataclasses import dataclass
from pathlib import Path
from statistics import mean

from yolo_mlops import names
from yolo_mlops.analysis.communication import CommunicationAnalysis
from yolo_mlops.analysis.diagnosis import (
    Finding,
    communication_pct,
    exposed_communication_pct,
    headline,
    host_wait_share_of_idle,
)
from yolo_mlops.analysis.host import (
    CUDA_SYNC_CATEGORY,
    DATA_LOADER_CATEGORY,
    OPTIMIZER_CATEGORY,
)
from yolo_mlops.analysis.idle_attribution import BETWEEN_PHASES, IDLE_CAUSES
from yolo_mlops.analysis.model import RankAnalysis, TraceAnalysis
from yolo_mlops.labels import PHASE_LABEL_PREFIX, PHASE_ORDER
from yolo_mlops.render import fmt, markdown_table, new_figure, save_figure

STEP_PLOT = "step_time_breakdown.png"
KERNEL_PLOT = "kernel_mix.png"
NVML_PLOT = "nvml.png"


# ----------------------------------------------------------------------------- headline metrics


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
    if analysis.spread is not None:
        metrics[names.TRACE_STEP_TIME_SPREAD_MS] = analysis.spread.spread_us / 1000
        metrics[names.TRACE_STEP_TIME_SPREAD_PCT] = analysis.spread.spread_pct

    for category in sorted({c.category for r in ranks for c in r.host}):
        put(names.trace_host_metric(_metric_token(category)), [r.host_pct(category) for r in ranks])
    gpu_ranks = [r for r in ranks if r.gpu is not None]
    gpus = [r.gpu for r in ranks if r.gpu is not None]  # the summaries of gpu_ranks, in the same order
    cuda_sync = names.trace_host_metric(_metric_token(CUDA_SYNC_CATEGORY))
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
    (the rank that spends the most on communication is the one the job's speed depends on)."""
    if comm is None:
        return {}
    metrics: dict[str, float] = {}
    per_rank = {
        names.COMM_COLLECTIVE_PCT: lambda r: r.collective_pct,
        names.COMM_EXPOSED_PCT: lambda r: r.exposed_pct,
        names.COMM_WAIT_PCT: lambda r: r.wait_pct,
        names.COMM_CALLS_PER_OPTIMIZER_STEP: lambda r: r.calls_per_optimizer_step,
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
    if comm.waited_for_rank is not None:
        metrics[names.COMM_WAITED_FOR_RANK] = float(comm.waited_for_rank)
    return metrics


def _metric_token(category: str) -> str:
    """yolo_mlops/data_wait -> data_wait; data_loader stays."""
    token = category[len(PHASE_LABEL_PREFIX) :] if category.startswith(PHASE_LABEL_PREFIX) else category
    return "".join(ch if ch.isalnum() else "_" for ch in token)


# ---------------------------------------------------------------------------------------- blocks


@dataclass
class Heading:
    text: str
    level: int = 2


@dataclass
class Paragraph:
    text: str


@dataclass
class Table:
    headers: list[str]
    rows: list[list[str]]


@dataclass
class Image:
    file_name: str
    alt: str


Block = Heading | Paragraph | Table | Image


def _pct_cell(pct: float | None) -> str:
    return "-" if pct is None else f"{pct:.1f}"


def _ms(us: float) -> str:
    return f"{us / 1000:.2f}"


def _report_blocks(
    analysis: TraceAnalysis, findings: list[Finding], extra: dict | None, images: list[Image], sections: list[Block]
) -> list[Block]:
    summary = f"Trace: {analysis.source}, {len(analysis.ranks)} rank(s)."
    blocks: list[Block] = [Heading("Profiling report", 1), Paragraph(summary)]
    blocks += _findings_blocks(findings)
    if extra:
        blocks += [Heading("Run context"), Table(["key", "value"], [[str(k), fmt(v)] for k, v in extra.items()])]
    blocks += _step_blocks(analysis)
    blocks += _host_blocks(analysis)
    for rank in analysis.ranks:
        blocks += _gpu_blocks(rank, multi=len(analysis.ranks) > 1)
    blocks += _memory_blocks(analysis)
    blocks += sections
    if images:
        blocks.append(Heading("Plots"))
        blocks += images
    return blocks


def _findings_blocks(findings: list[Finding]) -> list[Block]:
    if not findings:
        return [Heading("Findings"), Paragraph("No rule fired: nothing stands out in this run.")]
    rows = [
        [
            f.severity,
            f.title,
            fmt(f.saving.ms_per_step, ".1f") if f.saving else "-",
            fmt(f.saving.pct_of_step, ".1f") if f.saving else "-",
            f.saving.assumption if f.saving else "not estimable from the trace",
            ", ".join(f.recommended_variants) or "-",
            "; ".join(f"{k}={fmt(v)}" for k, v in f.evidence.items()),
        ]
        for f in findings
    ]
    return [
        Heading("Findings"),
        Paragraph(headline(findings)),
        Table(
            ["severity", "finding", "saves up to ms/step", "% of step", "assuming", "try variants", "evidence"], rows
        ),
    ]


def _step_blocks(analysis: TraceAnalysis) -> list[Block]:
    rows = [
        [
            str(r.rank),
            str(r.step_time.count),
            _ms(r.step_time.mean_us),
            _ms(r.step_time.median_us),
            _ms(r.step_time.min_us),
            _ms(r.step_time.max_us),
        ]
        for r in analysis.ranks
        if r.step_time is not None
    ]
    if not rows:
        return [Heading("Step time"), Paragraph("No ProfilerStep spans in the trace.")]
    blocks: list[Block] = [
        Heading("Step time"),
        Table(["rank", "steps", "mean ms", "median ms", "min ms", "max ms"], rows),
    ]
    if analysis.spread is not None:
        s = analysis.spread
        blocks.append(
            Paragraph(
                f"Spread between ranks: {_ms(s.spread_us)} ms ({s.spread_pct:.1f}%); "
                f"slowest rank {s.slowest_rank}, fastest rank {s.fastest_rank}."
            )
        )
    return blocks


def _host_blocks(analysis: TraceAnalysis) -> list[Block]:
    rows = [
        [str(r.rank), c.category, _ms(c.time_us), f"{c.pct:.1f}", str(c.count)] for r in analysis.ranks for c in r.host
    ]
    blocks: list[Block] = [Heading("Host time per category")]
    if rows:
        blocks.append(Table(["rank", "category", "ms", "% of step time", "events"], rows))
    else:
        blocks.append(Paragraph("No data-loader, phase-label, optimizer or sync events inside profiled steps."))
    phase_rows = [
        [str(r.rank), c.cause, _ms(c.time_us), fmt(c.ms_per_step, ".2f"), fmt(c.step_pct, ".1f")]
        for r in analysis.ranks
        for c in r.step_by_phase
    ]
    if phase_rows:
        blocks += [
            Heading("Step time by phase", 3),
            Paragraph(f"Each instant of a step counted once: the phase label covering it, else `{BETWEEN_PHASES}`."),
            Table(["rank", "phase", "ms", "ms/step", "% of step time"], phase_rows),
        ]
    top = analysis.ranks[0].top_host_ops if analysis.ranks else []
    if top:
        blocks += [
            Heading(f"Top host operators (rank {analysis.ranks[0].rank}, inclusive time)", 3),
            Table(["operator", "ms", "calls"], [[o.name, _ms(o.time_us), str(o.count)] for o in top]),
        ]
    return blocks


def _gpu_blocks(rank: RankAnalysis, multi: bool) -> list[Block]:
    title = f"GPU breakdown (rank {rank.rank})" if multi else "GPU breakdown"
    if rank.gpu is None:
        return [Heading(title), Paragraph("CPU-only trace: no GPU activity was recorded.")]
    g = rank.gpu
    return [
        Heading(title),
        Paragraph(
            f"Device: {rank.device_name or 'unknown'}; window: {rank.gpu_window}. Shares of the span "
            f"from the first kernel start to the last kernel end ({_ms(g.kernel_time_us)} ms), "
            "with HolisticTraceAnalysis' definitions."
        ),
        Table(
            ["idle %", "compute %", "non-compute %", "reduced-precision kernels %", "layout conversions %"],
            [
                [
                    f"{g.idle_pct:.2f}",
                    f"{g.compute_pct:.2f}",
                    f"{g.non_compute_pct:.2f}",
                    _pct_cell(g.reduced_precision_kernel_pct),
                    _pct_cell(g.layout_conversion_kernel_pct),
                ]
            ],
        ),
        Heading("Kernel types", 3),
        Table(["kernel type", "ms", "%"], [[k.kernel_type, _ms(k.time_us), f"{k.pct:.1f}"] for k in rank.kernel_types]),
        Heading("GPU idle by host cause", 3),
        Paragraph("Each GPU idle interval matched with what the host was doing meanwhile (docs/analysis.md)."),
        Table(
            ["cause", "ms/step", "% of kernel-time span", "% of step time"],
            [
                [c.cause, fmt(c.ms_per_step, ".2f"), f"{c.pct:.1f}", fmt(c.step_pct, ".1f")]
                for c in rank.gpu_idle_by_cause
            ],
        ),
        Heading("Idle time per stream (HTA)", 3),
        Table(
            ["stream", "category", "ms", "share of stream idle"],
            [
                [str(i.stream), i.idle_category, _ms(i.idle_time_us), f"{100 * i.idle_ratio:.1f}%"]
                for i in rank.idle_breakdown
            ],
        ),
        Heading("Top kernels", 3),
        Table(
            ["kernel", "type", "ms", "count"],
            [[k.name, k.kernel_type, _ms(k.time_us), str(k.count)] for k in rank.top_kernels],
        ),
    ]


def _memory_blocks(analysis: TraceAnalysis) -> list[Block]:
    rows = []
    for r in analysis.ranks:
        m = r.memory
        if m is None:
            continue
        rows.append(
            [
                str(r.rank),
                m.device,
                f"{m.peak_allocated_bytes / 2**30:.3f}",
                f"{m.peak_reserved_bytes / 2**30:.3f}" if m.peak_reserved_bytes is not None else "-",
                f"{m.growth_bytes_per_step / 2**20:+.1f}" if m.growth_bytes_per_step is not None else "-",
                "yes" if m.steadily_rising else "no",
            ]
        )
    if not rows:
        return [Heading("Memory"), Paragraph("No `[memory]` events (profile with profile_memory=True).")]
    return [
        Heading("Memory"),
        Table(["rank", "allocator", "peak allocated GiB", "peak reserved GiB", "MiB/step", "steadily rising"], rows),
    ]


# ----------------------------------------------------------------------------------------- plots


def _plot_step_breakdown(rank: RankAnalysis, path: Path) -> bool:
    if not rank.steps:
        return False
    labelled = {c for s in rank.steps for c in s.host_us if c.startswith(PHASE_LABEL_PREFIX)}
    known = [PHASE_LABEL_PREFIX + p for p in PHASE_ORDER if PHASE_LABEL_PREFIX + p in labelled]
    categories = known + sorted(labelled - set(known))
    if not categories:  # no phase labels: the built-in categories are (nearly) disjoint too
        categories = [
            c
            for c in (DATA_LOADER_CATEGORY, OPTIMIZER_CATEGORY, CUDA_SYNC_CATEGORY)
            if any(c in s.host_us for s in rank.steps)
        ]
    labels = [str(s.step) for s in rank.steps]
    fig = new_figure(max(6, 0.5 * len(labels) + 3), 4)
    ax = fig.add_subplot()
    bottom = [0.0] * len(rank.steps)
    for category in categories:
        values = [s.host_us.get(category, 0.0) / 1000 for s in rank.steps]
        ax.bar(labels, values, bottom=bottom, label=_metric_token(category))
        bottom = [b + v for b, v in zip(bottom, values, strict=True)]
    other = [max(0.0, s.duration_us / 1000 - b) for s, b in zip(rank.steps, bottom, strict=True)]
    ax.bar(labels, other, bottom=bottom, label="other", color="lightgrey")
    ax.set_xlabel("profiled step")
    ax.set_ylabel("ms")
    ax.set_title(f"Step time breakdown (rank {rank.rank})")
    ax.legend(fontsize="small")
    save_figure(fig, path)
    return True


def _plot_kernel_mix(rank: RankAnalysis, path: Path) -> bool:
    if rank.gpu is None or not rank.kernel_types:
        return False
    labels = [k.kernel_type.replace(" overlapping ", " +\n") for k in rank.kernel_types]
    fig = new_figure(7, 0.6 * len(labels) + 1.5)
    ax = fig.add_subplot()
    ax.barh(labels[::-1], [k.pct for k in rank.kernel_types][::-1], color="tab:blue")
    ax.set_xlabel("% of GPU busy time")
    ax.set_title(f"Kernel mix (rank {rank.rank}); GPU idle {rank.gpu.idle_pct:.1f}% of its span")
    save_figure(fig, path)
    return True


# ------------------------------------------------------------------------------------- renderers


def render_markdown(blocks: list[Block]) -> str:
    out: list[str] = []
    for b in blocks:
        if isinstance(b, Heading):
            out.append("#" * b.level + " " + b.text)
        elif isinstance(b, Paragraph):
            out.append(b.text)
        elif isinstance(b, Table):
            out.append(markdown_table(b.headers, b.rows))
        elif isinstance(b, Image):
            out.append(f"![{b.alt}]({b.file_name})")
        out.append("")
    return "\n".join(out)


def render_html(blocks: list[Block], out_dir: Path) -> str:
    """Self-contained page: images are embedded, so it renders inside MLflow's artifact viewer."""
    body: list[str] = []
    for b in blocks:
        if isinstance(b, Heading):
            body.append(f"<h{b.level}>{html.escape(b.text)}</h{b.level}>")
        elif isinstance(b, Paragraph):
            body.append(f"<p>{html.escape(b.text)}</p>")
        elif isinstance(b, Table):
            head = "".join(f"<th>{html.escape(h)}</th>" for h in b.headers)
            rows = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in b.rows)
            body.append(f"<table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>")
        elif isinstance(b, Image):
            data = base64.b64encode((out_dir / b.file_name).read_bytes()).decode()
            body.append(
                f'<figure><img alt="{html.escape(b.alt)}" src="data:image/png;base64,{data}">'
                f"<figcaption>{html.escape(b.alt)}</figcaption></figure>"
            )
    style = (
        "body{font-family:sans-serif;margin:2em;max-width:80em}table{border-collapse:collapse;margin:1em 0}"
        "td,th{border:1px solid #ccc;padding:3px 8px;text-align:left;font-size:90%}"
        "th{background:#f3f3f3}img{max-width:100%}"
    )
    return (
        f'<!DOCTYPE html>\n<html><head><meta charset="utf-8"><title>Profiling report</title>'
        f"<style>{style}</style></head><body>\n" + "\n".join(body) + "\n</body></html>\n"
    )


def write_report(
    out_dir: str | Path,
    analysis: TraceAnalysis,
    findings: list[Finding],
    extra: dict | None = None,
    nvml_plot: Path | None = None,
    sections: list[Block] | None = None,
) -> list[Path]:
    """Write report.md, report.html and the plots into out_dir; return every file written. `sections`: blocks
    of what the trace cannot say (the run's own measurements), placed before the plots."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    images: list[Image] = []
    if analysis.ranks and _plot_step_breakdown(analysis.ranks[0], out_dir / STEP_PLOT):
        written.append(out_dir / STEP_PLOT)
        images.append(Image(STEP_PLOT, f"Step time breakdown, rank {analysis.ranks[0].rank}"))
    gpu_rank = next((r for r in analysis.ranks if r.gpu is not None), None)
    if gpu_rank is not None and _plot_kernel_mix(gpu_rank, out_dir / KERNEL_PLOT):
        written.append(out_dir / KERNEL_PLOT)
        images.append(Image(KERNEL_PLOT, f"Kernel mix, rank {gpu_rank.rank}"))
    if nvml_plot is not None:
        nvml_plot = Path(nvml_plot)
        if nvml_plot.resolve() != (out_dir / NVML_PLOT).resolve():
            shutil.copyfile(nvml_plot, out_dir / NVML_PLOT)
        written.append(out_dir / NVML_PLOT)
        images.append(Image(NVML_PLOT, "NVML timeline"))
    blocks = _report_blocks(analysis, findings, extra, images, sections or [])
    md_path, html_path = out_dir / names.file_name(names.REPORT_MD), out_dir / names.file_name(names.REPORT_HTML)
    md_path.write_text(render_markdown(blocks))
    html_path.write_text(render_html(blocks, out_dir))
    return [md_path, html_path, *written]
