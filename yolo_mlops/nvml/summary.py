"""The statistics of an aligned NVML timeline: `summarise` gives an NvmlSummary, typed statistics for code that
reasons about the run (the diagnosis); `NvmlSummary.as_metrics` names them `gpu/*` and `step_history` gives the
per-step means MLflow charts. Pure functions over plain data; the MLflow calls live in yolo_mlops.tracking.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, fields

import numpy as np

from yolo_mlops import names
from yolo_mlops.nvml.alignment import AlignedTimeline
from yolo_mlops.nvml.backend import CLOCKS_EVENT_POWER_BITS, CLOCKS_EVENT_REASONS, CLOCKS_EVENT_THERMAL_BITS

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
