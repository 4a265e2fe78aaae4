"""Trace analysis, diagnosis and run reports (modelled on Meta's HolisticTraceAnalysis).

Analyses are functions from parsed trace columns to plain dataclasses; see docs/analysis.md.
"""

from yolo_mlops.analysis.diagnosis import DiagnosisInput, Finding, diagnose
from yolo_mlops.analysis.report import headline_metrics, write_report
from yolo_mlops.analysis.trace_analysis import (
    RankAnalysis,
    TraceAnalysis,
    analyze_command,
    analyze_traces,
    render_text,
)
from yolo_mlops.analysis.trace_loader import TraceError, load_traces

__all__ = [
    "DiagnosisInput",
    "Finding",
    "RankAnalysis",
    "TraceAnalysis",
    "TraceError",
    "analyze_command",
    "analyze_traces",
    "diagnose",
    "headline_metrics",
    "load_traces",
    "render_text",
    "write_report",
]
