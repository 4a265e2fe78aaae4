"""Instrumentation overhead under DDP: a 2-rank CPU job (gloo) with and without the instrumentation.

Both arms start the same command, `python -m torch.distributed.run --standalone --nproc-per-node 2` over this
script, and train YOLO11n on the synthetic dataset through the same trainer subclass and the same DDP path
(the ranks join a gloo process group, ultralytics wraps the model). The instrumented arm is a rank of a real
job (`training.train`: step timer, profiler window, phase labels, NVML sampler, forward hooks); the plain arm
registers none of it. Arms alternate (A B, B A, ...), each run in fresh processes, so machine drift hits both.

Step time is what both arms measure alike: the interval between consecutive `on_train_batch_end` callbacks,
after the profiler window and the step that exports its trace; the job's step time is the slower rank's median.
Each run's whole wall time (launcher start to exit) is reported too.

    .venv/bin/python benchmarks/bench_ddp_overhead.py --repeats 5 --steps 40
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

# run as a script (by torch.distributed.run too): its folder is on sys.path
from bench_instrumentation_overhead import synthetic_run, train_instrumented, training_options
from harness import Samples, interleave, time_child

FIRST_MEASURED = 7  # 1-based: after the profiler window (steps 1-5) and the step that exports its trace (6)
RANKS = 2


class _NoInstrumentation:
    """What the trainer subclass asks of its instrumentation, doing nothing: the plain arm."""

    pin_memory = None

    def open(self, name: str) -> None:
        pass

    def close_all(self) -> None:
        pass


def rank_child(mode: str, steps: int, imgsz: int, batch: int, workers: int, out: Path) -> None:
    rank = int(os.environ["RANK"])
    data, spec = synthetic_run(steps, imgsz, batch, workers, "cpu", ddp={"ranks": RANKS})
    ends: list[int] = []
    with tempfile.TemporaryDirectory() as tmp:
        from yolo_mlops.run import training

        plan = training.TrainingPlan(spec, data, "cpu", Path(tmp), steps, rank=rank)
        if mode == "instrumented":
            train_instrumented(plan, ends)
        else:
            from yolo_mlops.compat import ultralytics as ultralytics_compat

            trainer = training._make_trainer_class()(overrides=training.ultralytics_args(plan))
            trainer.instrumentation = _NoInstrumentation()
            trainer.ddp_settings = spec.ddp
            trainer.world_size = RANKS

            def plain_end(trainer) -> None:
                ends.append(time.perf_counter_ns())
                if len(ends) >= steps:
                    trainer.stop = True

            trainer.add_callback("on_train_batch_end", plain_end)
            with ultralytics_compat.amp_check_skipped():  # as training.train: no weights download
                trainer.train()
    (out / f"{mode}-rank{rank}.json").write_text(json.dumps(ends))


def job_step_ms(out: Path, mode: str) -> tuple[float, int]:
    """The slower rank's median step time over the measured steps, and how many steps that is."""
    medians, counts = [], []
    for rank in range(RANKS):
        ends = json.loads((out / f"{mode}-rank{rank}.json").read_text())
        intervals = [(b - a) / 1e6 for a, b in zip(ends, ends[1:], strict=False)][FIRST_MEASURED - 2 :]
        medians.append(statistics.median(intervals))
        counts.append(len(intervals))
    return max(medians), min(counts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--imgsz", type=int, default=128)
    parser.add_argument("--batch", type=int, default=8, help="the job's batch: batch / 2 images per rank")
    parser.add_argument("--workers", type=int, default=0)
    parser.add_argument("--rank-child", choices=["plain", "instrumented"], help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.rank_child:
        rank_child(args.rank_child, args.steps, args.imgsz, args.batch, args.workers, args.out)
        return
    home = tempfile.mkdtemp(prefix="bench-ddp-")
    env = {
        **os.environ,
        "YOLO_MLOPS_HOME": home,
        "OMP_NUM_THREADS": "1",
        "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parents[1]), os.environ.get("PYTHONPATH", "")]),
    }
    steps_ms: Samples[str] = Samples(["plain", "instrumented"])
    wall_s: Samples[str] = Samples(steps_ms)
    for repeat, mode in interleave(steps_ms, args.repeats, order="alternate"):
        out = Path(tempfile.mkdtemp(prefix=f"bench-ddp-{mode}-"))
        command = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc-per-node",
            str(RANKS),
            __file__,
            "--rank-child",
            mode,
            "--out",
            str(out),
            *training_options(args),
        ]
        child = time_child(command, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wall = wall_s.add(mode, child.seconds)
        median, count = job_step_ms(out, mode)
        steps_ms.add(mode, median)
        print(
            f"repeat {repeat + 1} {mode:<12} median step {median:8.2f} ms over {count} steps "
            f"(slower rank); whole command {wall:6.1f} s",
            flush=True,
        )
    ratios = steps_ms.paired_ratios("instrumented", "plain")
    step, wall_median = steps_ms.medians(), wall_s.medians()
    print(f"median step: plain {step['plain']:.2f} ms, instrumented {step['instrumented']:.2f} ms")
    print(
        f"ratio instrumented/plain: {statistics.median(ratios):.4f} (per-repeat ratios "
        f"{', '.join(f'{r:.4f}' for r in ratios)})"
    )
    print(
        f"whole command: plain {wall_median['plain']:.1f} s, instrumented {wall_median['instrumented']:.1f} s (medians)"
    )


if __name__ == "__main__":
    main()
