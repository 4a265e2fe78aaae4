"""Diagnosis: rules over a trace analysis plus run context, each yielding at most one Finding.

The rules sit by area (rules_host, rules_gpu, rules_ddp, rules_memory); what they look at is diagnosis_input.py,
what they yield findings.py, their estimated savings savings.py. Every threshold is a module constant, listed
with its reason in docs/analysis.md. A rule fires only on evidence it actually has: unknown context (None) never
fires a rule, so a CPU-only run or a run without NVML gets fewer findings, never invented ones. A finding names
its remedies by key (yolo_mlops/remedies.py); its recommended variants are the sweep variants that try them.
"""

from __future__ import annotations

from yolo_mlops.analysis.diagnosis_input import DiagnosisInput
from yolo_mlops.analysis.findings import SEVERITY_ORDER, Finding
from yolo_mlops.analysis.rules_ddp import ddp_exposed_communication, ddp_straggler, ddp_unbalanced_data
from yolo_mlops.analysis.rules_gpu import (
    communication_high,
    cudnn_autotune_off,
    layout_conversions,
    no_reduced_precision,
)
from yolo_mlops.analysis.rules_host import data_wait_high, gpu_idle_host_wait, sync_in_step
from yolo_mlops.analysis.rules_memory import memory_growth, memory_near_capacity

RULES = (
    data_wait_high,
    gpu_idle_host_wait,
    no_reduced_precision,
    cudnn_autotune_off,
    layout_conversions,
    sync_in_step,
    communication_high,
    ddp_exposed_communication,
    ddp_straggler,
    ddp_unbalanced_data,
    memory_growth,
    memory_near_capacity,
)


def diagnose(diagnosis_input: DiagnosisInput) -> list[Finding]:
    """Every rule's finding, largest estimated saving first (unestimated last, then by severity)."""
    findings = [f for f in (rule(diagnosis_input) for rule in RULES) if f is not None]
    return sorted(findings, key=lambda f: (-(f.saving.ms_per_step if f.saving else -1.0), SEVERITY_ORDER[f.severity]))


def headline(findings: list[Finding]) -> str:
    """The run's verdict in one line: the top finding and what fixing it could save."""
    if not findings:
        return "No finding: nothing stands out."
    return f"Top finding: {findings[0].line()}"
