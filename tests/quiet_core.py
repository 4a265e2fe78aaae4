"""A core of its own for a test that times training steps, while the other workers of a parallel run go on.

Beside other trainings on 2 cores a step's time varies 2-8x, as much as the slowdowns such tests plant. Nice
values do not help where the kernel groups processes by session (autogroups: every server or Prefect flow run
started in a new session competes as an equal), so the split is by CPU affinity: while the test runs, this
worker and everything it started run on the last core, and every other process of the run (the xdist
controller's other descendants) on the rest. Affinity belongs to a thread and is inherited by the threads and
processes it starts; the split is re-applied to every thread every half second, to catch what either side started
between two passes.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import psutil


def can_split() -> bool:
    """Whether this machine has a core to give away (Linux affinity and at least 2 usable cores)."""
    return hasattr(os, "sched_getaffinity") and len(os.sched_getaffinity(0)) >= 2


def _set(process: psutil.Process, cpus: list[int]) -> None:
    """Every thread of the process: affinity is a thread's (training may run in a Prefect task's thread)."""
    try:
        threads = os.listdir(f"/proc/{process.pid}/task")
    except OSError:
        return  # ended meanwhile
    for thread in threads:
        try:
            os.sched_setaffinity(int(thread), cpus)
        except OSError:
            pass  # ended meanwhile, or not ours to move


@contextmanager
def quiet_core(interval_s: float = 0.5) -> Iterator[None]:
    """This worker's process tree on the last core; the run's other processes on the others."""
    cpus = sorted(os.sched_getaffinity(0))
    lane, rest = cpus[-1:], cpus[:-1]
    me = psutil.Process()
    run = me.parent()  # the xdist controller: the other workers and all they started descend from it

    def split() -> None:
        mine = {me.pid} | {p.pid for p in me.children(recursive=True)}
        for process in [run, *run.children(recursive=True)]:
            _set(process, lane if process.pid in mine else rest)

    done = threading.Event()

    def keep_split() -> None:
        while not done.wait(interval_s):
            split()

    split()
    keeper = threading.Thread(target=keep_split, name="quiet-core", daemon=True)
    keeper.start()
    try:
        yield
    finally:
        done.set()
        keeper.join()
        for _ in range(2):  # the second pass catches a child forked from a parent the first pass had not reached
            for process in [run, *run.children(recursive=True)]:
                _set(process, cpus)
