from __future__ import annotations

import pytest

from yolo_mlops.nvml import sampler as sampler_module


class ManualClock:
    """perf_counter_ns stand-in the test advances by hand."""

    def __init__(self, start_s: float = 100.0) -> None:
        self.now_ns = int(start_s * 1e9)

    def __call__(self) -> int:
        return self.now_ns

    def advance(self, seconds: float) -> None:
        self.now_ns += int(round(seconds * 1e9))


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture(autouse=True)
def _free_process_sampler_slot():
    """A test that fails mid-way must not leave the one-sampler-per-process slot taken."""
    yield
    sampler_module._process_sampler_running[0] = False
