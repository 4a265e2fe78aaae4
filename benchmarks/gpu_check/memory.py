"""The memory step: peak memory of the training device split by holder (benchmarks/bench_memory_by_holder.py)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from . import BENCH
from .output import last_line

if TYPE_CHECKING:
    from .runner import Checks, StepRun


def cmd_memory_by_holder(ch: Checks) -> list[str]:
    size = ["--imgsz", "64", "--batch", "4"] if ch.tiny else ["--imgsz", "640", "--batch", "16"]
    return [
        ch.py,
        str(BENCH / "bench_memory_by_holder.py"),
        "--device",
        ch.device,
        "--models",
        "yolo11n",
        "--repeats",
        "1",
        *size,
        "--result",
        str(ch.work / "memory_by_holder.json"),
    ]


def judge_memory_by_holder(ch: Checks, run: StepRun, output: str) -> None:
    """Peak memory of the training device split by holder (torch's memory profiler, with_stack on)."""
    path = ch.work / "memory_by_holder.json"
    arms: dict[str, dict[str, Any]] = json.loads(path.read_text()) if path.exists() else {}
    arm = next(iter(arms.values()), {})
    split = arm.get("last", {})
    run.result = {"split_s": arm.get("split_s_median"), "window_s": arm.get("window_s_median"), "split": split}
    want = "cpu" if ch.device == "cpu" else f"cuda:{ch.device.removeprefix('cuda:')}"
    if run.rc != 0 or not split:
        run.status, run.note = "failed", f"no split (exit {run.rc}): {last_line(output)}"
        return
    held = {k.removeprefix("memory/peak_").removesuffix("_mib"): v for k, v in split.items() if k.startswith("memory/")}
    ok = split.get("device") == want and held.get("parameter", 0) > 0 and held.get("total", 0) > 0
    run.status = ("ran" if ch.tiny else "passed") if ok else "failed"
    run.note = (
        f"{split.get('device')} peak MiB "
        + ", ".join(f"{k} {v}" for k, v in held.items())
        + f"; split took {arm.get('split_s_median', float('nan')):.2f} s"
    )
