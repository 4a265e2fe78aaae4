"""Faults planted into one rank of a data-parallel test job by the test's own code, never by a product path.

The ranks are processes of their own, so a test cannot monkeypatch them: it names one of these functions in
YOLO_MLOPS_RANK_SETUP, and every rank calls it with its rank number before building its trainer.
"""

from __future__ import annotations

import os
import signal
import time

SLOW_RANK = 1
SLEEP_PER_IMAGE_S = 0.5  # the slow rank's loader: 1 s more per step (2 images per rank), several steps' compute
KILLED_RANK = 1
KILL_AT_STEP = 7  # after the profiler window (steps 3 to 6) has written its traces


def slow_data_on_rank1(rank: int) -> None:
    """Rank 1's dataset sleeps on every image it loads (the loader runs in the training process: workers 0)."""
    if rank != SLOW_RANK:
        return
    from ultralytics.data.dataset import YOLODataset

    original = YOLODataset.__getitem__

    def slow_getitem(self, index):
        time.sleep(SLEEP_PER_IMAGE_S)
        return original(self, index)

    setattr(YOLODataset, "__getitem__", slow_getitem)  # noqa: B010  (a method replaced on purpose)


def kill_rank1(rank: int) -> None:
    """Rank 1 dies by SIGKILL at the end of step KILL_AT_STEP, as an out-of-memory kill would end it."""
    if rank != KILLED_RANK:
        return
    import ultralytics.utils.callbacks.base as callbacks_base

    steps = []

    def die(trainer) -> None:
        steps.append(1)
        if len(steps) == KILL_AT_STEP:
            os.kill(os.getpid(), signal.SIGKILL)

    callbacks_base.default_callbacks["on_train_batch_end"].append(die)
