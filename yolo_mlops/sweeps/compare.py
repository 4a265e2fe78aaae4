"""The comparison: one typed row per variant (speed-up vs baseline with its CI, accuracy and GPU deltas), the
best variant with its evidence, and the parent run's `sweep/*` metrics."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

from yolo_mlops import names
from yolo_mlops.render import is_missing
from yolo_mlops.sweeps import blocks, stats, variants
from yolo_mlops.sweeps.collect import LOSS_TOTAL, ChildRecord
from yolo_mlops.sweeps.plan import SweepPlan

NAN = math.nan


NO_BEST = "none"  # SweepReport.best when nothing was measured to name a best from

RowStatus = Literal["", "ok", "partial", "failed", "skipped"]  # "": not judged yet; partial: some repeats did not count
# the speed-up's verdict, or why the row has none: reference (the baseline itself), no baseline, no paired block
RowVerdict = stats.Verdict | Literal["", "reference", "no baseline to compare with", "no paired block"]


@dataclass
class VariantRow:
    """One variant of a sweep. NaN: not measured (skipped, failed, no baseline, no GPU metrics)."""

    variant: str
    status: RowStatus = ""
    repeats_ok: int = 0
    repeats_failed: int = 0
    steps: int = 0  # steady steps over all counted repeats
    median_step_ms: float = NAN
    images_per_s: float = NAN
    speedup: float = NAN  # median images/s vs the baseline's
    ci_low: float = NAN
    ci_high: float = NAN
    step_time_ratio: float = NAN
    verdict: RowVerdict = ""
    loss_delta: float = NAN
    loss_flag: bool = False  # outside the baseline repeats' spread
    map_delta: float = NAN
    map_flag: bool = False
    gpu_util_delta_pct: float = NAN
    peak_mem_delta_gib: float = NAN
    reason: str = ""  # why repeats did not count, why skipped or failed
    note: str = ""  # the variant's catalogue note
    method: str = ""  # how the CI was computed (pooled repeats, or paired by block over lanes)
    lanes: list[blocks.LaneComparison] = field(default_factory=list)  # over lanes: each lane's own comparison


@dataclass
class SweepReport:
    rows: list[VariantRow]
    best: str
    best_evidence: str
    failed_children: int
    total_children: int
    metrics: dict[str, float] = field(default_factory=dict)  # the parent run's sweep/* metrics


def compare(plan: SweepPlan, records: list[ChildRecord], seed: int = stats.DEFAULT_SEED) -> SweepReport:
    groups: dict[str, list[ChildRecord]] = {n: [] for n in plan.variants}
    for rec in records:
        groups[rec.outcome.child.variant].append(rec)
    usable = {n: [r.repeat for r in recs if r.repeat is not None] for n, recs in groups.items()}
    base = usable.get(variants.BASELINE, [])
    rows = [_row(plan, name, groups[name], usable[name], base, seed) for name in plan.variants]
    if plan.multi_lane:
        base_blocks = _block_repeats(groups.get(variants.BASELINE, []))
        for row in rows:
            if row.variant != variants.BASELINE and base and usable[row.variant]:
                _paired(row, base_blocks, _block_repeats(groups[row.variant]), seed)
    best, evidence = pick_best(rows)
    failed = sum(1 for r in records if r.outcome.status == "failed")
    return SweepReport(
        rows=rows,
        best=best,
        best_evidence=evidence,
        failed_children=failed,
        total_children=len(records),
        metrics=sweep_metrics(rows, failed, len(records)),
    )


def _row(
    plan: SweepPlan, name: str, recs: list[ChildRecord], reps: list[stats.Repeat], base: list[stats.Repeat], seed: int
) -> VariantRow:
    row = VariantRow(
        variant=name,
        repeats_ok=len(reps),
        repeats_failed=sum(r.outcome.status == "failed" for r in recs),
        steps=sum(len(r.step_ms) for r in reps),
        note=variants.notes(name, plan.custom_variants) if name not in plan.skipped else "",
    )
    problems = sorted({r.problem for r in recs if r.problem})
    if name in plan.skipped:
        row.status, row.reason = "skipped", plan.skipped[name]
        return row
    if not reps:
        row.status, row.reason = "failed", "; ".join(problems) or "no child finished"
        return row
    row.status = "ok" if not problems else "partial"
    row.reason = "; ".join(problems)
    summary = stats.summarise(reps)
    row.median_step_ms, row.images_per_s = float(summary.median_step_ms), float(summary.images_per_s)
    if name == variants.BASELINE:
        row.speedup, row.verdict = 1.0, "reference"
    elif base:
        cmp = stats.compare(base, reps, seed=seed)
        row.speedup, row.ci_low, row.ci_high = float(cmp.speedup), float(cmp.ci_low), float(cmp.ci_high)
        row.step_time_ratio, row.verdict, row.method = float(cmp.step_time_ratio), cmp.verdict, cmp.method
        _accuracy(row, base, reps)
        _gpu_deltas(row, base, reps)
    else:
        row.verdict = "no baseline to compare with"
    return row


def _block_repeats(recs: list[ChildRecord]) -> list[blocks.BlockRepeat]:
    return [
        blocks.BlockRepeat(
            lane=r.outcome.child.lane, block=r.outcome.child.block, variant=r.outcome.child.variant, repeat=r.repeat
        )
        for r in recs
        if r.repeat is not None
    ]


def _paired(row: VariantRow, base: list[blocks.BlockRepeat], var: list[blocks.BlockRepeat], seed: int) -> None:
    """Over several lanes the speed-up comes from children paired within blocks, so lane speeds cancel."""
    try:
        cmp = blocks.compare_paired(base, var, seed=seed)
    except ValueError as exc:
        row.speedup = row.ci_low = row.ci_high = row.step_time_ratio = NAN
        row.verdict, row.method = "no paired block", str(exc)
        return
    row.speedup, row.ci_low, row.ci_high = float(cmp.speedup), float(cmp.ci_low), float(cmp.ci_high)
    row.step_time_ratio, row.verdict, row.method = float(cmp.step_time_ratio), cmp.verdict, cmp.method
    row.lanes = list(cmp.lanes)


def _values(reps: list[stats.Repeat], key: str) -> list[float]:
    return [r.metrics[key] for r in reps if key in r.metrics]


def _accuracy(row: VariantRow, base: list[stats.Repeat], reps: list[stats.Repeat]) -> None:
    loss = stats.accuracy_check(LOSS_TOTAL, _values(base, LOSS_TOTAL), _values(reps, LOSS_TOTAL))
    if loss is not None:
        row.loss_delta, row.loss_flag = float(loss.delta), bool(loss.flagged)
    mp = stats.accuracy_check(names.VAL_MAP50_95, _values(base, names.VAL_MAP50_95), _values(reps, names.VAL_MAP50_95))
    if mp is not None:
        row.map_delta, row.map_flag = float(mp.delta), bool(mp.flagged)


def _gpu_metric(metrics: dict[str, float], kind: str) -> str | None:
    """The GPU metric the children have: SM utilisation (GPM) or NVML's coarse one; peak memory used."""
    preferred: tuple[str, ...]  # the metric names to try first, best first
    if kind == "util":
        preferred, pick = (names.GPU_SM_UTIL_MEAN, names.GPU_UTIL_MEAN), ("util_pct", "_mean")
    else:
        preferred, pick = (names.GPU_MEM_USED_MAX,), ("peak", "gib")
    for key in preferred:
        if key in metrics:
            return key
    return next((k for k in sorted(metrics) if k.startswith(names.GPU) and pick[0] in k and k.endswith(pick[1])), None)


