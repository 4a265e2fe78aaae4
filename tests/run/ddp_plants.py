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


SLOW_FORWARD_S = 0.6  # the slow rank's every forward pass: its own compute, more than its step's other work
CHECKPOINT_RANK = 0
SLOW_CHECKPOINT_S = 4.0  # rank 0's first checkpoint: longer than the slow forwards of the whole window together


def slow_forward_on_rank1_slow_checkpoint_on_rank0(rank: int) -> None:
    """Rank 1's model forward sleeps before it runs (a pre-hook on the module DDP wraps): a compute straggler,
    its data loading untouched. Rank 0's first checkpoint (the end of epoch 0) sleeps: a one-off stall at the
    epoch boundary, in which rank 1 waits for rank 0 in the collectives that close the epoch."""
    import ultralytics.utils.callbacks.base as callbacks_base
    from ultralytics.models.yolo.detect import DetectionTrainer

    if rank == SLOW_RANK:

        def slow(module, args) -> None:
            time.sleep(SLOW_FORWARD_S)

        def hook(trainer) -> None:
            model = getattr(trainer.model, "module", trainer.model)  # the module inside DDP's wrapper
            model.register_forward_pre_hook(slow)

        callbacks_base.default_callbacks["on_train_start"].append(hook)
    if rank == CHECKPOINT_RANK:
        original = DetectionTrainer.save_model
        saved: list[int] = []

        def slow_save(self):
            if not saved:
                saved.append(1)
                time.sleep(SLOW_CHECKPOINT_S)
            return original(self)

        setattr(DetectionTrainer, "save_model", slow_save)  # noqa: B010  (a method replaced on purpose)
