"""The CUDA memory snapshot hook: a no-op that says why on CPU; recorded over the window on a GPU."""

from __future__ import annotations

import pickle

import pytest
import torch

from yolo_mlops.profiling.cuda_memory import RECORDED, CudaMemorySnapshot


def test_cpu_run_skips_and_says_why(tmp_path):
    snap = CudaMemorySnapshot(tmp_path, "cpu")
    for recording in (False, True, True, False):
        snap.follow(recording)
    snap.close()
    assert snap.status is not None and snap.status.startswith("skipped: training on CPU")
    assert not snap.path.exists()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_gpu_snapshot_covers_the_window(tmp_path):
    snap = CudaMemorySnapshot(tmp_path, "cuda:0")
    snap.follow(False)
    snap.follow(True)  # window opens
    kept = [torch.empty(2**20, device="cuda") for _ in range(3)]
    snap.follow(True)
    snap.follow(False)  # window closes: dumped
    assert snap.status == RECORDED and snap.path.stat().st_size > 0
    snapshot = pickle.loads(snap.path.read_bytes())
    assert snapshot["device_traces"] and kept
    snap.follow(True)  # one snapshot per run
    assert snap.status == RECORDED
