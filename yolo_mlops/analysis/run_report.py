"""The run report: report.md and report.html (one list of blocks, yolo_mlops.analysis.document) with PNG plots of
the step time breakdown and the kernel mix (pyplot-free Agg figures, yolo_mlops.render)."""

from __future__ import annotations

import shutil
from pathlib import Path

from yolo_mlops import names
from yolo_mlops.analysis.communication import who_waits_text
from yolo_mlops.analysis.diagnosis import headline
from yolo_mlops.analysis.document import Block, Heading, Image, Paragraph, Table, render_html, render_markdown
from yolo_mlops.analysis.findings import Finding
from yolo_mlops.analysis.host import CUDA_SYNC_CATEGORY, DATA_LOADER_CATEGORY, OPTIMIZER_CATEGORY
from yolo_mlops.analysis.idle_attribution import BETWEEN_PHASES
from yolo_mlops.analysis.metrics import category_token
from yolo_mlops.analysis.model import RankAnalysis, TraceAnalysis
from yolo_mlops.analysis.step_activity import boundary_text
from yolo_mlops.labels import PHASE_LABEL_PREFIX, PHASE_ORDER
from yolo_mlops.render import fmt, new_figure, save_figure

STEP_PLOT = "step_time_breakdown.png"
KERNEL_PLOT = "kernel_mix.png"
NVML_PLOT = "nvml.png"


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
    blocks += _communication_blocks(analysis)
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
    boundaries = sorted({step for r in analysis.ranks for step in r.boundary_steps})
    if boundaries:
        blocks.append(Paragraph(boundary_text(boundaries)))
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


def _communication_blocks(analysis: TraceAnalysis) -> list[Block]:
    """A data-parallel job's collectives per rank; a figure not measured shows as `-`, and the note says why."""
    comm = analysis.communication
    if comm is None:
        return []
    rows = [
        [
            str(r.rank),
            r.found_from or "-",
            fmt(r.calls_per_step, ".2f"),
            fmt(r.calls_per_optimizer_step, ".2f"),
            ", ".join(f"{name} {n}" for name, n in (r.calls_by_kind or r.calls_by_collective).items()) or "-",
            "-" if r.collective_bytes is None or not r.steps else f"{r.collective_bytes / 2**20 / r.steps:.2f}",
            _pct_cell(r.collective_pct),
            _pct_cell(r.exposed_pct),
            _pct_cell(r.wait_pct),
        ]
        for r in comm.ranks
    ]
    text = f"Backend {comm.backend}, world size {comm.world_size}." + (
        f" {comm.note[0].upper()}{comm.note[1:]}." if comm.note else ""
    )
    waits: list[Block] = []
    if comm.matched_collectives:
        waits = [Heading("Who waits for whom", 3), Paragraph(who_waits_text(comm))]
        if comm.stalls:
            waits.append(
                Table(
                    ["step", "epoch boundary", "rank waited for", "lead ms", "what it was doing"],
                    [
                        [
                            str(s.step),
                            "yes" if s.boundary else "no",
                            str(s.rank),
                            f"{s.lead_ms:.1f}",
                            s.doing + (f" (+{s.activity_ms:.0f} ms)" if s.activity else ""),
                        ]
                        for s in comm.stalls
                    ],
                )
            )
    return [
        Heading("Communication"),
        Paragraph(text),
        Table(
            [
                "rank",
                "found from",
                "calls/step",
                "calls/optimizer step",
                "calls in the window",
                "message MiB/step",
                "collective %",
                "exposed %",
                "wait %",
            ],
            rows,
        ),
        *waits,
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
        ax.bar(labels, values, bottom=bottom, label=category_token(category))
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
