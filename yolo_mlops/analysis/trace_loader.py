"""Load Kineto / Chrome traces written by `torch.profiler` into columnar numpy arrays: the names the rest of the
code imports, each from its module of `analysis/loading/` (one concern a module; that package's docstring lists
them). The decompressed text is streamed in blocks and decoded into typed columns, so memory grows with the number
of events, not with the JSON; docs/analysis.md has the measurements that picked this design."""

from __future__ import annotations

from yolo_mlops.analysis.loading.backends import DecodeBackend
from yolo_mlops.analysis.loading.formats import TRACE_SUFFIXES, find_trace_files
from yolo_mlops.analysis.loading.load import in_rank_order, load_trace_file, load_traces
from yolo_mlops.analysis.loading.progress import Progress, ProgressReporter, reporting_progress
from yolo_mlops.analysis.loading.rank_trace import (
    COLLECTIVE_RECORD_NAME,
    CUDA_DEVICE_TYPE,
    GPU_ACTIVITY_CATEGORIES,
    MEMORY_EVENT_NAME,
    CollectiveRecord,
    MemoryEvents,
    RankTrace,
    TraceError,
    id_mask,
)

__all__ = [
    "COLLECTIVE_RECORD_NAME",
    "CUDA_DEVICE_TYPE",
    "GPU_ACTIVITY_CATEGORIES",
    "MEMORY_EVENT_NAME",
    "TRACE_SUFFIXES",
    "CollectiveRecord",
    "DecodeBackend",
    "MemoryEvents",
    "Progress",
    "ProgressReporter",
    "RankTrace",
    "TraceError",
    "find_trace_files",
    "id_mask",
    "in_rank_order",
    "load_trace_file",
    "load_traces",
    "reporting_progress",
]
