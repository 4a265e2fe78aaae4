"""Peak memory of the training device split by what holds it, from torch's own memory profiler.

`torch.profiler.profile.export_memory_timeline` classifies every tensor of a profiled cycle (parameter,
gradient, optimizer state, activation, temporary, input, autograd detail, or unknown) and writes
`[times, sizes]`: one timestamp (us, the trace's clock) per row, and per row the live bytes of each
category. This module writes that file for the first profiler cycle (beside the traces, so it is uploaded
with them), finds the row with the most live bytes, and reads each holder's share there.

It needs `record_shapes`, `profile_memory` and `with_stack` (stacks cost overhead, so `with_stack` is off
by default); without them, or when torch's layout is not the one read here, `status` says why and
nothing is measured. Nothing here raises into training.
"""

from __future__ import annotations

import gzip
import json
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from yolo_mlops import names
from yolo_mlops.compat import torch as torch_compat
from yolo_mlops.render import fmt, markdown_table

TIMELINE_FILE = names.file_name(names.MEMORY_TIMELINE_GZ)
RECORDED = "recorded"
UNKNOWN = "unknown"
# torch's Category names, lower case, plus the bytes it could not classify
HOLDERS = ("parameter", "gradient", "optimizer_state", "activation", "temporary", "input", "autograd_detail", UNKNOWN)
SWITCHES = ("record_shapes", "profile_memory", "with_stack")


class LayoutError(Exception):
    """torch's memory timeline is not laid out as this module reads it."""


@dataclass(frozen=True)
class MemoryByHolder:
    device: str  # torch device string of the timeline, e.g. "cpu", "cuda:0"
    peak_total_bytes: int
    peak_time_us: int  # timestamp of the peak row, on the trace's clock
    bytes_by_holder: dict[str, int]  # every name of HOLDERS; they sum to peak_total_bytes
    compute_s: float = 0.0  # time taken to build, write and read the timeline

    def metrics(self) -> dict[str, float]:
        """MLflow metrics in MiB: the total and one per holder."""
        out = {names.MEMORY_PEAK_TOTAL: self.peak_total_bytes / 2**20}
        out.update({names.memory_peak_metric(h): b / 2**20 for h, b in self.bytes_by_holder.items()})
        return out

    def rows(self) -> list[tuple[str, float, float]]:
        """(holder, MiB, % of the peak), largest first; for the run report."""
        total = self.peak_total_bytes or 1
        ordered = sorted(self.bytes_by_holder.items(), key=lambda kv: -kv[1])
        return [(h, b / 2**20, 100.0 * b / total) for h, b in ordered]


def column_labels() -> list[str]:
    """Holder name of each column of a sizes row, read from torch at run time.

    torch builds each row as `[0] + [0 for _ in _CATEGORY_TO_INDEX]` and adds a tensor's bytes at
    `_CATEGORY_TO_INDEX[category] + 1`, where the category `None` (not classified) has an index of its own.
    Column 0 is a leading slot that torch never fills; it is read as unknown too.
    """
    try:
        category_index, category_enum = torch_compat.memory_categories()
    except ImportError as exc:
        raise LayoutError(f"torch has no memory-profiler categories ({exc})") from None
    width = len(category_index)
    if sorted(category_index.values()) != list(range(width)):
        raise LayoutError("torch's category indices are not 0..n-1")
    labels = [UNKNOWN] * (width + 1)
    for category, index in category_index.items():
        if category is None:
            labels[index + 1] = UNKNOWN
        elif isinstance(category, category_enum):
            labels[index + 1] = category.name.lower()
        else:
            raise LayoutError(f"unexpected memory-profiler category {category!r}")
    if set(labels) != set(HOLDERS):
        raise LayoutError(f"torch's memory categories {sorted(set(labels))} are not {sorted(HOLDERS)}")
    return labels


def split_at_peak(timeline: Any, labels: list[str], device: str) -> MemoryByHolder:
    """The row of `[times, sizes]` with the most live bytes, split by holder."""
    if not (isinstance(timeline, list) and len(timeline) == 2):
        raise LayoutError("memory timeline is not [times, sizes]")
    times, sizes = timeline
    if len(times) != len(sizes):
        raise LayoutError(f"memory timeline has {len(times)} times but {len(sizes)} size rows")
    if not sizes:
        raise LayoutError(f"the profiled cycle holds no memory events on {device}")
    if any(len(row) != len(labels) for row in sizes):
        raise LayoutError(f"memory timeline rows are not {len(labels)} columns wide")
    peak = max(range(len(sizes)), key=lambda i: sum(sizes[i]))
    by_holder = dict.fromkeys(HOLDERS, 0)
    for label, size in zip(labels, sizes[peak], strict=True):
        by_holder[label] += int(size)
    return MemoryByHolder(
        device=device, peak_total_bytes=int(sum(sizes[peak])), peak_time_us=int(times[peak]), bytes_by_holder=by_holder
    )


