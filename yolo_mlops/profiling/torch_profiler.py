"""torch.profiler over a window of training steps, driven by one `ProfilerSettings` object.

Like torchtitan's `maybe_enable_profiling`: the trainer only calls `step()` once per training step and
reads `recording` to decide whether to emit phase labels; nothing else knows the profiler exists.
Traces are named as torch's `tensorboard_trace_handler` names them (`<worker>.<ns>.pt.trace.json.gz`), so
TensorBoard, HTA and Perfetto open them; they are gzipped here at zlib's default level as indexed multi-member
gzip (`trace_gzip`: members of a few MiB of text cut at event boundaries, compressed by a few threads), which every
gzip reader reads as one stream and `yolo-mlops analyze` decompresses and parses in parallel. torch's own `.gz`
export writes line by line at level 9 (benchmarks/bench_trace_export.py measures both). key_averages tables are
built after training.
"""

from __future__ import annotations

import os
import socket
import time
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import torch
from torch.profiler import (
    ProfilerAction,
    ProfilerActivity,
    profile,
    record_function,
    schedule,
)

from yolo_mlops import names
from yolo_mlops.compat import torch as torch_compat
from yolo_mlops.config import ProfilerSettings
from yolo_mlops.labels import PHASE_LABEL_PREFIX
from yolo_mlops.profiling.memory_holders import MemoryByHolderRecorder
from yolo_mlops.profiling.trace_gzip import write_members

_RECORDING = {ProfilerAction.WARMUP, ProfilerAction.RECORD, ProfilerAction.RECORD_AND_SAVE}


class TrainingProfiler(AbstractContextManager):
    def __init__(self, settings: ProfilerSettings, trace_dir: Path, with_cuda: bool, device: str = "cpu") -> None:
        self.settings = settings
        self.trace_dir = Path(trace_dir)
        self.with_cuda = with_cuda
        self.export_s = 0.0  # time spent writing traces (and the memory split), kept out of the step timings
        # peak memory by holder, from the first cycle only (building torch's memory profile is not cheap)
        self.memory = MemoryByHolderRecorder(
            self.trace_dir, device, settings.record_shapes, settings.profile_memory, settings.with_stack
        )
        self._prof: profile | None = None
        self.unsupported: list[str] = []  # profile() arguments this torch does not take (compat.torch)
        self._running = False
        self._recording = False  # the current action is warm-up or recording (set on enter, step and exit)
        # after the schedule's last step torch's step() only counts and opens an empty ProfilerStep range:
        # a no-op from then on (the schedule repeats a finite number of cycles, ProfilerSettings.repeat >= 1)
        self._last_step = settings.window_end_step if settings.repeat > 0 else None
        self._finished = False
        self._worker = f"{socket.gethostname()}_{os.getpid()}"

    def __enter__(self) -> TrainingProfiler:
        self.trace_dir.mkdir(parents=True, exist_ok=True)
        s = self.settings
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if self.with_cuda else [])
        arguments, self.unsupported = torch_compat.profile_arguments(
            activities=activities,
            schedule=schedule(skip_first=s.skip_first, wait=s.wait, warmup=s.warmup, active=s.active, repeat=s.repeat),
            on_trace_ready=self._on_trace_ready,
            record_shapes=s.record_shapes,
            profile_memory=s.profile_memory,
            with_stack=s.with_stack,
            with_modules=s.with_modules,
            acc_events=True,  # keep every cycle's events so the tables cover all of them
        )
        self._prof = profile(**arguments)
        self._prof.__enter__()
        self._running = True
        self._finished = False
        self._recording = self._prof.current_action in _RECORDING
        return self

    def __exit__(self, *exc) -> None:
        # idempotent: the trainer's end callback and a crash handler may both close it (running implies entered)
        if self._running and self._prof is not None:
            self._running = self._recording = False
            self._prof.__exit__(*exc)

    def _on_trace_ready(self, prof: profile) -> None:
        started = time.perf_counter()
        write_chrome_trace(prof, self.trace_dir, self._worker)
        self.memory.record(prof)
        self.export_s += time.perf_counter() - started

    def step(self) -> None:
        """One training step ended. Once the schedule's last cycle is over (its trace exported), nothing: torch's
        step() would only count steps and open a ProfilerStep range that no profiler records."""
        if self._finished:
            return
        prof = self._prof
        if prof is None:
            raise RuntimeError("TrainingProfiler.step() called before the profiler was entered")
        prof.step()
        action = prof.current_action
        self._recording = self._running and action in _RECORDING
        if self._last_step is not None and prof.step_num >= self._last_step and action == ProfilerAction.NONE:
            self._finished = True

    @property
    def recording(self) -> bool:
        """True while the profiler is warming up or recording (steps in the window)."""
        return self._recording

    def trace_files(self) -> list[Path]:
        return sorted(self.trace_dir.glob("*.pt.trace.json.gz"))

    def tables(self) -> list[KeyAveragesTable]:
        """key_averages tables over all recorded cycles; empty when no step was recorded."""
        if self._prof is None or self._prof.profiler is None or not self._prof.events():
            return []
        return key_averages_tables(self._prof, self.settings, self.with_cuda)


