"""Diagnosis rules of the GPU's work: fp32 compute where mixed precision would do, cuDNN autotuning off, NCHW/NHWC
layout conversions, and communication kernels no compute hides. Each rule returns at most one Finding; its
thresholds are module constants, listed with their reasons in docs/analysis.md.
"""

from __future__ import annotations

from yolo_mlops.analysis.diagnosis_input import DiagnosisInput, doubled_or, gpu_of, gpu_ranks, on_gpu, ranks, worst_over
from yolo_mlops.analysis.findings import LOW, MEDIUM, Finding, evidence_of, severity_at
from yolo_mlops.analysis.model import RankAnalysis
from yolo_mlops.analysis.savings import per_step_saving
from yolo_mlops.remedies import (
    BF16_AUTOCAST,
    CHANNELS_LAST,
    CUDNN_AUTOTUNE,
    FP16_AUTOCAST,
    LARGER_BATCH,
    TF32_MATMUL,
    variant,
)

# Mixed precision: assumed speed-up of the fp32 compute kernels (tensor cores; elementwise kernels gain less).
AMP_COMPUTE_SPEEDUP = 2.0
# Reduced-precision kernels below this share (%) of kernel time: the run computes in fp32.
REDUCED_PRECISION_PCT_MIN = 1.0
BF16_MIN_COMPUTE_CAPABILITY = 8.0  # Ampere and newer have bf16 and TF32 tensor cores
# NCHW<->NHWC conversion kernels above this share (%) of kernel time: use channels_last.
LAYOUT_CONVERSION_PCT_WARN = 2.0
# Communication not overlapped with compute, as a share (%) of GPU busy time.
COMMUNICATION_PCT_WARN = 20.0
COMMUNICATION_PCT_HIGH = 40.0


def no_reduced_precision(diagnosis_input: DiagnosisInput) -> Finding | None:
    if not on_gpu(diagnosis_input) or diagnosis_input.amp is True:
        return None
    measured = [
        (r, r.gpu.reduced_precision_kernel_pct)
        for r in ranks(diagnosis_input)
        if r.gpu is not None and r.gpu.reduced_precision_kernel_pct is not None
    ]
    if not measured:
        if diagnosis_input.amp is False:  # no (usable) trace: the configuration alone says fp32
            return Finding(
                "no_reduced_precision",
                MEDIUM,
                "Training runs in fp32 (AMP off)",
                {"amp": "off"},
                [variant(BF16_AUTOCAST), variant(FP16_AUTOCAST)],
                saving=None,
            )
        return None
    rank, pct = min(measured, key=lambda rank_pct: rank_pct[1])
    if pct >= REDUCED_PRECISION_PCT_MIN:
        return None
    capability = rank.device_compute_capability
    modern = capability is None or capability >= BF16_MIN_COMPUTE_CAPABILITY
    variants = (
        [variant(BF16_AUTOCAST), variant(FP16_AUTOCAST), variant(TF32_MATMUL)] if modern else [variant(FP16_AUTOCAST)]
    )
    return Finding(
        rule="no_reduced_precision",
        severity=MEDIUM,
        title="No fp16/bf16 kernels: the GPU computes in fp32",
        evidence={
            "reduced_precision_kernel_pct": round(pct, 3),
            "threshold_pct": REDUCED_PRECISION_PCT_MIN,
            "compute_capability": str(capability) if capability is not None else "unknown",
        },
        recommended_variants=variants,
        saving=per_step_saving(
            rank,
            gpu_of(rank).compute_time_us * (1 - 1 / AMP_COMPUTE_SPEEDUP),
            f"if mixed precision ran the fp32 compute kernels {AMP_COMPUTE_SPEEDUP:g}x faster",
        ),
    )


def cudnn_autotune_off(diagnosis_input: DiagnosisInput) -> Finding | None:
    if not on_gpu(diagnosis_input) or diagnosis_input.cudnn_benchmark is not False:
        return None
    return Finding(
        rule="cudnn_autotune_off",
        severity=LOW,
        title="cudnn.benchmark is off: cuDNN does not pick the fastest convolution algorithms",
        evidence={"cudnn_benchmark": "off"},
        recommended_variants=[variant(CUDNN_AUTOTUNE)],
    )


def layout_conversions(diagnosis_input: DiagnosisInput) -> Finding | None:
    found = worst_over(
        gpu_ranks(diagnosis_input), lambda r: r.gpu.layout_conversion_kernel_pct, LAYOUT_CONVERSION_PCT_WARN
    )
    if found is None:
        return None
    rank, pct = found
    return Finding(
        rule="layout_conversions",
        severity=LOW,
        title=f"{pct:.1f}% of kernel time converts tensors between NCHW and NHWC",
        evidence=evidence_of(
            rank=str(rank.rank), layout_conversion_kernel_pct=pct, threshold_pct=LAYOUT_CONVERSION_PCT_WARN
        ),
        recommended_variants=[variant(CHANNELS_LAST)],
        # conversion kernels may overlap other streams' work: their summed time bounds what removing them saves
        saving=per_step_saving(
            rank, gpu_of(rank).layout_conversion_time_us or 0.0, "if channels_last removed every conversion kernel"
        ),
    )


def _kernel_type_pct(rank: RankAnalysis, counts) -> float | None:
    """Share (%) of GPU busy time in the kernel-type rows whose label satisfies counts."""
    busy = sum(k.time_us for k in rank.kernel_types)
    if busy <= 0:
        return None
    return 100.0 * sum(k.time_us for k in rank.kernel_types if counts(k.kernel_type)) / busy


def communication_pct(rank: RankAnalysis) -> float | None:
    """Communication, overlapped or not, as % of GPU busy time."""
    return _kernel_type_pct(rank, lambda label: "COMMUNICATION" in label)


def exposed_communication_pct(rank: RankAnalysis) -> float | None:
    """Communication not overlapped with computation, as % of GPU busy time."""
    return _kernel_type_pct(rank, lambda label: "COMMUNICATION" in label and "COMPUTATION" not in label)


def communication_high(diagnosis_input: DiagnosisInput) -> Finding | None:
    found = worst_over(gpu_ranks(diagnosis_input), exposed_communication_pct, COMMUNICATION_PCT_WARN)
    if found is None:
        return None
    rank, pct = found
    return Finding(
        rule="communication_high",
        severity=severity_at(pct, COMMUNICATION_PCT_HIGH),
        title=f"{pct:.0f}% of GPU busy time is communication not overlapped with compute",
        evidence=evidence_of(rank=str(rank.rank), exposed_communication_pct=pct, threshold_pct=COMMUNICATION_PCT_WARN),
        recommended_variants=[variant(LARGER_BATCH, doubled_or(diagnosis_input.batch_size, 32))],
        saving=per_step_saving(
            rank,
            sum(
                k.time_us
                for k in rank.kernel_types
                if "COMMUNICATION" in k.kernel_type and "COMPUTATION" not in k.kernel_type
            ),
            "if communication were fully overlapped with compute",
        ),
    )
