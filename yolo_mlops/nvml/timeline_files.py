"""An aligned NVML timeline as files: the samples (CSV), a picture (PNG) and a JSON sidecar, the run's nvml/
artifacts."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import numpy as np

from yolo_mlops.names import NVML_META_JSON, NVML_TIMELINE_CSV, NVML_TIMELINE_PNG, file_name
from yolo_mlops.nvml.alignment import AlignedTimeline, profiler_windows_ns
from yolo_mlops.nvml.backend import METRIC_NAMES
from yolo_mlops.render import new_figure, save_figure

TIMELINE_CSV = file_name(NVML_TIMELINE_CSV)  # files of the folder it writes (nvml/, or a rank's)
TIMELINE_PNG = file_name(NVML_TIMELINE_PNG)
TIMELINE_META = file_name(NVML_META_JSON)


def _csv_cell(value: float) -> str:
    return "" if not math.isfinite(value) else repr(float(value))


def write_timeline(aligned: AlignedTimeline, out_dir: str | Path) -> list[Path]:
    """Write the raw timeline (CSV), a plot (PNG) and a small JSON sidecar; return the paths.

    CSV, not Parquet: a few MB at most (bounded ring), opens in MLflow's artifact viewer,
    a spreadsheet or pandas, and needs no pyarrow. Empty cells mean "not measured".
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tl = aligned.timeline
    metrics = [m for m in METRIC_NAMES if m in tl.columns]
    csv_path = out / TIMELINE_CSV
    with csv_path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["t_s", "t_ns", "gpu", "interval_s", "step", "profiler_active", *metrics])
        for i in range(len(tl)):
            writer.writerow(
                [
                    f"{(int(tl.t_ns[i]) - tl.start_ns) / 1e9:.6f}",
                    int(tl.t_ns[i]),
                    int(tl.gpu[i]),
                    f"{int(tl.interval_ns[i]) / 1e9:.6f}",
                    int(aligned.step[i]),
                    int(bool(aligned.profiler_active[i])),
                    *(_csv_cell(tl.columns[m][i]) for m in metrics),
                ]
            )
    meta_path = out / TIMELINE_META
    meta_path.write_text(
        json.dumps(
            {
                "backend": tl.backend,
                "interval_s": tl.interval_s,
                "rows": len(tl),
                "dropped_rows": tl.dropped_rows,
                "start_perf_counter_ns": tl.start_ns,
                "metrics": metrics,
                "reasons": tl.reasons,
            },
            indent=2,
        )
    )
    png_path = out / TIMELINE_PNG
    plot_timeline(aligned, png_path)
    return [csv_path, png_path, meta_path]


_MAX_STEP_LINES = 400  # beyond this, mark every k-th step boundary so the plot stays legible


def plot_timeline(aligned: AlignedTimeline, png_path: Path) -> None:
    """SM util, DRAM bandwidth util, memory and power over time; profiler window shaded,
    step boundaries as thin vertical lines."""
    tl = aligned.timeline
    t_s = (tl.t_ns - tl.start_ns) / 1e9
    panels = [
        ("SM / GPU util (%)", ["sm_util_pct", "tensor_util_pct", "gpu_util_pct"]),
        ("DRAM bw / mem util (%)", ["dram_bw_util_pct", "mem_util_pct"]),
        ("memory used (GiB)", ["mem_used_gib"]),
        ("power (W)", ["power_w"]),
    ]
    fig = new_figure(11, 9)
    axes = fig.subplots(len(panels), 1, sharex=True)
    starts_s = (aligned.step_start_ns - tl.start_ns) / 1e9
    stride = max(1, math.ceil(starts_s.size / _MAX_STEP_LINES))
    windows = profiler_windows_ns(aligned.step_start_ns, aligned.step_end_ns, aligned.step_profiler_active)
    devices = np.unique(tl.gpu)
    for ax, (label, metrics) in zip(axes, panels, strict=True):
        drawn = False
        for metric in metrics:
            column = tl.columns.get(metric)
            if column is None:
                continue
            for device in devices:
                mask = (tl.gpu == device) & np.isfinite(column)
                if mask.any():
                    suffix = f" gpu{device}" if devices.size > 1 else ""
                    # steps-pre: a value covers the interval that ends at its timestamp
                    ax.plot(t_s[mask], column[mask], lw=1.0, drawstyle="steps-pre", label=f"{metric}{suffix}")
                    drawn = True
        for window_start, window_end in windows:
            ax.axvspan(
                (window_start - tl.start_ns) / 1e9,
                (window_end - tl.start_ns) / 1e9,
                color="tab:orange",
                alpha=0.15,
                lw=0,
            )
        if starts_s.size:
            ax.vlines(starts_s[::stride], 0, 1, transform=ax.get_xaxis_transform(), colors="grey", lw=0.3, alpha=0.5)
        ax.set_ylabel(label, fontsize=8)
        if drawn:
            ax.legend(fontsize=7, loc="upper right")
        else:
            ax.text(0.5, 0.5, "not measured", transform=ax.transAxes, ha="center", va="center", color="grey")
    axes[-1].set_xlabel("time since sampler start (s)")
    step_note = f"every {stride}th step boundary" if stride > 1 else "step boundaries"
    fig.suptitle(f"NVML timeline (backend {tl.backend}); shaded: profiler active; grey lines: {step_note}", fontsize=9)
    save_figure(fig, png_path)
