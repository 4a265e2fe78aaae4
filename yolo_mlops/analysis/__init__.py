"""Trace analysis, diagnosis and run reports (modelled on Meta's HolisticTraceAnalysis).

Analyses are functions from parsed trace columns to plain dataclasses; see docs/analysis.md.
Importing the package costs numpy, msgspec and ijson (which every analysis needs) and nothing heavier:
the report's plotting stack (matplotlib) is imported when a figure is drawn, never torch or MLflow.
"""

from __future__ import annotations

from yolo_mlops.analysis.diagnosis import DiagnosisInput, Finding, Saving, diagnose, headline
from yolo_mlops.analysis.metrics import headline_metrics
from yolo_mlops.analysis.model import RankAnalysis, TraceAnalysis
from yolo_mlops.analysis.render_text import render_text
from yolo_mlops.analysis.report import write_report
from yolo_mlops.analysis.trace_analysis import analyze_traces
from yolo_mlops.analysis.trace_loader import TraceError, load_traces

__all__ = [
    "DiagnosisInput",
    "Finding",
    "RankAnalysis",
    "Saving",
    "TraceAnalysis",
    "TraceError",
    "analyze_traces",
    "diagnose",
    "headline",
    "headline_metrics",
    "load_traces",
    "render_text",
    "write_report",
]
