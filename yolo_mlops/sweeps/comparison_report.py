"""The comparison as people and tools read it: Markdown, a speed-up chart, the MLflow table and files on the
parent run, rows for a Prefect table artifact. Dicts and DataFrames exist only here, at those edges."""

from __future__ import annotations

import tempfile
from collections.abc import Iterable
from dataclasses import asdict, fields
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from yolo_mlops import names
from yolo_mlops.render import fmt, is_missing, markdown_table, new_figure, save_figure
from yolo_mlops.sweeps import stats
from yolo_mlops.sweeps.compare import SweepReport, VariantRow
from yolo_mlops.sweeps.plan import SweepPlan
from yolo_mlops.tracking import writes

if TYPE_CHECKING:
    from yolo_mlops.tracking.connection import MlflowClient

OUTSIDE_SPREAD = " (outside baseline spread)"
COLUMNS = (
    "variant",
    "status",
    "repeats",
    "images/s",
    "median step ms",
    "speed-up",
    "95% CI",
    "verdict",
    "loss delta",
    "mAP delta",
    "note",
)


def ci_text(low: float, high: float) -> str:
    return "-" if is_missing(low) else f"{fmt(low, '.3f')}-{fmt(high, '.3f')}"


def _cells(row: VariantRow) -> list[str]:
    return [
        f"`{row.variant}`",
        row.status,
        f"{row.repeats_ok} ok / {row.repeats_failed} failed",
        fmt(row.images_per_s, ".1f"),
        fmt(row.median_step_ms, ".1f"),
        fmt(row.speedup, ".3f"),
        ci_text(row.ci_low, row.ci_high),
        row.verdict,
        fmt(row.loss_delta, "+.4f") + (OUTSIDE_SPREAD if row.loss_flag else ""),
        fmt(row.map_delta, "+.4f") + (OUTSIDE_SPREAD if row.map_flag else ""),
        "; ".join(x for x in (row.reason, row.note) if x),
    ]


LANE_COLUMNS = ("variant", "lane", "blocks", "speed-up", "95% CI", "verdict", "disagrees with pooled")


def markdown(plan: SweepPlan, report: SweepReport) -> str:
    methods = sorted({r.method for r in report.rows if r.method and not is_missing(r.ci_low)})
    where = f"device `{plan.device}`"
    if plan.lanes:
        where = (
            f"lanes `{', '.join(lane.name for lane in plan.lanes)}`"
            + (f" of work pool `{plan.pool}`" if plan.pool else "")
            + f", {plan.isolation}"
        )
    if plan.multi_lane:
        estimate = (
            "Speed-up = geometric mean over blocks of the variant's images/s / the baseline's in the same "
            "block (same lane)"
        )
    else:
        estimate = "Speed-up = median images/s of the variant's repeats / baseline's"
    lines = [
        f"# Sweep: {len(plan.variants)} variants x {plan.repeats} repeats ({plan.order})",
        "",
        f"Model `{plan.base.model}`, imgsz {plan.base.imgsz}, batch {plan.base.batch}, "
        f"{where}, first {plan.warmup_steps} step(s) and the profiler window discarded.",
        "",
        f"**Best: `{report.best}`** - {report.best_evidence}",
        "",
        markdown_table(COLUMNS, [_cells(r) for r in report.rows]),
        "",
        f"Children: {report.total_children}, failed: {report.failed_children}. {estimate}; CI: "
        f"{'; '.join(methods) or 'none computed'}, {stats.DEFAULT_RESAMPLES} resamples, seeded. "
        "Verdict 'faster'/'slower' only when the CI excludes 1.0.",
    ]
    lane_rows = [
        [
            f"`{r.variant}`",
            lane.lane,
            lane.blocks,
            fmt(lane.speedup, ".3f"),
            ci_text(lane.ci_low, lane.ci_high),
            lane.verdict,
            "**yes**" if lane.disagrees else "no",
        ]
        for r in report.rows
        for lane in r.lanes
    ]
    if lane_rows:
        lines += ["", "## Per lane", "", markdown_table(LANE_COLUMNS, lane_rows)]
    if plan.multi_lane and plan.isolation == "side-by-side" and plan.pool is None:
        lines += [
            "",
            "Children on this machine's devices ran side by side and shared its CPUs, data loading and "
            "PCIe; `--isolation exclusive` runs them one at a time (the measured side-by-side effect: "
            "docs/benchmarks.md, Fleet sweep).",
        ]
    return "\n".join(lines)


