"""The analysis layer's one process pool: the members of one indexed trace read side by side (loading/parallel.py)
and a job's rank traces analyzed side by side (trace_analysis.py) both run their tasks through `WorkerPool`, a
concurrent.futures.ProcessPoolExecutor with an explicit start method, each task in a process of its own.

- fork, where it is safe (Linux, no other thread in this process, which is no pool worker itself) and every task
  has a worker of its own: the workers start at once with everything this process imported and read, nothing to
  import again and nothing pickled on the way in but the task's arguments.
- forkserver otherwise (a Prefect worker's threads make a plain fork unsafe), the analysis preloaded in the server:
  a worker is forked from a process that imported it once, where a spawned worker imports it for every task; and
  `max_tasks_per_child=1`, so a worker's peak memory is its own task's, not that plus what its heap kept of the
  tasks before (exactly 1: above it the executor can stop replacing workers and hang, CPython gh-115634).
- spawn where the platform has neither.

Results and errors come back through the futures. Leaving a pool with a task still running (an error, or a result
no longer wanted) kills its workers instead of waiting for them. docs/benchmarks.md has the measurements.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from concurrent.futures import Future
    from multiprocessing.context import BaseContext

# imported once by the fork server before it forks a worker: everything a task runs
_PRELOAD = ["yolo_mlops.analysis.trace_analysis"]


def in_worker() -> bool:
    """Whether this process is a pool's worker (a multiprocessing child): it starts no pool of its own."""
    multiprocessing = sys.modules.get("multiprocessing")
    return multiprocessing is not None and multiprocessing.parent_process() is not None


def fork_is_safe() -> bool:
    """Linux, no other thread (a forked child inherits no lock another thread holds), and no pool's worker."""
    return sys.platform == "linux" and threading.active_count() == 1 and not in_worker()


def cores() -> int:
    """The cores this process may run on."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1  # pragma: no cover - Linux has sched_getaffinity


class WorkerPool:
    """Up to `workers` processes for `tasks` tasks, each task in a process of its own (forked: a worker a task,
    all started together; from the fork server: a fresh process each); a context manager."""

    def __init__(self, workers: int, tasks: int) -> None:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        self._known = set(multiprocessing.active_children())  # processes this one had already started
        workers = max(1, min(workers, tasks))
        if fork_is_safe() and tasks <= workers:
            self.start_method = "fork"
            self._process_pool = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork"))
        else:
            context = _server_context()
            self.start_method = context.get_start_method()
            self._process_pool = ProcessPoolExecutor(workers, mp_context=context, max_tasks_per_child=1)
        self._futures: list[Future] = []

    def submit(self, fn: Callable[..., Any], /, *args: Any) -> Future:
        future = self._process_pool.submit(fn, *args)
        self._futures.append(future)
        return future

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(self, *exc_info: object) -> None:
        if not all(future.done() for future in self._futures):
            self._kill_workers()
        self._process_pool.shutdown(wait=True, cancel_futures=True)

    def _kill_workers(self) -> None:
        import multiprocessing

        for process in set(multiprocessing.active_children()) - self._known:
            process.kill()


def _server_context() -> BaseContext:
    import multiprocessing

    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")  # pragma: no cover - every POSIX platform has forkserver
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(_PRELOAD)  # read when the server starts (the first pool of the process)
    return context
