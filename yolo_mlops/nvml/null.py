"""The null backend: no GPU or no NVML. It reports `none` and produces no samples at all (never zeros)."""

from __future__ import annotations

import time

from yolo_mlops.nvml.backend import DeviceReading


class NullNvmlBackend:
    """Backend `none`; `reason` says why nothing is sampled (the MLflow tag yolo_mlops.nvml_reason)."""

    name = "none"
    min_interval_s = 0.0

    def __init__(self, reason: str | None = None) -> None:
        self.devices: list[int] = []
        self.reason = reason

    def start(self) -> int:
        return time.perf_counter_ns()

    def read(self) -> list[DeviceReading]:
        return []

    def disable(self, metric: str) -> None:
        pass

    def close(self) -> None:
        pass
