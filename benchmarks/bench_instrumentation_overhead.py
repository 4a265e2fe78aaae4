"""Instrumentation overhead: steps outside the profiler window vs the same training with no instrumentation.

Both arms train YOLO11n on the synthetic dataset with identical settings, each run in a fresh subprocess,
interleaved (A B A B ...) so machine drift hits both alike. Step time is measured the same way in both
arms: the interval between consecutive `on_train_batch_end` callbacks, so every cost our instrumentation
adds (step timer, profiler.step(), label bookkeeping) is inside the measured interval. In the instrumented
arm, steps in the profiler window (and the one after, which pays for trace export) are left out.

    .venv/bin/python benchmarks/bench_instrumentation_overhead.py --repeats 5 --steps 40
    .venv/bin/python benchmarks/bench_instrumentation_overhead.py --device 0 --imgsz 640 --batch 16 --workers 4
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from yolo_mlops.config import RunSpec

WINDOW = {"skip_first": 0, "wait": 1, "warmup": 1, "active": 3, "repeat": 1}


def synthetic_run(steps: int, imgsz: int, batch: int, workers: int, device: str, **fields: Any) -> tuple[Path, RunSpec]:
    """The synthetic dataset's YAML (`steps` batches of training images) and the RunSpec both arms train with:
    one epoch cut at `steps`, no validation, the profiler window WINDOW; `fields` are added to the spec."""
    from yolo_mlops.config import build_run_spec, data_home
    from yolo_mlops.run.datasets import synthetic_dataset
    from yolo_mlops.run.offline import configure_ultralytics

    home = data_home()
    configure_ultralytics(home)
    dataset = synthetic_dataset(home / "datasets", train_images=steps * batch)
    spec = build_run_spec(
        {
            "imgsz": imgsz,
            "batch": batch,
            "epochs": 1,
            "max_steps": steps,
            "workers": workers,
            "device": device,
            "val": False,
            "profiler": WINDOW,
            "train_args": {"close_mosaic": 0},
            **fields,
        }
    )
    return dataset.yaml_path, spec


def train_instrumented(plan, ends: list[int]) -> None:
    """`training.train(plan)`, the instrumented arm: a real run's instrumentation, with perf_counter_ns()
    appended to `ends` after its own on_train_batch_end, so every cost it adds is inside the measured interval."""
    from yolo_mlops.run import training

    original = training._Instrumentation.on_train_batch_end

    def timed(self, trainer):
        original(self, trainer)
        ends.append(time.perf_counter_ns())

    setattr(training._Instrumentation, "on_train_batch_end", timed)  # noqa: B010  (a method wrapped on purpose)
    training.train(plan)


def training_options(args: argparse.Namespace) -> list[str]:
    """The parsed training options (steps, image size, batch, loader workers) as a child's command line."""
    return [
        "--steps",
        str(args.steps),
        "--imgsz",
        str(args.imgsz),
        "--batch",
        str(args.batch),
        "--workers",
        str(args.workers),
    ]


def child(mode: str, steps: int, imgsz: int, batch: int, device: str, workers: int, out: Path) -> None:
    data, spec = synthetic_run(steps, imgsz, batch, workers, device)
    ends: list[int] = []
    with tempfile.TemporaryDirectory() as tmp:
        from yolo_mlops.run import training

        plan = training.TrainingPlan(spec, data, device, Path(tmp), steps)
        if mode == "instrumented":
            train_instrumented(plan, ends)
        else:
            from ultralytics.models.yolo.detect import DetectionTrainer

            class Trainer(DetectionTrainer):
                """val=False as the instrumented arm (the library) takes it: no validation pass after the stop and
                none of best.pt, which ultralytics otherwise runs after the measured steps (child time only)."""

                def validate(self):
                    return {}, None

                def final_eval(self):
                    return None

            trainer = Trainer(overrides=training.ultralytics_args(plan))

            def stop_at_max(trainer):
                ends.append(time.perf_counter_ns())
                if len(ends) >= steps:
                    trainer.stop = True

            trainer.add_callback("on_train_batch_end", stop_at_max)
            trainer.train()
    intervals = [(b - a) / 1e6 for a, b in zip(ends, ends[1:], strict=False)]  # interval i = step i+1
    window_end = WINDOW["skip_first"] + WINDOW["wait"] + WINDOW["warmup"] + WINDOW["active"]
    # step index k (0-based) has interval index k-1; drop step 0 (no interval), window steps and the export step
    keep = [ms for k, ms in enumerate(intervals, start=1) if k > window_end + 1]
    out.write_text(json.dumps({"mode": mode, "median_ms": statistics.median(keep), "steps": len(keep)}))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--imgsz", type=int, default=128)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--device", default="cpu", help="'cpu' or a CUDA index such as 0")
    parser.add_argument("--workers", type=int, default=0)
    parser.add_argument("--child", choices=["instrumented", "plain"])
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.steps, args.imgsz, args.batch, args.device, args.workers, args.out)
        return
    results: dict[str, list[float]] = {"plain": [], "instrumented": []}
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "YOLO_MLOPS_HOME": os.environ.get("YOLO_MLOPS_HOME", str(Path(tmp) / "home"))}
        for repeat in range(args.repeats):
            for mode in ("plain", "instrumented") if repeat % 2 == 0 else ("instrumented", "plain"):
                out = Path(tmp) / f"{mode}-{repeat}.json"
                subprocess.run(
                    [
                        sys.executable,
                        __file__,
                        "--child",
                        mode,
                        "--out",
                        str(out),
                        *training_options(args),
                        "--device",
                        args.device,
                    ],
                    check=True,
                    env=env,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
                row = json.loads(out.read_text())
                results[mode].append(row["median_ms"])
                print(
                    f"repeat {repeat} {mode:<12} median step {row['median_ms']:8.2f} ms over {row['steps']} steps",
                    flush=True,
                )
    plain, inst = statistics.median(results["plain"]), statistics.median(results["instrumented"])
    ratios = [i / p for i, p in zip(results["instrumented"], results["plain"], strict=True)]
    print(f"\nplain        median of medians {plain:8.2f} ms")
    print(f"instrumented median of medians {inst:8.2f} ms")
    print(
        f"ratio instrumented/plain: {inst / plain:.4f} (per-repeat ratios {', '.join(f'{r:.3f}' for r in ratios)})"
        f"  goal <= 1.03"
    )


if __name__ == "__main__":
    main()
