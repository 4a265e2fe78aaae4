"""The tiny CPU training of the tests that run real trainings in flows (sweeps, bisect): YOLO11n at 64 px,
batch 4, 16 synthetic images, no validation, a profiler window of one warm-up and one active step without
shapes or memory. Seconds on one core, yet ultralytics, torch.profiler, Prefect and MLflow do all their work."""

from __future__ import annotations

from typing import Any

TINY_PROFILER = {"wait": 0, "warmup": 1, "active": 1, "record_shapes": False, "profile_memory": False}


def tiny(**overrides: Any) -> dict[str, Any]:
    """The tiny workload as RunSpec fields (4 steps), with `overrides` (max_steps, experiment, profiler ...)."""
    return {
        "imgsz": 64,
        "batch": 4,
        "max_steps": 4,
        "workers": 0,
        "device": "cpu",
        "synthetic_images": 16,
        "val": False,
        "profiler": dict(TINY_PROFILER),
    } | overrides