def missing_switches(record_shapes: bool, profile_memory: bool, with_stack: bool) -> list[str]:
    on = dict(zip(SWITCHES, (record_shapes, profile_memory, with_stack), strict=True))
    return [name for name, value in on.items() if not value]


def why_not(record_shapes: bool, profile_memory: bool, with_stack: bool) -> str | None:
    missing = missing_switches(record_shapes, profile_memory, with_stack)
    if not missing:
        return None
    return f"skipped: needs record_shapes, profile_memory and with_stack (profiler settings; off: {', '.join(missing)})"


def export_split(prof, path: Path, device: str) -> MemoryByHolder:
    """Write `prof`'s memory timeline for `device` to `path` (gzipped JSON) and split its peak by holder."""
    started = time.perf_counter()
    labels = column_labels()  # before the export: a layout this module cannot read costs nothing
    path.parent.mkdir(parents=True, exist_ok=True)
    with warnings.catch_warnings():
        # export_memory_timeline is deprecated in favour of the CUDA allocator snapshot, which has no
        # holder categories and no CPU support; the warning would only repeat in every run's log
        warnings.simplefilter("ignore", FutureWarning)
        prof.export_memory_timeline(str(path), device)
    with gzip.open(path, "rt") as f:
        timeline = json.load(f)
    split = split_at_peak(timeline, labels, device)
    return MemoryByHolder(**{**split.__dict__, "compute_s": time.perf_counter() - started})


class MemoryByHolderRecorder:
    """Records the split once, for the first completed profiler cycle; `status` is "recorded" or "skipped: <why>"."""

    def __init__(
        self, out_dir: Path, training_device: str, record_shapes: bool, profile_memory: bool, with_stack: bool
    ) -> None:
        self.path = Path(out_dir) / TIMELINE_FILE
        self.training_device = training_device  # resolved at the first cycle: CUDA must not start earlier
        self.result: MemoryByHolder | None = None
        self.status = why_not(record_shapes, profile_memory, with_stack)  # None: possible, not yet taken

    def record(self, prof) -> None:
        """Call from the profiler's trace-ready handler; only the first call does any work."""
        if self.status is not None:
            return
        try:
            self.result = export_split(prof, self.path, timeline_device(self.training_device))
            self.status = RECORDED
        except LayoutError as exc:
            self.status = f"skipped: {exc}"
        except Exception as exc:  # a diagnostic never stops training
            reason = str(exc).strip().splitlines()
            self.status = f"skipped: {type(exc).__name__}" + (f": {reason[0]}" if reason else "")


def timeline_device(training_device: str) -> str:
    """torch device string whose memory the timeline reads: the CPU, or the current CUDA device (ultralytics
    narrows CUDA_VISIBLE_DEVICES to the chosen GPU and trains on it as cuda:0). Call it once training runs."""
    if training_device == "cpu":
        return "cpu"
    import torch

    return f"cuda:{torch.cuda.current_device()}" if torch.cuda.is_available() else "cpu"


SECTION_TITLE = "Peak memory by holder"
SECTION_TEXT = (
    "Training device at its peak in the first profiler cycle (torch's memory profiler; "
    f"timeline `{names.MEMORY_TIMELINE_GZ}`)."
)
TABLE_HEADERS = ["holder", "MiB", "% of peak"]


def table_rows(split: MemoryByHolder) -> list[list[str]]:
    """Rows of the 'Peak memory by holder' table: largest first, then the total."""
    rows = [[h, fmt(mib, ".2f"), fmt(pct, ".1f")] for h, mib, pct in split.rows()]
    total = split.peak_total_bytes / 2**20
    rows.append(["total", fmt(total, ".2f"), fmt(100.0 if total else None, ".1f")])
    return rows


def markdown_section(split: MemoryByHolder) -> str:
    """The section in Markdown, for the run summary."""
    return "\n".join([f"## {SECTION_TITLE}", "", SECTION_TEXT, "", markdown_table(TABLE_HEADERS, table_rows(split))])
