"""Headline metrics and the written report."""

from __future__ import annotations

import math
import re

import pytest

from yolo_mlops.analysis import analyze_traces
from yolo_mlops.analysis.diagnosis import DiagnosisInput, diagnose
from yolo_mlops.analysis.metrics import headline_metrics
from yolo_mlops.analysis.run_report import KERNEL_PLOT, STEP_PLOT, write_report

METRIC_NAME = re.compile(
    r"^(trace/[a-z0-9_]+_(pct|ms|gib|mib_per_step|count|ms_mean|ms_median|ms_max)"
    r"|(rank\d+/)?comm/[a-z_]+)$"
)  # comm/*: the collectives of a trace that has them
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def test_cpu_metrics_have_no_gpu_numbers(cpu_trace_file, cpu_trace_spec):
    phases, active_steps = cpu_trace_spec
    metrics = headline_metrics(analyze_traces(cpu_trace_file))
    assert not [k for k in metrics if k.startswith("trace/gpu_")]
    assert "trace/host_cuda_sync_pct" not in metrics  # no CUDA runtime on a CPU trace: not measured
    for phase in phases:
        assert 0 < metrics[f"trace/host_{phase}_pct"] < 100
    assert metrics["trace/profiled_steps_count"] == active_steps
    assert metrics["trace/step_time_ms_mean"] > 0
    assert "trace/host_data_loader_pct" in metrics
    assert "trace/cpu_memory_peak_allocated_gib" in metrics
    for name, value in metrics.items():
        assert METRIC_NAME.match(name), name
        assert isinstance(value, float) and math.isfinite(value), name


def test_gpu_metrics_follow_hta(gpu_traces_dir, hta_reference):
    name = "a100_nccl_rank0.json.gz"
    metrics = headline_metrics(analyze_traces(gpu_traces_dir / name))
    ref = hta_reference[name]
    assert metrics["trace/gpu_idle_pct"] == pytest.approx(ref["temporal_breakdown"]["idle_time_pctg"], abs=1.0)
    assert metrics["trace/gpu_compute_pct"] == pytest.approx(ref["temporal_breakdown"]["compute_time_pctg"], abs=1.0)
    comm = sum(r["percentage"] for r in ref["kernel_type_breakdown"] if "COMMUNICATION" in r["kernel_type"])
    assert metrics["trace/gpu_communication_pct"] == pytest.approx(comm, abs=1.0)
    assert "trace/gpu_memory_peak_allocated_gib" not in metrics  # no [memory] events in this trace
    assert all(METRIC_NAME.match(k) for k in metrics), [k for k in metrics if not METRIC_NAME.match(k)]


def test_write_report_cpu(tmp_path, cpu_trace_file):
    analysis = analyze_traces(cpu_trace_file)
    findings = diagnose(DiagnosisInput(analysis=analysis, device_type="cpu", data_wait_pct=40.0, workers=2))
    nvml = tmp_path / "timeline.png"
    nvml.write_bytes(PNG_MAGIC + b"fake-but-copied")
    out = tmp_path / "report"
    paths = write_report(out, analysis, findings, extra={"train.batch": 8, "variant": "baseline"}, nvml_plot=nvml)
    names = {p.name for p in paths}
    assert {"report.md", "report.html", STEP_PLOT, "nvml.png"} <= names
    assert KERNEL_PLOT not in names  # CPU-only: no kernel mix
    assert all(p.is_file() for p in paths)
    assert (out / STEP_PLOT).read_bytes().startswith(PNG_MAGIC)
    md = (out / "report.md").read_text()
    assert "waiting for data" in md and "workers_4" in md
    assert "CPU-only trace" in md
    assert "| train.batch | 8 |" in md
    assert f"![Step time breakdown, rank 0]({STEP_PLOT})" in md
    page = (out / "report.html").read_text()
    assert page.count("data:image/png;base64,") == 2
    assert "<table>" in page and "waiting for data" in page


