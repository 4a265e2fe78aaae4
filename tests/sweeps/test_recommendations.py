"""optimize: diagnosis findings (the lead's dict shape) -> the variants to sweep -> which held."""

from __future__ import annotations

from yolo_mlops import sweeps
from yolo_mlops.sweeps import stats
from yolo_mlops.run.pipeline import RunResult


def _result(findings):
    return RunResult(run_id="r1", experiment_id="0", run_url="u", metrics={}, findings=findings, trace_files=[])


FINDINGS = [
    {"rule": "data_wait_high", "severity": "warning", "title": "loader bound", "evidence": "42% waiting",
     "recommended_variants": ["workers_8", "cache_ram"]},
    {"rule": "fp32_matmuls", "severity": "info", "title": "no tensor cores", "evidence": "...",
     "recommended_variants": ["amp_bf16", "channels_last+amp_bf16", "cache_ram", "persistent_workers", "warp_drive"]},
    {"rule": "fine", "severity": "info", "title": "nothing to do", "evidence": "", "recommended_variants": []},
    "a legacy string finding carries no recommendation",
]


def test_recommended_variants_are_collected_canonical_deduplicated_and_attributed():
    recs = sweeps.recommendations(_result(FINDINGS).findings)
    assert recs.variants == ["workers_8", "cache_ram", "amp_bf16", "amp_bf16+channels_last"]
    assert recs.sources["cache_ram"] == ["data_wait_high", "fp32_matmuls"]
    assert set(recs.rejected) == {"persistent_workers", "warp_drive"}
    assert "InfiniteDataLoader" in recs.rejected["persistent_workers"]


def test_report_says_which_recommendations_held_and_by_how_much():
    recs = sweeps.recommendations(FINDINGS)
    table = [
        {"variant": "baseline", "status": "ok", "verdict": "reference", "speedup": 1.0},
        {"variant": "workers_8", "status": "ok", "verdict": stats.FASTER, "speedup": 1.4, "ci_low": 1.3,
         "ci_high": 1.5, "loss_flag": False, "map_flag": False},
        {"variant": "cache_ram", "status": "ok", "verdict": stats.SAME, "speedup": 1.01, "ci_low": 0.97,
         "ci_high": 1.05, "loss_flag": False, "map_flag": False},
        {"variant": "amp_bf16", "status": "skipped", "verdict": "", "reason": "needs a CUDA device"},
        {"variant": "amp_bf16+channels_last", "status": "failed", "verdict": "", "reason": "failed: OOM"},
    ]
    rows, markdown = sweeps.recommendation_report(recs, table, "r1")
    outcome = {r["variant"]: r["outcome"] for r in rows}
    assert outcome == {"workers_8": "held", "cache_ram": "did not hold", "amp_bf16": "skipped",
                       "amp_bf16+channels_last": "failed", "persistent_workers": "not swept",
                       "warp_drive": "not swept"}
    assert "1 of 4 swept recommendations held: `workers_8` 1.400x" in markdown
    assert "data_wait_high" in markdown


def test_no_findings_means_nothing_to_sweep():
    recs = sweeps.recommendations(_result([]).findings)
    assert recs.variants == [] and recs.rejected == {}
    rows, markdown = sweeps.recommendation_report(recs, None, "r1")
    assert rows == [] and "nothing to sweep" in markdown
