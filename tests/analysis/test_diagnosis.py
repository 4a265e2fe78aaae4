"""Diagnosis rules: each fires on its symptom and stays quiet on a clean run."""

from __future__ import annotations

import pytest

from yolo_mlops.analysis import analyze_traces, rules_gpu, rules_host
from yolo_mlops.analysis.diagnosis import DiagnosisInput, diagnose
from yolo_mlops.analysis.diagnosis_input import DEFAULT_WORKERS_SUGGESTION
from yolo_mlops.analysis.findings import HIGH, MEDIUM
from yolo_mlops.labels import PHASE_LABEL_PREFIX

FP16_GEMM = "ampere_fp16_s16816gemm_fp16_128x128_ldg8_f2f_stages_32x5_nn"
FP32_GEMM = "volta_sgemm_128x64_nn"
NCCL = "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)"


def build_run(
    trace_builder,
    tmp_path,
    *,
    kernel=FP16_GEMM,
    kernels=14,
    late_launch=False,
    gap=5.0,
    data_wait=20.0,
    sync=0.0,
    nccl=0.0,
    memory=None,
    steps=4,
    step_us=1000.0,
    name="run.json",
):
    """Steps of step_us: a data_wait label, then `kernels` 60 us kernels from 100 us on (by default
    the GPU is busy ~91% of the step); each knob adds one symptom."""
    b = trace_builder(0)
    for i in range(steps):
        t0 = i * step_us
        b.step(i, t0, step_us)
        b.host(PHASE_LABEL_PREFIX + "data_wait", t0, data_wait)
        b.host(PHASE_LABEL_PREFIX + "forward_loss", t0 + data_wait, 500)
        g = t0 + 100
        for k in range(kernels):
            # early launch: queued well before the GPU gets to it; late: after the previous kernel ended
            launch = g + 1 if late_launch else t0 + 30 + k
            b.kernel(kernel, launch=launch, start=g + (2 if late_launch else 0), dur=60)
            g += 60 + (2 if late_launch else 0) + gap
        if nccl:  # after the compute: nothing to overlap with
            b.kernel(NCCL, launch=t0 + 40, start=g, dur=nccl, stream=20)
        if sync:
            b.host("cudaStreamSynchronize", t0 + 900, sync, cat="cuda_runtime")
        if memory is not None:
            b.memory(t0 + 500, allocated=memory(i), reserved=memory(i))
    return analyze_traces(b.write(tmp_path / name))


def rules(findings) -> set[str]:
    return {f.rule for f in findings}


@pytest.fixture
def clean_analysis(trace_builder, tmp_path):
    return build_run(trace_builder, tmp_path, memory=lambda i: 6 * 2**30)


def test_clean_run_has_no_findings(clean_analysis, clean_context):
    assert diagnose(clean_context(clean_analysis)) == []


def test_empty_input_has_no_findings():
    assert diagnose(DiagnosisInput()) == []


def test_data_wait_from_context(clean_analysis, clean_context):
    (finding,) = diagnose(clean_context(clean_analysis, data_wait_pct=30.0))
    assert finding.rule == "data_wait_high" and finding.severity == HIGH
    assert finding.recommended_variants[0] == "workers_16"
    assert "cache_ram" in finding.recommended_variants and "persistent_workers" not in finding.recommended_variants
    assert finding.evidence["data_wait_pct"] == 30.0


def test_data_wait_from_trace_label(trace_builder, tmp_path, clean_context):
    analysis = build_run(trace_builder, tmp_path, data_wait=150.0)
    (finding,) = diagnose(clean_context(analysis, data_wait_pct=None))
    assert finding.rule == "data_wait_high" and finding.severity == MEDIUM
    assert finding.evidence["data_wait_pct"] == pytest.approx(15.0)