def chart(report: SweepReport, path: Path) -> Path:
    """Bars of the speed-ups with their CI (green faster, red slower, grey no measurable difference)."""
    rows = [r for r in report.rows if not is_missing(r.speedup)]
    fig = new_figure(max(4.0, 1.1 * len(rows) + 2), 4)
    ax = fig.add_subplot()
    x = np.arange(len(rows))
    speed = np.array([r.speedup for r in rows], float)
    low = np.nan_to_num(speed - np.array([r.ci_low for r in rows], float), nan=0.0)
    high = np.nan_to_num(np.array([r.ci_high for r in rows], float) - speed, nan=0.0)
    colors = [
        "#2e7d32" if r.verdict == stats.FASTER else "#c62828" if r.verdict == stats.SLOWER else "#9e9e9e" for r in rows
    ]
    ax.bar(x, speed, color=colors, yerr=np.vstack([low, high]), capsize=4)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xticks(x, [r.variant.replace("+", "+\n") for r in rows], rotation=0, fontsize=8)
    ax.set_ylabel("speed-up vs baseline (images/s ratio)")
    ax.set_title("Sweep: speed-up with bootstrap 95% CI")
    return save_figure(fig, path, dpi=110)


TABLE_FIELDS = [f.name for f in fields(VariantRow) if f.name != "lanes"]  # lanes: a table of their own


def frame(rows: list[VariantRow]) -> pd.DataFrame:
    """The comparison as the MLflow table `sweep/comparison.json` (and comparison.csv) holds it."""
    return pd.DataFrame([{k: asdict(r)[k] for k in TABLE_FIELDS} for r in rows], columns=TABLE_FIELDS)


def log_report(mlflow: MlflowClient, parent_run_id: str, report: SweepReport, markdown_text: str) -> None:
    """Tags, metrics, the MLflow table and the report files on the parent run."""
    writes.log_values(
        mlflow,
        parent_run_id,
        metrics=report.metrics,
        tags={
            names.SWEEP_BEST_VARIANT: report.best,
            names.SWEEP_BEST_EVIDENCE: report.best_evidence[: names.TAG_MAX_CHARS],
            names.SWEEP_FAILED_CHILDREN: str(report.failed_children),
        },
    )
    table = frame(report.rows)
    writes.log_table(mlflow, parent_run_id, table, names.SWEEP_COMPARISON_TABLE)
    with tempfile.TemporaryDirectory(prefix="sweep-report-") as tmp:
        folder = Path(tmp)
        (folder / _file(names.SWEEP_COMPARISON_MD)).write_text(markdown_text)
        table.to_csv(folder / _file(names.SWEEP_COMPARISON_CSV), index=False)
        chart(report, folder / _file(names.SWEEP_SPEEDUP_PNG))
        writes.log_folder(mlflow, parent_run_id, folder, names.SWEEP_DIR)


def _file(artifact_path: str) -> str:
    """The file name of an artifact path inside its folder (`sweep/comparison.md` -> `comparison.md`)."""
    return PurePosixPath(artifact_path).name


def json_rows(rows: Iterable[Any]) -> list[dict[str, Any]]:
    """Dataclass rows for a Prefect table artifact: JSON-safe (NaN -> None), floats to 4 decimals."""
    return [
        {k: None if is_missing(v) else round(v, 4) if isinstance(v, float) else v for k, v in asdict(r).items()}
        for r in rows
    ]


def prefect_table(report: SweepReport) -> list[dict[str, Any]]:
    return [{k: row[k] for k in TABLE_FIELDS} for row in json_rows(report.rows)]
