"""Tasks for the worker pool's tests, in a module of their own: a worker finds a task by its module's name."""

from __future__ import annotations

import os
import time


def pid_after(seconds: float) -> int:
    """The worker's process id, after `seconds` of work (so a task is still running when the next one starts)."""
    time.sleep(seconds)
    return os.getpid()