def test_gpu_idle_waiting_on_host(trace_builder, tmp_path, clean_context):
    analysis = build_run(trace_builder, tmp_path, kernels=5, late_launch=True, gap=120.0)
    findings = diagnose(clean_context(analysis))
    assert rules(findings) == {"gpu_idle_host_wait"}
    finding = findings[0]
    idle_pct, launch_pct = finding.evidence["gpu_idle_pct"], finding.evidence["gpu_idle_launch_overhead_pct"]
    assert isinstance(idle_pct, float) and idle_pct >= rules_host.GPU_IDLE_PCT_WARN
    assert isinstance(launch_pct, float) and launch_pct >= rules_host.GPU_IDLE_PCT_WARN
    assert finding.recommended_variants == ["compile", "batch_32"]
    # the bound is the launch-attributed idle per step, measured over the steps HTA's window keeps
    launch = analysis.ranks[0].idle_cause("launch_overhead")
    assert finding.saving is not None and finding.saving.ms_per_step == pytest.approx(launch.time_us / 1000 / 3)


def test_gpu_idle_not_caused_by_host_is_not_host_wait(trace_builder, tmp_path, clean_context):
    # Same gaps, but every kernel was launched long before: the gaps are not host waits.
    analysis = build_run(trace_builder, tmp_path, kernels=5, late_launch=False, gap=120.0)
    assert analysis.ranks[0].gpu.idle_pct >= rules_host.GPU_IDLE_PCT_WARN
    assert "gpu_idle_host_wait" not in rules(diagnose(clean_context(analysis)))


def test_low_sm_util_without_trace():
    finding = rules_host.gpu_idle_host_wait(DiagnosisInput(device_type="cuda", sm_util_pct=20.0))
    assert finding is not None and finding.evidence["sm_util_pct"] == 20.0
    assert rules_host.gpu_idle_host_wait(DiagnosisInput(device_type="cuda", sm_util_pct=70.0)) is None


def test_fp32_kernels_without_amp(trace_builder, tmp_path, clean_context):
    analysis = build_run(trace_builder, tmp_path, kernel=FP32_GEMM)
    findings = diagnose(clean_context(analysis, amp=None))
    assert rules(findings) == {"no_reduced_precision"}
    assert findings[0].recommended_variants[:2] == ["amp_bf16", "amp_fp16"]
    # AMP declared on: the rule trusts the configuration.
    assert diagnose(clean_context(analysis, amp=True)) == []


def test_cudnn_benchmark_off_only_when_known(clean_analysis, clean_context):
    (finding,) = diagnose(clean_context(clean_analysis, cudnn_benchmark=False))
    assert finding.rule == "cudnn_autotune_off" and finding.recommended_variants == ["cudnn_benchmark"]
    assert diagnose(clean_context(clean_analysis, cudnn_benchmark=None)) == []


def test_layout_conversion_kernels(trace_builder, tmp_path, clean_context):
    analysis = build_run(trace_builder, tmp_path, kernel="void cudnn::ops::nchwToNhwcKernel<__half, __half>(int)")
    assert rules(diagnose(clean_context(analysis))) == {"layout_conversions"}


def test_sync_in_step(trace_builder, tmp_path, clean_context):
    analysis = build_run(trace_builder, tmp_path, sync=80.0)
    (finding,) = diagnose(clean_context(analysis))
    assert finding.rule == "sync_in_step" and finding.severity == HIGH
    assert finding.evidence["sync_pct"] == pytest.approx(8.0)
    assert finding.evidence["sync_calls_per_step"] == 1.0


def test_communication_high(trace_builder, tmp_path, clean_context):
    analysis = build_run(trace_builder, tmp_path, nccl=400.0, step_us=1500.0)
    (finding,) = diagnose(clean_context(analysis))
    assert finding.rule == "communication_high"
    # 14 x 65 us compute (the 5 us gaps are idle, not busy), then 400 us of NCCL
    assert finding.evidence["exposed_communication_pct"] == pytest.approx(100 * 400 / (14 * 60 + 400), abs=0.5)


def test_memory_growth(trace_builder, tmp_path, clean_context):
    analysis = build_run(trace_builder, tmp_path, memory=lambda i: 4 * 2**30 + i * 256 * 2**20)
    (finding,) = diagnose(clean_context(analysis))
    assert finding.rule == "memory_growth"
    assert finding.evidence["growth_mib_per_step"] == pytest.approx(256.0)


