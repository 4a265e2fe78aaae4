"""The short real CPU run of the tests that check how a run ends (input only ultralytics rejects, a store that
refuses the run, a corrupt trace): YOLO11n at 64 px, batch 4, 8 synthetic images, ultralytics' validation as by
default, a profiler window of one warm-up and one active step with shapes and memory recorded (the defaults)."""

from __future__ import annotations

from typing import Any


def short_run(**overrides: Any) -> dict[str, Any]:
    """The short run as RunSpec fields, with `overrides` (max_steps, experiment, train_args ...)."""
    return {
        "imgsz": 64,
        "batch": 4,
        "workers": 0,
        "device": "cpu",
        "synthetic_images": 8,
        "profiler": {"wait": 0, "warmup": 1, "active": 1},
    } | overrides
