"""Trace analysis, diagnosis and run reports (modelled on Meta's HolisticTraceAnalysis).

Analyses are functions from parsed trace columns to plain dataclasses; see docs/analysis.md.

- `trace_loader`: a trace file (or a folder of rank traces) into numpy columns (`RankTrace`); `TraceError`.
- `gpu`, `host`, `memory`, `idle_attribution`, `collectives`: the analyses, over one rank's columns;
  `communication` and `stragglers`: the cross-rank waits of a data-parallel job and who held each step back.
- `trace_analysis`: `analyze_traces(path) -> TraceAnalysis`, the ranks in worker processes when big.
- `model`: the result dataclasses and their JSON; `stored`: a run's stored analysis read back.
- `diagnosis`: the rules (`rules_host`, `rules_gpu`, `rules_ddp`, `rules_memory`) over `diagnosis_input`,
  yielding `findings` with their estimated `savings`.
- `metrics`: the `trace/*` metrics; `render_text`: what `yolo-mlops analyze` prints; `run_report` (blocks of
  `document`): the run's report.md and report.html with plots; `progress_bar`: analyze's bar on a terminal.
Importing the package costs numpy, msgspec and ijson (which every analysis needs) and nothing heavier:
the report's plotting stack (matplotlib) is imported when a figure is drawn, never torch or MLflow.
"""

from __future__ import annotations

from yolo_mlops.analysis.diagnosis import DiagnosisInput, Finding, diagnose, headline
from yolo_mlops.analysis.metrics import headline_metrics
from yolo_mlops.analysis.model import RankAnalysis, TraceAnalysis
from yolo_mlops.analysis.render_text import render_text
from yolo_mlops.analysis.run_report import write_report
from yolo_mlops.analysis.savings import Saving
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
