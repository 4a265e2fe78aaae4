"""A profiled run with `val: false`: no validation pass, against ultralytics' own val=False.

ultralytics' val=False still validates after the last epoch (and after a stop, which `max_steps` sets) and then
validates best.pt once more; the project's trainer skips both. Both arms run the whole profiled run in-process
(`pipeline.prepare/train/analyze/track`: ultralytics training with the profiler window, trace analysis, a SQLite
MLflow store) on a synthetic dataset whose validation split is a quarter of its training images, interleaved,
after one warm-up run of each; the table gives the medians and the ratio.

    python benchmarks/bench_val_false.py --repeats 5 --imgsz 320 --batch 8 --max-steps 10 --images 256
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

from harness import Samples, Stopwatch, interleave


def _arms():
    from ultralytics.engine.trainer import BaseTrainer

    from yolo_mlops.run import training

    project = training._make_trainer_class

    def ultralytics_val_false():
        """The project's trainer with ultralytics' own validate/final_eval: what val=False did before."""
        return type(
            "UltralyticsValFalse",
            (project(),),
            {"validate": BaseTrainer.validate, "final_eval": BaseTrainer.final_eval},
        )

    return {"val: false (no validation pass)": project, "ultralytics val=False": ultralytics_val_false}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--imgsz", type=int, default=320)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--max-steps", type=int, default=10)
    parser.add_argument("--images", type=int, default=256, help="training images; validation gets a quarter")
    args = parser.parse_args()

    home = Path(tempfile.mkdtemp(prefix="bench-val-false-"))
    os.environ.setdefault("YOLO_OFFLINE", "1")
    os.environ["YOLO_MLOPS_HOME"] = str(home / "home")
    os.environ["MLFLOW_TRACKING_URI"] = f"sqlite:///{home / 'mlflow.db'}"

    from yolo_mlops.config import build_run_spec
    from yolo_mlops.run import pipeline, training

    spec = build_run_spec(
        {
            "imgsz": args.imgsz,
            "batch": args.batch,
            "max_steps": args.max_steps,
            "workers": 0,
            "device": "cpu",
            "synthetic_images": args.images,
            "val": False,
            "experiment": "bench-val-false",
            "profiler": {"wait": 1, "warmup": 1, "active": 2},
        }
    )
    arms = _arms()
    seconds: Samples[str] = Samples(arms)
    val_metrics: dict[str, set[str]] = {name: set() for name in arms}
    for repeat, name in interleave(arms, args.repeats + 1, order="same"):  # repeat 0 warms both arms up, not counted
        training._make_trainer_class = arms[name]
        with Stopwatch() as watch:
            prepared = pipeline.prepare(spec)
            outcome = pipeline.train(prepared)
            pipeline.track(prepared, outcome, pipeline.analyze(prepared, outcome))
        if repeat:
            seconds.add(name, watch.seconds)
        val_metrics[name] |= set(outcome.val_metrics)

    print(
        f"YOLO11n, imgsz {args.imgsz}, batch {args.batch}, {args.max_steps} steps, {args.images} training and "
        f"{max(4, args.images // 4)} validation images, CPU; medians of {args.repeats} interleaved repeats"
    )
    print("| arm | median s (whole run) | ratio | val/* metrics logged |")
    print("|---|---|---|---|")
    medians, ratios = seconds.medians(), seconds.ratios(next(iter(arms)))
    for name in arms:
        print(f"| {name} | {medians[name]:.2f} | {ratios[name]:.2f} | {len(val_metrics[name])} |")


if __name__ == "__main__":
    main()
