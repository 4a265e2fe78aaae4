"""optimize: diagnosis findings -> the variants to sweep -> which recommendations held, and by how much."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from yolo_mlops.render import fmt, markdown_table
from yolo_mlops.run.config import ConfigError
from yolo_mlops.sweeps import stats, variants
from yolo_mlops.sweeps.compare import VariantRow
from yolo_mlops.sweeps.report import ci_text

if TYPE_CHECKING:
    from yolo_mlops.analysis import Finding


@dataclass(frozen=True)
class Recommendations:
    variants: list[str]  # canonical expressions to sweep, in first-recommended order
    sources: dict[str, list[str]]  # variant -> rules of the findings that recommended it
    rejected: dict[str, str]  # recommended expression -> why it is not swept (unknown, conflicting, rejected)


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


def recommendations(findings: list[Finding]) -> Recommendations:
    """The variants the findings recommend: canonical, de-duplicated, each attributed to its rules; names
    the catalogue rejects are listed with the reason instead of being swept."""
    out: list[str] = []
    sources: dict[str, list[str]] = {}
    rejected: dict[str, str] = {}
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
    return Recommendations(out, sources, rejected)


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


def recommendation_report(recs: Recommendations, rows: list[VariantRow] | None,
                          profile_run_id: str) -> tuple[list[RecommendationRow], str]:
    """Which recommendations held (measurably faster, accuracy unchanged) and by how much; rows + Markdown."""
    by_variant = {row.variant: row for row in (rows or [])}
    out = []
    for name in recs.variants:
        row = by_variant.get(name)
        outcome, verdict = _outcome(row)
        out.append(RecommendationRow(
            variant=name, recommended_by=",".join(recs.sources.get(name, [])), outcome=outcome,
            speedup=row.speedup if row else math.nan, ci_low=row.ci_low if row else math.nan,
            ci_high=row.ci_high if row else math.nan, verdict=verdict, reason=row.reason if row else ""))
    out += [RecommendationRow(variant=expr, recommended_by="", outcome="not swept", reason=why)
            for expr, why in recs.rejected.items()]
    lines = [f"# Optimize: recommendations from profile run `{profile_run_id}`", ""]
    if not out:
        lines.append("The diagnosis of the baseline run recommended no variants: nothing to sweep.")
    else:
        lines.append(markdown_table(
            ("variant", "recommended by", "outcome", "speed-up", "95% CI", "note"),
            [(f"`{r.variant}`", r.recommended_by or "-", r.outcome, fmt(r.speedup, ".3f"),
              ci_text(r.ci_low, r.ci_high), r.reason) for r in out]))
        held = [r for r in out if r.outcome == "held"]
        lines += ["", f"{len(held)} of {len(recs.variants)} swept recommendations held"
                  + (": " + ", ".join(f"`{r.variant}` {r.speedup:.3f}x" for r in held) if held else ".")]
    return out, "\n".join(lines)
