"""optimize: diagnosis findings -> the variants to sweep -> which recommendations held, and by how much."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from yolo_mlops import names
from yolo_mlops.errors import ConfigError
from yolo_mlops.names import optimize_saving_metrics
from yolo_mlops.render import fmt, markdown_table
from yolo_mlops.sweeps import stats, variants
from yolo_mlops.sweeps.compare import VariantRow
from yolo_mlops.sweeps.comparison_report import ci_text
from yolo_mlops.tracking import writes

if TYPE_CHECKING:
    from yolo_mlops.analysis import Finding
    from yolo_mlops.tracking.connection import MlflowClient


@dataclass(frozen=True)
class Recommendations:
    variants: list[str]  # canonical expressions to sweep, in first-recommended order
    sources: dict[str, list[str]]  # variant -> rules of the findings that recommended it
    rejected: dict[str, str]  # recommended expression -> why it is not swept (unknown, conflicting, rejected)
    # variant -> the largest estimated saving (% of step time) among the findings that recommended it
    estimated_saving_pct: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class RecommendationRow:
    variant: str
    recommended_by: str  # comma-separated rules
    outcome: str  # held | faster but accuracy changed | did not hold | skipped | failed | not swept | ...
    speedup: float = math.nan  # NaN: not measured
    ci_low: float = math.nan
    ci_high: float = math.nan
    verdict: str = ""
    reason: str = ""
    estimated_saving_pct: float = math.nan  # the diagnosis' upper bound; NaN: no finding estimated one
    measured_saving_pct: float = math.nan  # step time saved, from the measured speed-up: 100 * (1 - 1/speedup)


def measured_saving_pct(speedup: float) -> float:
    """Share of step time a variant saved, from its throughput speed-up (images/s ratio vs the baseline)."""
    return 100.0 * (1.0 - 1.0 / speedup) if speedup > 0 else math.nan


def recommendations(findings: list[Finding]) -> Recommendations:
    """The variants the findings recommend: canonical, de-duplicated, each attributed to its rules; names
    the catalogue rejects are listed with the reason instead of being swept."""
    out: list[str] = []
    sources: dict[str, list[str]] = {}
    rejected: dict[str, str] = {}
    estimated: dict[str, float] = {}
    for finding in findings:
        for expr in finding.recommended_variants:
            try:
                name = variants.canonical(expr)
            except ConfigError as exc:
                rejected[expr] = str(exc)
                continue
            if name == variants.BASELINE:
                continue
            if name not in out:
                out.append(name)
            rules = sources.setdefault(name, [])
            if finding.rule not in rules:
                rules.append(finding.rule)
            if finding.saving is not None:
                estimated[name] = max(estimated.get(name, 0.0), finding.saving.pct_of_step)
    return Recommendations(out, sources, rejected, estimated)


def _outcome(row: VariantRow | None) -> tuple[str, str]:
    """(outcome, verdict) of one recommended variant from its comparison row."""
    if row is None:
        return "not run", "not run"
    verdict = row.verdict or row.status or "not run"
    if row.status in ("skipped", "failed"):
        return row.status, verdict
    if verdict == stats.FASTER:
        return ("faster but accuracy changed" if row.loss_flag or row.map_flag else "held"), verdict
    if verdict in (stats.SLOWER, stats.SAME):
        return "did not hold", verdict
    return verdict, verdict


def _pct(value: float, prefix: str = "") -> str:
    text = fmt(value, ".1f")
    return text if text == "-" else f"{prefix}{text}%"


def saving_metrics(rows: list[RecommendationRow]) -> dict[str, float]:
    """`optimize/<variant>_saving_pct_estimated` and `_measured` for every swept recommendation with both."""
    out: dict[str, float] = {}
    for row in rows:
        if math.isnan(row.estimated_saving_pct) or math.isnan(row.measured_saving_pct):
            continue
        names_ = optimize_saving_metrics(variants.metric_suffix(row.variant))
        out[names_["estimated"]] = row.estimated_saving_pct
        out[names_["measured"]] = row.measured_saving_pct
    return out


def log_recommendations(
    mlflow: MlflowClient, parent_run_id: str, rows: list[RecommendationRow], markdown_text: str
) -> None:
    """The recommendation report and each recommendation's estimated and measured saving on the sweep's parent."""
    writes.log_text(mlflow, parent_run_id, markdown_text, names.SWEEP_RECOMMENDATIONS_MD)
    writes.log_values(mlflow, parent_run_id, metrics=saving_metrics(rows))


def recommendation_report(
    recs: Recommendations, rows: list[VariantRow] | None, profile_run_id: str
) -> tuple[list[RecommendationRow], str]:
    """Which recommendations held (measurably faster, accuracy unchanged) and by how much; rows + Markdown."""
    by_variant = {row.variant: row for row in (rows or [])}
    out = []
    for name in recs.variants:
        row = by_variant.get(name)
        outcome, verdict = _outcome(row)
        out.append(
            RecommendationRow(
                variant=name,
                recommended_by=",".join(recs.sources.get(name, [])),
                outcome=outcome,
                speedup=row.speedup if row else math.nan,
                ci_low=row.ci_low if row else math.nan,
                ci_high=row.ci_high if row else math.nan,
                verdict=verdict,
                reason=row.reason if row else "",
                estimated_saving_pct=recs.estimated_saving_pct.get(name, math.nan),
                measured_saving_pct=measured_saving_pct(row.speedup) if row else math.nan,
            )
        )
    out += [
        RecommendationRow(variant=expr, recommended_by="", outcome="not swept", reason=why)
        for expr, why in recs.rejected.items()
    ]
    lines = [f"# Optimize: recommendations from profile run `{profile_run_id}`", ""]
    if not out:
        lines.append("The diagnosis of the baseline run recommended no variants: nothing to sweep.")
    else:
        lines.append(
            markdown_table(
                (
                    "variant",
                    "recommended by",
                    "outcome",
                    "speed-up",
                    "95% CI",
                    "estimated saving",
                    "measured saving",
                    "note",
                ),
                [
                    (
                        f"`{r.variant}`",
                        r.recommended_by or "-",
                        r.outcome,
                        fmt(r.speedup, ".3f"),
                        ci_text(r.ci_low, r.ci_high),
                        _pct(r.estimated_saving_pct, "<= "),
                        _pct(r.measured_saving_pct),
                        r.reason,
                    )
                    for r in out
                ],
            )
        )
        lines += [
            "",
            "Estimated saving: the diagnosis' upper bound (% of step time) of the findings that "
            "recommended the variant; measured saving: 100 x (1 - 1/speed-up).",
        ]
        held = [r for r in out if r.outcome == "held"]
        lines += [
            "",
            f"{len(held)} of {len(recs.variants)} swept recommendations held"
            + (": " + ", ".join(f"`{r.variant}` {r.speedup:.3f}x" for r in held) if held else "."),
        ]
    return out, "\n".join(lines)
