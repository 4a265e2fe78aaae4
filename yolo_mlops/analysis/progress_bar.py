"""A one-line progress bar on a terminal for `yolo-mlops analyze`: the file's bytes read of its size.

Drawn on the given stream (stderr) only once a file has taken SHOW_AFTER_S, so quick analyses print nothing,
at most REDRAW_S apart, and wiped when the file is done so that the report starts on a clean line. The caller
decides whether the stream is a terminal; nothing here is drawn into a pipe or a file.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import TextIO

from yolo_mlops.analysis.trace_loader import ProgressReporter

SHOW_AFTER_S = 1.0
REDRAW_S = 0.1
BAR_WIDTH = 30


class TerminalProgress(ProgressReporter):
    def __init__(self, path: Path, total: int, stream: TextIO, clock=time.monotonic) -> None:
        self.name = path.name
        self.total = max(total, 1)
        self.stream = stream
        self.clock = clock
        self.started = clock()
        self.done = 0
        self.drawn_at: float | None = None
        self.width = 0
        self.lock = threading.Lock()  # called from the loader's reader thread as well

    def __call__(self, nbytes: int) -> None:
        with self.lock:
            self.done += nbytes
            now = self.clock()
            if now - self.started < SHOW_AFTER_S or (self.drawn_at is not None and now - self.drawn_at < REDRAW_S):
                return
            self.drawn_at = now
            self._draw(now)

    def _draw(self, now: float) -> None:
        fraction = min(self.done / self.total, 1.0)
        filled = int(fraction * BAR_WIDTH)
        line = (
            f"\r{self.name}  {fraction * 100:3.0f}% |{'#' * filled}{' ' * (BAR_WIDTH - filled)}| "
            f"{self.done / 2**20:.0f}/{self.total / 2**20:.0f} MiB  {now - self.started:.1f} s"
        )
        self.width = max(self.width, len(line) - 1)
        self.stream.write(line)
        self.stream.flush()

    def close(self) -> None:
        with self.lock:
            if self.drawn_at is not None:
                self.stream.write("\r" + " " * self.width + "\r")
                self.stream.flush()
                self.drawn_at = None


def terminal_progress(stream: TextIO):
    """The factory `trace_loader.reporting_progress` takes: a bar on `stream` for every file loaded."""

    def factory(path: Path, total: int) -> TerminalProgress:
        return TerminalProgress(path, total, stream)

    return factory
