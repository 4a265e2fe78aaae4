"""Alignment of NVML samples to training steps, summaries, timeline files.

Everything here is a pure function over plain data (numpy arrays, dataclasses) except
write_timeline, which writes files. `summarise` gives an NvmlSummary: typed statistics
for code that reasons about the run (the diagnosis); `NvmlSummary.as_metrics` names
them `gpu/*` for MLflow. The MLflow calls themselves live in yolo_mlops.tracking.
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path

import numpy as np

from yolo_mlops import names
from yolo_mlops.names import NVML_META_JSON, NVML_TIMELINE_CSV, NVML_TIMELINE_PNG, file_name
from yolo_mlops.nvml.backend import (
    CLOCKS_EVENT_POWER_BITS,
    CLOCKS_EVENT_REASONS,
    CLOCKS_EVENT_THERMAL_BITS,
    METRIC_NAMES,
)
from yolo_mlops.nvml.sampler import Timeline
from yolo_mlops.render import new_figure, save_figure

TIMELINE_CSV = file_name(NVML_TIMELINE_CSV)  # files of the folder it writes (nvml/, or a rank's)
TIMELINE_PNG = file_name(NVML_TIMELINE_PNG)
TIMELINE_META = file_name(NVML_META_JSON)

# Interval-averaged utilisation / rate metrics: mean, p95, max and profiled/unprofiled means.
_UTIL_METRICS = (
    "sm_util_pct",
    "sm_occupancy_pct",
    "tensor_util_pct",
    "dram_bw_util_pct",
    "gpu_util_pct",
    "mem_util_pct",
    "pcie_tx_mib_s",
    "pcie_rx_mib_s",
    "nvlink_tx_mib_s",
    "nvlink_rx_mib_s",
)
# Per-step history: what MLflow charts against the step axis.
STEP_HISTORY_METRICS = (
    "sm_util_pct",
    "dram_bw_util_pct",
    "tensor_util_pct",
    "gpu_util_pct",
    "mem_util_pct",
    "power_w",
    "mem_used_gib",
)


@dataclass
class AlignedTimeline:
    """A Timeline plus, per sample, its training step (-1 outside steps) and profiler state."""

    timeline: Timeline
    step: np.ndarray  # int64, index into the step sequences, -1 outside every step
    profiler_active: np.ndarray  # bool
    in_training: np.ndarray  # bool: inside [first step start, last step end] (all rows if no steps)
    step_start_ns: np.ndarray  # int64, as given
    step_end_ns: np.ndarray  # int64, as given
    step_profiler_active: np.ndarray  # bool, as given


def sample_midpoints_ns(timeline: Timeline) -> np.ndarray:
    """Where each sample belongs in time: the middle of the interval its averages cover."""
    return timeline.t_ns - timeline.interval_ns // 2


def profiler_windows_ns(
    step_start_ns: np.ndarray, step_end_ns: np.ndarray, profiler_active: np.ndarray
) -> list[tuple[int, int]]:
    """[start, end] of each run of consecutive profiled steps (gaps inside a run count)."""
    order = np.argsort(step_start_ns, kind="stable")
    windows: list[tuple[int, int]] = []
    current: list[int] | None = None
    for i in order:
        if profiler_active[i]:
            if current is None:
                current = [int(step_start_ns[i]), int(step_end_ns[i])]
            else:
                current[1] = max(current[1], int(step_end_ns[i]))
        elif current is not None:
            windows.append((current[0], current[1]))
            current = None
    if current is not None:
        windows.append((current[0], current[1]))
    return windows


def align(
    timeline: Timeline,
    step_start_ns: Sequence[int] | np.ndarray,
    step_end_ns: Sequence[int] | np.ndarray,
    profiler_active: Sequence[bool] | np.ndarray,
) -> AlignedTimeline:
    """Mark every sample with its training step (index into the sequences, -1 outside any
    step) and whether the profiler was active, judged at the sample's interval midpoint.

    The profiler counts as active over a whole run of consecutive profiled steps,
    including the gaps between them (the profiler does not pause there).
    """
    starts = np.asarray(step_start_ns, dtype=np.int64)
    ends = np.asarray(step_end_ns, dtype=np.int64)
    active = np.asarray(profiler_active, dtype=bool)
    if not (starts.shape == ends.shape == active.shape):
        raise ValueError("step_start_ns, step_end_ns and profiler_active must have equal lengths")
    mid = sample_midpoints_ns(timeline)
    step = np.full(mid.shape, -1, np.int64)
    profiled = np.zeros(mid.shape, bool)
    in_training = np.ones(mid.shape, bool)
    if starts.size:
        order = np.argsort(starts, kind="stable")
        sorted_starts, sorted_ends = starts[order], ends[order]
        candidate = np.searchsorted(sorted_starts, mid, side="right") - 1
        valid = candidate >= 0
        inside = np.zeros(mid.shape, bool)
        inside[valid] = mid[valid] <= sorted_ends[candidate[valid]]
        step[inside] = order[candidate[inside]]
        for window_start, window_end in profiler_windows_ns(starts, ends, active):
            profiled |= (mid >= window_start) & (mid <= window_end)
        in_training = (mid >= np.min(starts)) & (mid <= np.max(ends))
    return AlignedTimeline(timeline, step, profiled, in_training, starts, ends, active)


# ---------------------------------------------------------------------------
# Statistics
# ---------------------------------------------------------------------------


def weighted_mean(values: np.ndarray, weights: np.ndarray) -> float | None:
    ok = np.isfinite(values) & (weights > 0)
    if not ok.any():
        return None
    return float(np.sum(values[ok] * weights[ok]) / np.sum(weights[ok]))


def weighted_quantile(values: np.ndarray, weights: np.ndarray, q: float) -> float | None:
    """Smallest value v with (time share of samples <= v) >= q."""
    ok = np.isfinite(values) & (weights > 0)
    if not ok.any():
        return None
    order = np.argsort(values[ok], kind="stable")
    sorted_values, sorted_weights = values[ok][order], weights[ok][order]
    cumulative = np.cumsum(sorted_weights) / np.sum(sorted_weights)
    index = int(np.searchsorted(cumulative, q - 1e-12, side="left"))
    return float(sorted_values[min(index, sorted_values.size - 1)])


def _finite_max(values: np.ndarray) -> float | None:
    ok = np.isfinite(values)
    return float(values[ok].max()) if ok.any() else None


def _finite_min(values: np.ndarray) -> float | None:
    ok = np.isfinite(values)
    return float(values[ok].min()) if ok.any() else None


def _training_duration_s(aligned: AlignedTimeline) -> float:
    if aligned.step_start_ns.size:
        return (int(aligned.step_end_ns.max()) - int(aligned.step_start_ns.min())) / 1e9
    tl = aligned.timeline
    return (int(tl.t_ns.max()) - tl.start_ns) / 1e9 if len(tl) else 0.0


def _energy_j(aligned: AlignedTimeline, rows: np.ndarray, weights_s: np.ndarray) -> float | None:
    """Energy of all watched GPUs over the training span.

    From the energy counter when it has two readings in the span (its average power over
    the readings, times the span), else by integrating power_w over the sample intervals.
    """
    tl = aligned.timeline
    duration_s = _training_duration_s(aligned)
    total, have = 0.0, False
    counter, power = tl.columns.get("energy_j"), tl.columns.get("power_w")
    for device in np.unique(tl.gpu[rows]):
        dev_rows = rows & (tl.gpu == device)
        if counter is not None:
            ok = dev_rows & np.isfinite(counter)
            idx = np.flatnonzero(ok)
            if idx.size >= 2 and tl.t_ns[idx[-1]] > tl.t_ns[idx[0]]:
                dt_s = (int(tl.t_ns[idx[-1]]) - int(tl.t_ns[idx[0]])) / 1e9
                total += (counter[idx[-1]] - counter[idx[0]]) / dt_s * duration_s
                have = True
                continue
        if power is not None:
            ok = dev_rows & np.isfinite(power)
            if ok.any():
                total += float(np.sum(power[ok] * weights_s[ok]))
                have = True
    return total if have else None


@dataclass(frozen=True)
class ColumnStats:
    """One NVML timeline column's statistics over the training span; None: not measured (or not computed for
    this kind of column). `value` is the single figure of a limit or capacity column (power_limit_w,
    mem_total_gib, ...)."""

    mean: float | None = None
    p95: float | None = None
    max: float | None = None
    min: float | None = None
    mean_profiled: float | None = None  # over the samples inside the profiler's active steps
    mean_unprofiled: float | None = None
    value: float | None = None

    def measured(self) -> dict[str, float]:
        """statistic -> value of what was measured; the statistic of `value` is "" (`names.gpu_metric`)."""
        return {
            ("" if f.name == "value" else f.name): v for f in fields(self) if (v := getattr(self, f.name)) is not None
        }


class _Statistic:
    """A read-only attribute of NvmlSummary: one statistic of one column, None where not measured."""

    def __init__(self, column: str, statistic: str = "") -> None:
        self.column, self.statistic = column, statistic

    def __get__(self, summary: NvmlSummary | None, owner: type | None = None) -> float | None:
        return None if summary is None else summary.stat(self.column, self.statistic)


@dataclass(frozen=True)
class NvmlSummary:
    """What the NVML sampler measured over the training span, typed.

    Means are time-weighted over the sample intervals inside the training span. Absent or None means
    "not measured" (no sampler, unsupported metric), never zero. `as_metrics` gives everything here under
    its `gpu/*` MLflow names.
    """

    backend: str
    samples: int = 0
    stats: dict[str, ColumnStats] = field(default_factory=dict)  # NVML timeline column -> its statistics
    # % of the training time with a clocks event: the groups "power" and "thermal", then each reason seen;
    # None: the clocks-event reasons were not measured
    clocks_event_pct: dict[str, float] | None = None
    energy_j: float | None = None  # all watched GPUs over the training span
    energy_per_image_j: float | None = None

    def stat(self, column: str, statistic: str = "") -> float | None:
        """One statistic of a column (`mean`, `p95`, ...; "" for a limit or capacity column's value)."""
        stats = self.stats.get(column)
        return None if stats is None else getattr(stats, statistic or "value")

    def as_metrics(self) -> dict[str, float]:
        """Under the `gpu/*` MLflow names: every statistic of every column measured, the clocks-event shares
        (`gpu/clocks_event_<group or reason>_pct`), energy and energy per image."""
        out = {
            names.gpu_metric(column, statistic): value
            for column, stats in self.stats.items()
            for statistic, value in stats.measured().items()
        }
        out.update({names.clocks_event_metric(reason): pct for reason, pct in (self.clocks_event_pct or {}).items()})
        if self.energy_j is not None:
            out[names.GPU_ENERGY] = self.energy_j
        if self.energy_per_image_j is not None:
            out[names.GPU_ENERGY_PER_IMAGE] = self.energy_per_image_j
        return out

    # the statistics the diagnosis and the reports read
    sm_util_pct_mean = _Statistic("sm_util_pct", "mean")
    dram_bw_util_pct_mean = _Statistic("dram_bw_util_pct", "mean")
    gpu_util_pct_mean = _Statistic("gpu_util_pct", "mean")
    tensor_util_pct_mean = _Statistic("tensor_util_pct", "mean")
    mem_used_gib_max = _Statistic("mem_used_gib", "max")
    mem_total_gib = _Statistic("mem_total_gib")
    power_w_mean = _Statistic("power_w", "mean")
    sm_clock_mhz_mean = _Statistic("sm_clock_mhz", "mean")
    sm_clock_max_mhz = _Statistic("sm_clock_max_mhz")
    power_limit_w = _Statistic("power_limit_w")
    temp_c_max = _Statistic("temp_c", "max")
    pcie_gen = _Statistic("pcie_gen")
    pcie_width = _Statistic("pcie_width")

    @property
    def clocks_events(self) -> tuple[str, ...] | None:
        """Clocks-event reasons seen while training; None: reasons not measured."""
        if self.clocks_event_pct is None:
            return None
        return tuple(r for r in CLOCKS_EVENT_REASONS if r in self.clocks_event_pct)


def summarise(aligned: AlignedTimeline, images_per_step: float | Sequence[float] | np.ndarray | None) -> NvmlSummary:
    """The run's NVML summary over the training span, time-weighted by sample interval.

    Only what was measured appears; the null backend (no rows) gives an empty summary.
    `images_per_step` counts images per step over all watched GPUs: one number for every
    step, or one entry per step (e.g. StepTimes.images, for a short last batch).
    """
    tl = aligned.timeline
    if len(tl) == 0:
        return NvmlSummary(tl.backend)
    measured: dict[str, dict[str, float]] = {}
    clocks: dict[str, float] | None = None
    weights_s = tl.interval_ns.astype(np.float64) / 1e9
    rows = aligned.in_training
    w_rows = np.where(rows, weights_s, 0.0)
    w_profiled = np.where(rows & aligned.profiler_active, weights_s, 0.0)
    w_unprofiled = np.where(rows & ~aligned.profiler_active, weights_s, 0.0)

    for metric, column in tl.columns.items():
        put = _putter(measured, metric)
        if metric in _UTIL_METRICS:
            put("mean", weighted_mean(column, w_rows))
            put("p95", weighted_quantile(column, w_rows, 0.95))
            put("max", _finite_max(column[rows]))
            if aligned.step_start_ns.size:
                put("mean_profiled", weighted_mean(column, w_profiled))
                put("mean_unprofiled", weighted_mean(column, w_unprofiled))
        elif metric == "mem_used_gib":
            put("mean", weighted_mean(column, w_rows))
            put("max", _finite_max(column[rows]))
        elif metric in ("mem_total_gib", "sm_clock_max_mhz"):  # capacities: the largest seen
            put("", _finite_max(column[rows]))
        elif metric == "power_w":
            put("mean", weighted_mean(column, w_rows))
            put("p95", weighted_quantile(column, w_rows, 0.95))
            put("max", _finite_max(column[rows]))
        elif metric in ("sm_clock_mhz", "mem_clock_mhz"):
            put("mean", weighted_mean(column, w_rows))
            put("min", _finite_min(column[rows]))
        elif metric == "temp_c":
            put("mean", weighted_mean(column, w_rows))
            put("max", _finite_max(column[rows]))
        elif metric == "clocks_event_mask":
            clocks = _clocks_event_pct(column, w_rows)
        elif metric in ("power_limit_w", "pcie_gen", "pcie_width"):  # the tightest limit / narrowest link seen
            put("", _finite_min(column[rows]))

    energy = _finite(_energy_j(aligned, rows, weights_s))
    images = _total_images(images_per_step, int(aligned.step_start_ns.size))
    per_image = _finite(energy / images) if energy is not None and images else None
    stats = {column: ColumnStats(**{k or "value": v for k, v in values.items()}) for column, values in measured.items()}
    return NvmlSummary(tl.backend, len(tl), stats, clocks, energy, per_image)


def _finite(value: float | None) -> float | None:
    return float(value) if value is not None and math.isfinite(value) else None


def _putter(stats: dict[str, dict[str, float]], column: str):
    """Store one statistic of `column` when it was measured (finite)."""

    def put(statistic: str, value: float | None) -> None:
        finite = _finite(value)
        if finite is not None:
            stats.setdefault(column, {})[statistic] = finite

    return put


def _clocks_event_pct(column: np.ndarray, w_rows: np.ndarray) -> dict[str, float] | None:
    """% of the training time with a power / thermal clocks event, then each reason seen, by name."""
    measured = np.isfinite(column)
    masks = np.where(measured, column, 0).astype(np.int64)
    out: dict[str, float] = {}
    for group, bits in (("power", CLOCKS_EVENT_POWER_BITS), ("thermal", CLOCKS_EVENT_THERMAL_BITS)):
        share = _finite(weighted_mean(np.where(measured, ((masks & bits) != 0) * 100.0, np.nan), w_rows))
        if share is not None:
            out[group] = share
    if not out:
        return None
    for reason, bit in CLOCKS_EVENT_REASONS.items():
        share = _finite(weighted_mean(np.where(measured, ((masks & bit) != 0) * 100.0, np.nan), w_rows))
        if share:
            out[reason] = share
    return out


def summary_metrics(
    aligned: AlignedTimeline, images_per_step: float | Sequence[float] | np.ndarray | None
) -> dict[str, float]:
    """`summarise` under the `gpu/*` MLflow names (NvmlSummary.as_metrics); the null backend gives {}."""
    return summarise(aligned, images_per_step).as_metrics()


def _total_images(images_per_step: float | Sequence[float] | np.ndarray | None, n_steps: int) -> float:
    if images_per_step is None or n_steps == 0:
        return 0.0
    per_step = np.asarray(images_per_step, dtype=np.float64)
    if per_step.ndim == 0:  # one count for every step
        return float(per_step) * n_steps
    if per_step.size != n_steps:
        raise ValueError(f"images_per_step has {per_step.size} entries for {n_steps} steps")
    return float(per_step.sum())


def step_history(aligned: AlignedTimeline) -> list[tuple[int, str, float]]:
    """Per-step time-weighted means as (step, metric name, value), for MLflow step charts.

    Steps without a sample are absent (a step shorter than the sampling interval often
    has none); names are `gpu/<column>`, e.g. `gpu/sm_util_pct`.
    """
    tl = aligned.timeline
    out: list[tuple[int, str, float]] = []
    if len(tl) == 0:
        return out
    weights_s = tl.interval_ns.astype(np.float64) / 1e9
    in_step = (aligned.step >= 0) & (weights_s > 0)
    n_steps = int(aligned.step.max()) + 1 if in_step.any() else 0
    # One pass per metric (bincount by step), not one pass over all rows per step.
    means: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for metric in STEP_HISTORY_METRICS:
        column = tl.columns.get(metric)
        if column is None:
            continue
        ok = in_step & np.isfinite(column)
        steps = aligned.step[ok]
        weight = np.bincount(steps, weights=weights_s[ok], minlength=n_steps)
        weighted = np.bincount(steps, weights=column[ok] * weights_s[ok], minlength=n_steps)
        means[metric] = (weighted, weight)
    for step in np.unique(aligned.step[in_step]):
        for metric, (weighted, weight) in means.items():
            if weight[step] > 0:
                out.append((int(step), names.gpu_metric(metric), float(weighted[step] / weight[step])))
    return out


# ---------------------------------------------------------------------------
# Files
# ---------------------------------------------------------------------------


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
