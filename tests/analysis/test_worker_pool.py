"""The analysis layer's one process pool: where it forks and where it starts workers from the fork server, a
process of its own for every task, results and errors through the futures, and no worker left behind."""

from __future__ import annotations

import multiprocessing
import os
import sys
import time
from pathlib import Path

import pytest

from yolo_mlops.analysis import worker_pool
from yolo_mlops.analysis.worker_pool import WorkerPool

sys.path.insert(0, str(Path(__file__).resolve().parent))
from pool_tasks import pid_after  # noqa: E402


def test_forks_where_safe_when_every_task_has_a_worker(monkeypatch):
    monkeypatch.setattr(worker_pool, "fork_is_safe", lambda: True)
    with WorkerPool(4, 2) as pool:
        assert pool.start_method == "fork"
        pids = [pool.submit(pid_after, 0.5) for _ in range(2)]  # one worker a task, both at work at once
        assert len({f.result() for f in pids} | {os.getpid()}) == 3


def test_more_tasks_than_workers_get_a_fresh_process_each_from_the_fork_server(monkeypatch):
    monkeypatch.setattr(worker_pool, "fork_is_safe", lambda: True)
    with WorkerPool(2, 4) as pool:
        assert pool.start_method == "forkserver"
        pids = [pool.submit(os.getpid) for _ in range(4)]
        assert len({f.result() for f in pids}) == 4


def test_where_fork_is_unsafe_the_fork_server_starts_the_workers(monkeypatch):
    monkeypatch.setattr(worker_pool, "fork_is_safe", lambda: False)
    with WorkerPool(2, 2) as pool:
        assert pool.start_method == "forkserver"
        assert pool.submit(worker_pool.in_worker).result() is True  # a worker starts no pool of its own


def test_a_task_error_is_raised_by_its_future():
    with WorkerPool(2, 2) as pool:
        future = pool.submit(int, "not a number")
        with pytest.raises(ValueError, match="not a number"):
            future.result()


def test_leaving_with_a_task_running_kills_the_workers(monkeypatch):
    monkeypatch.setattr(worker_pool, "fork_is_safe", lambda: True)
    started = time.monotonic()
    with pytest.raises(RuntimeError, match="given up"), WorkerPool(2, 2) as pool:
        pool.submit(time.sleep, 300)
        pool.submit(os.getpid).result()  # the workers are up
        raise RuntimeError("given up")
    assert time.monotonic() - started < 60
    assert not multiprocessing.active_children()