def test_write_report_gpu_multi_rank(tmp_path, trace_builder):
    for rank, step_us in ((0, 1000.0), (1, 1300.0)):
        b = trace_builder(rank)
        for i in range(3):
            t0 = i * step_us
            b.step(i, t0, step_us)
            b.host("yolo_mlops/forward_loss", t0 + 10, 400)
            b.kernel("volta_sgemm_128x64_nn", launch=t0 + 20, start=t0 + 30, dur=500)
            b.kernel("ncclKernel_AllReduce_RING_LL_Sum_float(x)", launch=t0 + 25, start=t0 + 530, dur=300, stream=20)
        b.write(tmp_path / f"rank{rank}.json")
    analysis = analyze_traces(tmp_path)
    out = tmp_path / "out"
    paths = write_report(out, analysis, diagnose(DiagnosisInput(analysis=analysis)), extra=None, nvml_plot=None)
    assert {p.name for p in paths} == {"report.md", "report.html", STEP_PLOT, KERNEL_PLOT}
    md = (out / "report.md").read_text()
    assert "slowest rank 1" in md
    assert "GPU breakdown (rank 1)" in md
    assert "communication not overlapped" in md
    # the headline names the top finding with its estimate; the table gives every estimate and its assumption
    findings = diagnose(DiagnosisInput(analysis=analysis))
    assert f"Top finding: {findings[0].line()}" in md
    assert "| saves up to ms/step | % of step | assuming |" in md
    assert "if communication were fully overlapped with compute" in md
    assert "GPU idle by host cause" in md and "| launch_overhead |" in md
    metrics = headline_metrics(analysis)
    assert metrics["trace/step_time_spread_ms"] == pytest.approx(0.3)
    assert metrics["trace/host_cuda_sync_pct"] == 0.0  # GPU trace without sync calls: a measured zero


def test_report_without_findings_says_so(tmp_path, trace_builder):
    b = trace_builder(0).step(0, 0, 100)
    analysis = analyze_traces(b.write(tmp_path / "t.json"))
    write_report(tmp_path / "out", analysis, [], extra=None, nvml_plot=None)
    assert "No rule fired" in (tmp_path / "out" / "report.md").read_text()


def test_kernel_mix_without_kernel_time_is_not_reported_as_zero(tmp_path, trace_builder):
    """Sub-microsecond kernels round to zero length: the fp16 share is unknown, not 0%."""
    b = trace_builder(0)
    for i in range(3):
        b.step(i, i * 1000.0, 1000.0)
        b.kernel("volta_sgemm_128x64_nn", launch=i * 1000.0 + 10, start=i * 1000.0 + 20.2, dur=0.5)
    analysis = analyze_traces(b.write(tmp_path / "t.json"))
    assert analysis.ranks[0].gpu is not None and analysis.ranks[0].gpu.reduced_precision_kernel_pct is None
    assert "trace/gpu_reduced_precision_kernel_pct" not in headline_metrics(analysis)
    assert "no_reduced_precision" not in {f.rule for f in diagnose(DiagnosisInput(analysis=analysis))}
    write_report(tmp_path / "out", analysis, [], extra=None, nvml_plot=None)


def test_run_summary_lists_typed_findings_with_the_headline():
    from yolo_mlops.analysis.diagnosis import headline
    from yolo_mlops.analysis.findings import Finding
    from yolo_mlops.analysis.savings import Saving
    from yolo_mlops.config import RunSpec
    from yolo_mlops.run.pipeline import RunResult, summary_markdown

    findings = [
        Finding(
            "data_wait_high",
            "high",
            "40% of step time is spent waiting for data",
            {"data_wait_pct": 40.0},
            ["workers_8", "cache_ram"],
            Saving(12.0, 40.0, "if data loading were fully overlapped"),
        )
    ]
    result = RunResult(run_id="r", experiment_id="0", run_url="u", metrics={}, findings=findings, trace_files=[])
    md = summary_markdown(result, RunSpec())
    assert headline(findings) in md
    assert "- [high] 40% of step time is spent waiting for data; saves up to 12.0 ms/step (40% of step)" in md


def test_run_summary_has_the_memory_section_only_when_the_split_was_measured():
    import dataclasses

    from yolo_mlops.config import RunSpec
    from yolo_mlops.profiling.memory_holders import HOLDERS, SECTION_TITLE, MemoryByHolder
    from yolo_mlops.run.pipeline import RunResult, summary_markdown

    held = dict.fromkeys(HOLDERS, 0) | {"parameter": 3 * 2**20, "activation": 5 * 2**20}
    split = MemoryByHolder(device="cpu", peak_total_bytes=8 * 2**20, peak_time_us=1, bytes_by_holder=held)
    unmeasured = RunResult(run_id="r", experiment_id="0", run_url="u", metrics={}, findings=[], trace_files=[])
    assert SECTION_TITLE not in summary_markdown(unmeasured, RunSpec())
    md = summary_markdown(dataclasses.replace(unmeasured, memory=split), RunSpec())
    table = md.split(f"## {SECTION_TITLE}", 1)[1]
    rows = [line for line in table.splitlines() if line.startswith("| ") and not line.startswith("| holder")]
    assert rows[0].startswith("| activation | 5.00 | 62.5 |") and rows[1].startswith("| parameter | 3.00 | 37.5 |")
    assert rows[-1] == "| total | 8.00 | 100.0 |"