def test_memory_near_capacity_from_context_and_trace(clean_analysis, trace_builder, tmp_path, clean_context):
    (finding,) = diagnose(clean_context(clean_analysis, peak_memory_gib=15.5, batch_size=16, amp=False))
    assert finding.rule == "memory_near_capacity"
    assert finding.recommended_variants == ["batch_8", "amp_bf16"]  # AMP off: halve activations too
    findings = diagnose(clean_context(clean_analysis, peak_memory_gib=15.5, batch_size=16))
    assert rules(findings) == {"memory_near_capacity"}
    assert findings[0].recommended_variants == ["batch_8"]
    # From the trace alone: 15 GiB peak on the 16 GiB device of the synthetic trace.
    full = build_run(trace_builder, tmp_path, memory=lambda i: 15 * 2**30, name="full.json")
    findings = diagnose(clean_context(full, peak_memory_gib=None, gpu_memory_total_gib=None))
    assert rules(findings) == {"memory_near_capacity"}
    assert findings[0].evidence["source"] == "trace (rank 0)"


def test_cpu_run_gets_no_gpu_findings(cpu_trace_file):
    analysis = analyze_traces(cpu_trace_file)
    inp = DiagnosisInput(analysis=analysis, device_type="cpu", amp=False, cudnn_benchmark=False, data_wait_pct=1.0)
    assert diagnose(inp) == []


# ------------------------------------------------------------- real traces, judged by HTA's numbers


def _expected_from_hta(ref: dict, analysis) -> dict[str, bool]:
    """What the GPU rules must say, computed from HTA's own breakdowns, our idle attribution and our thresholds."""
    busy = sum(r["sum"] for r in ref["kernel_type_breakdown"])
    exposed = sum(
        r["sum"]
        for r in ref["kernel_type_breakdown"]
        if "COMMUNICATION" in r["kernel_type"] and "COMPUTATION" not in r["kernel_type"]
    )
    # the attribution splits HTA's idle time exactly; launch-bound is the part the host spent launching
    rank = analysis.ranks[0]
    idle_us = ref["temporal_breakdown"]["idle_time(us)"]
    assert sum(c.time_us for c in rank.gpu_idle_by_cause) == pytest.approx(idle_us, rel=1e-9)
    launch_pct = 100 * rank.idle_cause("launch_overhead").time_us / ref["temporal_breakdown"]["kernel_time(us)"]
    return {
        "gpu_idle_host_wait": launch_pct >= rules_host.GPU_IDLE_PCT_WARN,
        "communication_high": 100 * exposed / busy >= rules_gpu.COMMUNICATION_PCT_WARN,
    }


@pytest.mark.parametrize("name", ["a100_nccl_rank0.json.gz", "v100_compute_rank0.json.gz", "small_comm_rank0.json.gz"])
def test_gpu_fixtures(gpu_traces_dir, hta_reference, name):
    analysis = analyze_traces(gpu_traces_dir / name)
    fired = rules(diagnose(DiagnosisInput(analysis=analysis, amp=True, cudnn_benchmark=True)))
    for rule, expected in _expected_from_hta(hta_reference[name], analysis).items():
        assert (rule in fired) == expected, rule
    # No memory events and no data-wait labels in these traces: those rules have nothing to go on.
    assert not fired & {"memory_growth", "memory_near_capacity", "data_wait_high"}


def test_v100_fixture_is_fp32(gpu_traces_dir):
    analysis = analyze_traces(gpu_traces_dir / "v100_compute_rank0.json.gz")
    finding = rules_gpu.no_reduced_precision(DiagnosisInput(analysis=analysis))
    assert finding is not None
    # Volta (7.0) has fp16 tensor cores but no bf16/TF32.
    assert finding.recommended_variants == ["amp_fp16"]


def test_data_wait_from_dataloader_events_without_labels(trace_builder, tmp_path):
    b = trace_builder(0)
    for i in range(3):
        b.step(i, i * 1000.0, 1000.0)
        b.host("enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__", i * 1000.0 + 5, 300)
    analysis = analyze_traces(b.write(tmp_path / "t.json"))
    (finding,) = diagnose(DiagnosisInput(analysis=analysis, device_type="cpu"))
    assert finding.rule == "data_wait_high" and finding.severity == HIGH
    assert finding.evidence["data_wait_pct"] == pytest.approx(30.0)
    assert finding.recommended_variants[0] == f"workers_{DEFAULT_WORKERS_SUGGESTION}"