def write_chrome_trace(prof: profile, trace_dir: Path, worker: str) -> Path:
    """This cycle's Chrome trace as `<worker>.<ns>.pt.trace.json.gz` in trace_dir."""
    plain = trace_dir / f"{worker}.{time.time_ns()}.pt.trace.json"
    prof.export_chrome_trace(str(plain))
    torch_compat.wait_for_exports(prof)  # a deferred export is written by now
    gzipped = plain.with_name(plain.name + ".gz")
    try:
        # indexed gzip members cut at event boundaries (trace_gzip): one gzip stream to every reader, read in
        # parallel by `yolo-mlops analyze`; compressed by a few threads at zlib's default level
        with open(plain, "rb") as source, open(gzipped, "wb") as target:
            write_members(source, target, level=6)
    finally:  # a failed gzip (disk full) leaves no plain trace beside the traces TensorBoard and HTA list
        plain.unlink(missing_ok=True)
    return gzipped


def phase(name: str) -> record_function:
    """A `record_function` label for one phase of a training step (the trainer opens it only in the window)."""
    return record_function(PHASE_LABEL_PREFIX + name)


@dataclass(frozen=True)
class KeyAveragesTable:
    name: str  # file stem, e.g. "key_averages_self_cpu"; stable across runs so MLflow can join them
    sort_by: str
    text: str
    frame: pd.DataFrame


def key_averages_tables(prof: profile, settings: ProfilerSettings, with_cuda: bool) -> list[KeyAveragesTable]:
    averages = prof.key_averages()
    wanted = [(names.KEY_AVERAGES_SELF_CPU, "self_cpu_time_total", averages)]
    if with_cuda:
        wanted.insert(0, (names.KEY_AVERAGES_SELF_DEVICE, "self_device_time_total", averages))
    if settings.profile_memory:
        memory_key = "self_device_memory_usage" if with_cuda else "self_cpu_memory_usage"
        wanted.append((names.KEY_AVERAGES_MEMORY, memory_key, averages))
    if settings.record_shapes:
        wanted.append(
            (
                names.KEY_AVERAGES_BY_SHAPE,
                "self_device_time_total" if with_cuda else "self_cpu_time_total",
                prof.key_averages(group_by_input_shape=True),
            )
        )
    tables = []
    for name, sort_by, events in wanted:
        text = events.table(sort_by=sort_by, row_limit=settings.row_limit, max_name_column_width=80)
        tables.append(KeyAveragesTable(name, sort_by, text, _frame(events, sort_by)))
    return tables


def _frame(events, sort_by: str) -> pd.DataFrame:
    """All rows (not only the text table's top rows) as numbers in microseconds / bytes."""
    rows = [
        {
            "name": e.key,
            "input_shapes": str(e.input_shapes) if e.input_shapes else "",
            "calls": e.count,
            "self_cpu_time_us": e.self_cpu_time_total,
            "cpu_time_us": e.cpu_time_total,
            "self_device_time_us": torch_compat.event_value(e, "self_device_time_total"),
            "device_time_us": torch_compat.event_value(e, "device_time_total"),
            "self_cpu_memory_bytes": e.self_cpu_memory_usage,
            "self_device_memory_bytes": torch_compat.event_value(e, "self_device_memory_usage"),
        }
        for e in events
    ]
    column = {
        "self_cpu_time_total": "self_cpu_time_us",
        "self_device_time_total": "self_device_time_us",
        "self_cpu_memory_usage": "self_cpu_memory_bytes",
        "self_device_memory_usage": "self_device_memory_bytes",
    }[sort_by]
    frame = pd.DataFrame(rows)
    return frame.sort_values(column, ascending=False, ignore_index=True) if len(frame) else frame


def cuda_profiling_possible(device: str) -> bool:
    return device != "cpu" and torch.cuda.is_available()
