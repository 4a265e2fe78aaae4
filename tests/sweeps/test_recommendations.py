"""optimize: diagnosis findings (`Finding` objects) -> the variants to sweep -> which recommendations held."""

from __future__ import annotations

import math

import pytest

from yolo_mlops import sweeps
from yolo_mlops.analysis import Finding
from yolo_mlops.sweeps import VariantRow, stats


def finding(rule: str, recommended: list[str], severity: str = "medium") -> Finding:
    return Finding(
        rule=rule,
        severity=severity,
        title=f"{rule} finding",
        evidence={"share_pct": 42.0},
        recommended_variants=recommended,
    )


FINDINGS = [
    finding("data_wait_high", ["workers_8", "cache_ram"], severity="high"),
    finding("fp32_matmuls", ["amp_bf16", "channels_last+amp_bf16", "cache_ram", "persistent_workers", "warp_drive"]),
    finding("fine", [], severity="low"),
]


def test_recommended_variants_are_collected_canonical_deduplicated_and_attributed():
    recs = sweeps.recommendations(FINDINGS)
    assert recs.variants == ["workers_8", "cache_ram", "amp_bf16", "amp_bf16+channels_last"]
    assert recs.sources["cache_ram"] == ["data_wait_high", "fp32_matmuls"]
    assert recs.sources["amp_bf16+channels_last"] == ["fp32_matmuls"]
    assert set(recs.rejected) == {"persistent_workers", "warp_drive"}
    assert "InfiniteDataLoader" in recs.rejected["persistent_workers"]
    assert "warp_drive" in recs.rejected["warp_drive"]


def test_baseline_is_never_a_recommendation():
    recs = sweeps.recommendations([finding("odd", ["baseline", "batch_8"])])
    assert recs.variants == ["batch_8"] and recs.rejected == {}


def test_report_says_which_recommendations_held_and_by_how_much():
    recs = sweeps.recommendations(FINDINGS)
    rows = [
        VariantRow("baseline", status="ok", verdict="reference", speedup=1.0),
        VariantRow("workers_8", status="ok", verdict=stats.FASTER, speedup=1.40004, ci_low=1.3, ci_high=1.5),
        VariantRow("cache_ram", status="ok", verdict=stats.SAME, speedup=1.01, ci_low=0.97, ci_high=1.05),
        VariantRow("amp_bf16", status="skipped", reason="needs a CUDA device"),
        VariantRow("amp_bf16+channels_last", status="failed", reason="failed: OOM"),
    ]
    report_rows, markdown = sweeps.recommendation_report(recs, rows, "r1")
    outcome = {r.variant: r.outcome for r in report_rows}
    assert outcome == {
        "workers_8": "held",
        "cache_ram": "did not hold",
        "amp_bf16": "skipped",
        "amp_bf16+channels_last": "failed",
        "persistent_workers": "not swept",
        "warp_drive": "not swept",
    }
    held = report_rows[0]
    assert held.speedup == 1.40004 and (held.ci_low, held.ci_high) == (1.3, 1.5)  # full precision, not rounded
    assert held.recommended_by == "data_wait_high"
    assert "1 of 4 swept recommendations held: `workers_8` 1.400x" in markdown
    assert "| `cache_ram` | data_wait_high,fp32_matmuls | did not hold | 1.010 | 0.970-1.050 |" in markdown
    assert "| `amp_bf16` | fp32_matmuls | skipped | - | - | - | - | needs a CUDA device |" in markdown
    table = {r["variant"]: r for r in sweeps.json_rows(report_rows)}
    assert table["workers_8"]["speedup"] == 1.4 and table["amp_bf16"]["speedup"] is None


def test_faster_with_changed_accuracy_is_not_held():
    recs = sweeps.recommendations([finding("batch_small", ["batch_8"])])
    rows = [
        VariantRow("batch_8", status="ok", verdict=stats.FASTER, speedup=1.2, ci_low=1.1, ci_high=1.3, loss_flag=True)
    ]
    report_rows, markdown = sweeps.recommendation_report(recs, rows, "r1")
    assert [r.outcome for r in report_rows] == ["faster but accuracy changed"]
    assert "0 of 1 swept recommendations held." in markdown


def test_a_recommendation_without_a_comparison_row_is_not_run():
    recs = sweeps.recommendations([finding("batch_small", ["batch_8"])])
    (row,), _ = sweeps.recommendation_report(recs, [VariantRow("baseline", status="ok")], "r1")
    assert row.outcome == "not run" and math.isnan(row.speedup)


def test_no_findings_means_nothing_to_sweep():
    recs = sweeps.recommendations([])
    assert recs.variants == [] and recs.rejected == {}
    rows, markdown = sweeps.recommendation_report(recs, None, "r1")
    assert rows == [] and "nothing to sweep" in markdown


def test_estimated_saving_is_set_beside_the_measured_one():
    from yolo_mlops.analysis.savings import Saving

    slow_data = finding("data_wait_high", ["workers_8"], severity="high")
    slow_data.saving = Saving(ms_per_step=40.0, pct_of_step=30.0, assumption="if data loading were overlapped")
    also = finding("other", ["workers_8"])
    also.saving = Saving(ms_per_step=10.0, pct_of_step=8.0, assumption="x")
    recs = sweeps.recommendations([slow_data, also, finding("no_estimate", ["cache_ram"])])
    assert recs.estimated_saving_pct == {"workers_8": 30.0}  # the largest bound among its findings
    rows = [
        VariantRow("workers_8", status="ok", verdict=stats.FASTER, speedup=1.25, ci_low=1.2, ci_high=1.3),
        VariantRow("cache_ram", status="ok", verdict=stats.SAME, speedup=1.0, ci_low=0.95, ci_high=1.05),
    ]
    report_rows, markdown = sweeps.recommendation_report(recs, rows, "r1")
    workers = report_rows[0]
    assert workers.estimated_saving_pct == 30.0
    assert math.isclose(workers.measured_saving_pct, 20.0)  # 1 - 1/1.25 of the step time
    assert "| <= 30.0% | 20.0% |" in markdown
    metrics = sweeps.saving_metrics(report_rows)
    assert metrics == {
        "optimize/workers_8_saving_pct_estimated": 30.0,
        "optimize/workers_8_saving_pct_measured": pytest.approx(20.0),
    }
