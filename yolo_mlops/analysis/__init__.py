"""Trace analysis, diagnosis and run reports (modelled on Meta's HolisticTraceAnalysis).

Analyses are functions from parsed trace columns to plain dataclasses; see docs/analysis.md.
Names are imported on first use (PEP 562), so `yolo-mlops analyze` never pays for the report's
plotting stack.
"""

from __future__ import annotations

import importlib

_EXPORTS = {
    "DiagnosisInput": "diagnosis",
    "Finding": "diagnosis",
    "Saving": "diagnosis",
    "diagnose": "diagnosis",
    "headline": "diagnosis",
    "headline_metrics": "report",
    "write_report": "report",
    "RankAnalysis": "trace_analysis",
    "TraceAnalysis": "trace_analysis",
    "analyze_command": "trace_analysis",
    "analyze_traces": "trace_analysis",
    "render_text": "trace_analysis",
    "TraceError": "trace_loader",
    "load_traces": "trace_loader",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value