def _gpu_deltas(row: VariantRow, base: list[stats.Repeat], reps: list[stats.Repeat]) -> None:
    util = _gpu_metric(base[0].metrics, "util")
    if util is not None and (delta := stats.median_delta(_values(base, util), _values(reps, util))) is not None:
        row.gpu_util_delta_pct = float(delta)
    mem = _gpu_metric(base[0].metrics, "mem")
    if mem is not None and (delta := stats.median_delta(_values(base, mem), _values(reps, mem))) is not None:
        row.peak_mem_delta_gib = float(delta)


def pick_best(rows: list[VariantRow]) -> tuple[str, str]:
    """The fastest variant measurably faster than the baseline with accuracy inside the baseline's spread; the
    baseline when the variants were measured and none was; NO_BEST when there is nothing to name one from (the
    baseline, or every variant, measured nothing)."""
    base = next((r for r in rows if r.variant == variants.BASELINE), None)
    if base is None or not base.repeats_ok:
        why = base.reason if base is not None and base.reason else "no child finished"
        return NO_BEST, f"no best: the baseline measured nothing ({why})"
    compared = [
        r for r in rows if r.variant != variants.BASELINE and r.verdict in (stats.FASTER, stats.SLOWER, stats.SAME)
    ]
    if not compared:
        return NO_BEST, "no best: no variant was measured against the baseline"
    candidates = [r for r in rows if r.verdict == stats.FASTER and not r.loss_flag and not r.map_flag]
    if not candidates:
        slower = ", ".join(r.variant for r in rows if r.verdict == stats.SLOWER) or "none"
        return variants.BASELINE, (
            f"no variant was measurably faster without changing accuracy (measurably slower: {slower})"
        )
    row = max(candidates, key=lambda r: r.speedup)
    return row.variant, (
        f"{row.variant}: {row.speedup:.3f}x images/s vs baseline "
        f"(95% CI {row.ci_low:.3f}-{row.ci_high:.3f}, {row.repeats_ok} repeats, "
        f"{row.images_per_s:.1f} images/s, median step {row.median_step_ms:.1f} ms); "
        "accuracy within the baseline spread"
    )


def sweep_metrics(rows: list[VariantRow], failed: int, total: int) -> dict[str, float]:
    metrics: dict[str, float] = {names.SWEEP_CHILDREN_FAILED: float(failed), names.SWEEP_CHILDREN_TOTAL: float(total)}
    for row in rows:
        for column, metric in names.sweep_variant_metrics(variants.metric_suffix(row.variant)).items():
            value = getattr(row, column)
            if not is_missing(value):
                metrics[metric] = float(value)
    return metrics
