"""Instrumentation overhead: steps outside the profiler window vs the same training with no instrumentation.

Both arms train the same model on the synthetic dataset with identical settings, each run in a fresh subprocess,
interleaved (A B, B A, ...) so machine drift hits both alike. Step time is measured the same way in both arms:
the interval between consecutive `on_train_batch_end` callbacks, so every cost our instrumentation adds (step
timer, profiler.step(), label bookkeeping, loss bookkeeping, forward hooks, the NVML sampler thread) is inside
the measured interval. In the instrumented arm, steps in the profiler window (and the one after, which pays for
trace export) are left out.

    .venv/bin/python benchmarks/bench_instrumentation_overhead.py --repeats 5 --steps 40
    .venv/bin/python benchmarks/bench_instrumentation_overhead.py --device 0 --imgsz 640 --batch 16 --workers 4

A host-bound workload, where every microsecond of host work per step shows (a GPU run that waits on its
kernel launches behaves so): `--model tiny` (a five-conv detector, TINY_MODEL) at 64 px, batch 1, steps of a
few milliseconds on a CPU; `--nvml-backend fake` runs the sampler thread on CPU at its default interval (the
null backend starts no thread); `--breakdown` adds a third child per repeat, the instrumented arm with each
instrument's calls timed by perf_counter_ns (exclusive of the calls it makes into other timed parts), printed
per step in microseconds; its step times are not in the ratio.

    .venv/bin/python benchmarks/bench_instrumentation_overhead.py --model tiny --imgsz 64 --batch 1 \
        --workers 0 --steps 300 --repeats 6 --nvml-backend fake --breakdown

`--skip-first N` opens the profiler window after N steps; both arms then also report the median of the steps
before it, which tells a cost the window leaves behind (after it) from one the instrumentation always has.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness import Samples, round_order

if TYPE_CHECKING:
    from yolo_mlops.config import RunSpec

WINDOW = {"skip_first": 0, "wait": 1, "warmup": 1, "active": 3, "repeat": 1}

# Five stride-2 convs and YOLO11's Detect head on P3-P5: the same trainer, loss and optimizer path as YOLO11n
# with a fraction of its kernels, so that a CPU step takes a few milliseconds and host costs show.
TINY_MODEL = """\
nc: 80
backbone:
  - [-1, 1, Conv, [8, 3, 2]]
  - [-1, 1, Conv, [8, 3, 2]]
  - [-1, 1, Conv, [8, 3, 2]]
  - [-1, 1, Conv, [8, 3, 2]]
  - [-1, 1, Conv, [8, 3, 2]]
head:
  - [[2, 3, 4], 1, Detect, [nc]]
"""


def model_path(model: str) -> str:
    """`tiny`: TINY_MODEL written into the data home; anything else is passed on as ultralytics' model."""
    if model != "tiny":
        return model
    from yolo_mlops.config import data_home

    path = data_home() / "bench-models" / "yolo-tiny.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists() or path.read_text() != TINY_MODEL:
        path.write_text(TINY_MODEL)
    return str(path)


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


def train_instrumented(plan, ends: list[int], at_end: Callable[[], None] | None = None) -> None:
    """`training.train(plan)`, the instrumented arm: a real run's instrumentation, with perf_counter_ns()
    appended to `ends` after its own on_train_batch_end, so every cost it adds is inside the measured interval;
    `at_end` (if any) is called right after."""
    from yolo_mlops.run import training

    original = training._Instrumentation.on_train_batch_end

    def timed(self, trainer):
        original(self, trainer)
        ends.append(time.perf_counter_ns())
        if at_end is not None:
            at_end()

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


class Tally:
    """Exclusive time per timed part, main thread only: a part's time less the timed parts it called."""

    def __init__(self) -> None:
        self.total: dict[str, int] = defaultdict(int)
        self.calls: dict[str, int] = defaultdict(int)
        self._stack: list[int] = []  # time spent in timed callees, per open part
        self._main = threading.get_ident()
        self.polls: list[tuple[int, int, int]] = []  # sampler thread: (end ns, wall ns, thread CPU ns) per poll

    def wrap(self, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        clock, stack, total, calls, main = time.perf_counter_ns, self._stack, self.total, self.calls, self._main

        def timed(*args: Any, **kwargs: Any) -> Any:
            if threading.get_ident() != main:
                return fn(*args, **kwargs)
            stack.append(0)
            started = clock()
            try:
                return fn(*args, **kwargs)
            finally:
                spent = clock() - started
                total[name] += spent - stack.pop()
                calls[name] += 1
                if stack:
                    stack[-1] += spent

        return timed

    def wrap_poll(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        polls = self.polls

        def timed(*args: Any, **kwargs: Any) -> Any:
            started, cpu = time.perf_counter_ns(), time.thread_time_ns()
            try:
                return fn(*args, **kwargs)
            finally:
                now = time.perf_counter_ns()
                polls.append((now, now - started, time.thread_time_ns() - cpu))

        return timed

    def snapshot(self) -> dict[str, int]:
        """Totals so far: exclusive ns per part, and its calls under `#<part>`."""
        return {**self.total, **{f"#{name}": n for name, n in self.calls.items()}}


# What --breakdown times, by (module, class or None, attribute) -> the name it is reported under. Parts that a
# version of the library lacks are skipped; ULTRALYTICS_WORK are ultralytics' own methods the trainer subclass
# calls, timed only so that they are not counted as the subclass's.
TIMED_PARTS: dict[tuple[str, str | None, str], str] = {
    ("yolo_mlops.run.training", "_Instrumentation", "on_train_start"): "callback on_train_start",
    ("yolo_mlops.run.training", "_Instrumentation", "on_train_epoch_start"): "callback on_train_epoch_start",
    ("yolo_mlops.run.training", "_Instrumentation", "on_train_batch_start"): "callback on_train_batch_start",
    ("yolo_mlops.run.training", "_Instrumentation", "on_train_batch_end"): "callback on_train_batch_end",
    ("yolo_mlops.run.training", "_Instrumentation", "on_train_epoch_end"): "callback on_train_epoch_end",
    ("yolo_mlops.run.training", "_Instrumentation", "_forward_start"): "forward pre-hook",
    ("yolo_mlops.run.training", "_Instrumentation", "_forward_end"): "forward hook",
    ("yolo_mlops.run.training", "_Instrumentation", "open"): "phase labels: open",
    ("yolo_mlops.run.training", "_Instrumentation", "close_all"): "phase labels: close_all",
    ("yolo_mlops.run.training", "_Instrumentation", "_keep_losses"): "step_losses",
    ("yolo_mlops.run.training", None, "_loss_dict"): "step_losses",
    ("yolo_mlops.profiling.step_timer", "StepTimer", "iteration_start"): "step timer",
    ("yolo_mlops.profiling.step_timer", "StepTimer", "batch_start"): "step timer",
    ("yolo_mlops.profiling.step_timer", "StepTimer", "batch_end"): "step timer",
    ("yolo_mlops.profiling.torch_profiler", "TrainingProfiler", "step"): "profiler.step()",
    ("yolo_mlops.profiling.cuda_memory", "CudaMemorySnapshot", "follow"): "memory snapshot follow",
}
SUBCLASS_PARTS = {
    "preprocess_batch": "trainer subclass: preprocess_batch",
    "optimizer_step": "trainer subclass: optimizer_step",
}
ULTRALYTICS_WORK: dict[tuple[str, str | None, str], str] = {
    ("ultralytics.models.yolo.detect.train", "DetectionTrainer", "preprocess_batch"): "(ultralytics preprocess_batch)",
    ("ultralytics.engine.trainer", "BaseTrainer", "optimizer_step"): "(ultralytics optimizer_step)",
}


def install_tally(tally: Tally) -> None:
    """Wrap every part of TIMED_PARTS and ULTRALYTICS_WORK, the trainer subclass's overrides and the sampler's poll."""
    import importlib

    from yolo_mlops.nvml import sampler
    from yolo_mlops.run import training

    for (module_name, class_name, attribute), name in {**TIMED_PARTS, **ULTRALYTICS_WORK}.items():
        owner: Any = importlib.import_module(module_name)
        if class_name is not None:
            owner = getattr(owner, class_name)
        if attribute in vars(owner):  # only where it is defined, so no part is timed twice
            setattr(owner, attribute, tally.wrap(name, getattr(owner, attribute)))
    build = training._make_trainer_class

    def make_trainer_class():
        trainer_class = build()
        for attribute, name in SUBCLASS_PARTS.items():
            setattr(trainer_class, attribute, tally.wrap(name, getattr(trainer_class, attribute)))
        return trainer_class

    training._make_trainer_class = make_trainer_class
    sampler.NvmlSampler.poll_once = tally.wrap_poll(sampler.NvmlSampler.poll_once)  # type: ignore[method-assign]


def hook_dispatch_ns(calls: int = 20_000) -> float:
    """What a forward pre-hook and a forward hook on a module add to one call of it through nn.Module's dispatch,
    beyond their own bodies (timed as the hook parts): a module with two no-op hooks against a bare one, in ns."""
    import torch

    bare, hooked = torch.nn.Identity(), torch.nn.Identity()
    hooked.register_forward_pre_hook(lambda module, args: None)
    hooked.register_forward_hook(lambda module, args, output: None)
    x = torch.zeros(1)
    best: dict[int, float] = {}
    for _ in range(5):
        for module in (bare, hooked):
            started = time.perf_counter_ns()
            for _ in range(calls):
                module(x)
            best[id(module)] = min(best.get(id(module), float("inf")), (time.perf_counter_ns() - started) / calls)
    return best[id(hooked)] - best[id(bare)]


def wrapper_cost_ns(calls: int = 100_000) -> float:
    """One timed call's own cost (the wrapper around an empty function): each timed call inside a part adds it."""
    tally = Tally()
    timed = tally.wrap("empty", lambda: None)
    best = float("inf")
    for _ in range(5):
        started = time.perf_counter_ns()
        for _ in range(calls):
            timed()
        best = min(best, (time.perf_counter_ns() - started) / calls)
    plain = lambda: None  # noqa: E731
    base = float("inf")
    for _ in range(5):
        started = time.perf_counter_ns()
        for _ in range(calls):
            plain()
        base = min(base, (time.perf_counter_ns() - started) / calls)
    return best - base


def window_steps(skip_first: int) -> tuple[int, int]:
    """1-based steps (first, last) of the profiler window: wait steps are outside it, warm-up and active in it."""
    first = skip_first + WINDOW["wait"] + 1
    return first, skip_first + WINDOW["wait"] + WINDOW["warmup"] + WINDOW["active"]


def remember_trainers(trainer_seen: list[Any]) -> None:
    """Every trainer the library makes from now on, appended to `trainer_seen`: what it was left with after
    training (its callbacks) is checked for MLflow."""
    from yolo_mlops.run import training

    keep_trainer = training._make_trainer_class

    def make_trainer_class():
        trainer_class = keep_trainer()
        init = trainer_class.__init__

        def remembered(self, *args, **kwargs):
            init(self, *args, **kwargs)
            trainer_seen.append(self)

        trainer_class.__init__ = remembered
        return trainer_class

    training._make_trainer_class = make_trainer_class


def train_plain(plan, ends: list[int], steps: int) -> Any:
    """The plain arm: ultralytics' own trainer on the plan's arguments, stopped after `steps` steps; each step's end
    (perf_counter_ns) appended to `ends`. Returns the trainer."""
    from ultralytics.models.yolo.detect import DetectionTrainer

    from yolo_mlops.run import training

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
    return trainer


def child(
    mode: str,
    steps: int,
    imgsz: int,
    batch: int,
    device: str,
    workers: int,
    out: Path,
    model: str = "yolo11n.yaml",
    nvml_backend: str = "auto",
    skip_first: int = 0,
) -> None:
    WINDOW["skip_first"] = skip_first
    fields: dict[str, Any] = {"model": model_path(model)}
    if mode != "plain":
        fields["nvml"] = {"backend": nvml_backend}
    data, spec = synthetic_run(steps, imgsz, batch, workers, device, **fields)
    ends: list[int] = []
    tally = Tally() if mode == "breakdown" else None
    per_step: list[dict[str, int]] = []
    trainer_seen: list[Any] = []
    with tempfile.TemporaryDirectory() as tmp:
        from yolo_mlops.run import training

        plan = training.TrainingPlan(spec, data, device, Path(tmp), steps)
        if mode in ("instrumented", "breakdown"):
            if tally is not None:
                install_tally(tally)
            remember_trainers(trainer_seen)
            train_instrumented(plan, ends, (lambda: per_step.append(tally.snapshot())) if tally is not None else None)
        else:
            trainer_seen.append(train_plain(plan, ends, steps))
    intervals = [(b - a) / 1e6 for a, b in zip(ends, ends[1:], strict=False)]  # interval i = step i+1
    first_in_window, window_end = window_steps(skip_first)
    # step index k (0-based) has interval index k-1; drop step 0 (no interval), window steps and the export step
    kept = [k for k in range(1, len(ends)) if k > window_end + 1]
    keep = [intervals[k - 1] for k in kept]
    row: dict[str, Any] = {"mode": mode, "median_ms": statistics.median(keep), "steps": len(keep)}
    before = [intervals[k - 1] for k in range(1, min(first_in_window - 1, len(ends)))]
    if len(before) >= 3:
        row["before_window_median_ms"] = statistics.median(before)
    seen = trainer_seen[0] if trainer_seen else None
    row["mlflow_imported"] = "mlflow" in sys.modules
    if seen is not None:
        row["callbacks_mlflow"] = [
            f"{event}: {getattr(fn, '__module__', '?')}"
            for event, fns in seen.callbacks.items()
            for fn in fns
            if "mlflow" in str(getattr(fn, "__module__", ""))
        ]
    if tally is not None:
        row["breakdown_us"] = breakdown(tally, per_step, ends, kept, first_in_window, window_end)
        # the dispatch cost times the model's calls with our hooks on it, per step (the pre-hook's calls)
        hooked_calls = row["breakdown_us"].get("forward pre-hook", {}).get("outside_calls", 0.0)
        row["hook_dispatch_us"] = hook_dispatch_ns() / 1e3 * hooked_calls
        row["wrapper_us"] = wrapper_cost_ns() / 1e3
    out.write_text(json.dumps(row))


def breakdown(
    tally: Tally, per_step: list[dict[str, int]], ends: list[int], kept: list[int], first_in: int, last_in: int
) -> dict[str, dict[str, float]]:
    """Per part: mean µs per step over the kept steps (outside the window) and over the window's steps; the
    sampler's polls as wall and thread-CPU µs per kept step (polls that ended within the kept steps)."""

    def delta(k: int, name: str) -> int:  # step k's (0-based) exclusive time in `name`
        return per_step[k].get(name, 0) - (per_step[k - 1].get(name, 0) if k else 0)

    window = [k for k in range(len(per_step)) if first_in - 1 <= k <= last_in - 1]
    result: dict[str, dict[str, float]] = {}
    for name in sorted({n for snap in per_step for n in snap if not n.startswith("#")}):
        outside = [delta(k, name) for k in kept]
        inside = [delta(k, name) for k in window]
        result[name] = {
            "outside_us": statistics.fmean(outside) / 1e3 if outside else 0.0,
            "outside_median_us": statistics.median(outside) / 1e3 if outside else 0.0,
            "outside_max_us": max(outside) / 1e3 if outside else 0.0,
            "window_us": statistics.fmean(inside) / 1e3 if inside else 0.0,
            "outside_calls": statistics.fmean(delta(k, f"#{name}") for k in kept) if kept else 0.0,
        }
    if kept:
        start, end = ends[kept[0] - 1], ends[kept[-1]]
        polls = [(wall, cpu) for at, wall, cpu in tally.polls if start < at <= end]
        result["nvml sampler poll (thread)"] = {
            "outside_us": sum(wall for wall, _ in polls) / len(kept) / 1e3,
            "cpu_us": sum(cpu for _, cpu in polls) / len(kept) / 1e3,
            "polls": float(len(polls)),
        }
        # steps a poll overlapped against the others: what a poll delays the training thread by (GIL hand-offs)
        spans = [(at - wall, at) for at, wall, _ in tally.polls if start < at <= end]
        hit: list[float] = []
        missed: list[float] = []
        for k in kept:
            begin, finish = ends[k - 1], ends[k]
            (hit if any(a < finish and b > begin for a, b in spans) else missed).append((finish - begin) / 1e3)
        if hit and missed:
            result["steps with a poll"] = {
                "outside_us": statistics.median(hit) - statistics.median(missed),
                "steps": float(len(hit)),
            }
    return result


THREAD_PARTS = ("nvml sampler poll (thread)", "steps with a poll")  # not main-thread time of our callbacks


def print_breakdown(rows: list[dict[str, Any]]) -> None:
    """Median over the breakdown children of each part's µs per step, outside the window and inside it."""
    if not rows:
        return
    parts = sorted({name for row in rows for name in row["breakdown_us"]})
    ours = [p for p in parts if not p.startswith("(")]
    print(f"\nbreakdown: mean µs per step in each child, median over {len(rows)} children (exclusive times)")
    print(f"  {'part':<40} {'outside window':>14} {'in window':>10}")
    total = []
    for row in rows:
        parts_us = row["breakdown_us"]
        total.append(
            sum(parts_us[p]["outside_us"] for p in ours if p in parts_us and p not in THREAD_PARTS)
            + row["hook_dispatch_us"]
        )
    for name in parts:
        cells = [row["breakdown_us"][name] for row in rows if name in row["breakdown_us"]]
        outside = statistics.median(c["outside_us"] for c in cells)
        inside = statistics.median(c.get("window_us", 0.0) for c in cells)
        extra = ""
        if name == "steps with a poll":
            extra = f"  (median step with a poll minus without; {sum(c['steps'] for c in cells):.0f} steps in all)"
        if "cpu_us" in cells[0]:
            extra = (
                f"  (thread CPU {statistics.median(c['cpu_us'] for c in cells):.2f} µs/step, "
                f"{statistics.median(c['polls'] for c in cells):.0f} polls)"
            )
        print(f"  {name:<40} {outside:14.2f} {inside:10.2f}{extra}")
    print(f"  {'forward hooks: nn.Module dispatch':<40} {statistics.median(r['hook_dispatch_us'] for r in rows):14.2f}")
    print(f"  {'main thread, ours, outside window':<40} {statistics.median(total):14.2f}")
    print(
        f"  one timed call's own cost: {statistics.median(r['wrapper_us'] for r in rows):.2f} µs (inside the part "
        "that made the call)"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--imgsz", type=int, default=128)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--device", default="cpu", help="'cpu' or a CUDA index such as 0")
    parser.add_argument("--workers", type=int, default=0)
    parser.add_argument("--model", default="yolo11n.yaml", help="ultralytics model; 'tiny': TINY_MODEL")
    parser.add_argument(
        "--nvml-backend",
        choices=["auto", "fake", "none"],
        default="auto",
        help="the instrumented arm's NVML backend (auto: the null backend on CPU, no thread)",
    )
    parser.add_argument("--skip-first", type=int, default=0, help="steps before the profiler window's wait step")
    parser.add_argument("--breakdown", action="store_true", help="a third child per repeat times each instrument")
    parser.add_argument("--child", choices=["instrumented", "plain", "breakdown"])
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    if args.steps < args.skip_first + WINDOW["wait"] + WINDOW["warmup"] + WINDOW["active"] + 3:
        parser.error("--steps leaves no step after the profiler window and the step that exports its trace")
    if args.child:
        child(
            args.child,
            args.steps,
            args.imgsz,
            args.batch,
            args.device,
            args.workers,
            args.out,
            args.model,
            args.nvml_backend,
            args.skip_first,
        )
        return
    results: Samples[str] = Samples(["plain", "instrumented"])
    before: Samples[str] = Samples(results)
    breakdowns: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "YOLO_MLOPS_HOME": os.environ.get("YOLO_MLOPS_HOME", str(Path(tmp) / "home"))}
        for repeat in range(args.repeats):
            modes = round_order(list(results), repeat, order="alternate")
            for mode in modes + (["breakdown"] if args.breakdown else []):
                row = run_child(args, mode, Path(tmp) / f"{mode}-{repeat}.json", env)
                if row.get("mlflow_imported") or row.get("callbacks_mlflow"):
                    print(f"MLflow during training in {mode}: {row.get('callbacks_mlflow') or 'mlflow imported'}")
                if mode == "breakdown":
                    breakdowns.append(row)
                    print(f"breakdown {repeat} (timed child) median step {row['median_ms']:8.2f} ms", flush=True)
                    continue
                results.add(mode, row["median_ms"])
                pre = row.get("before_window_median_ms")
                if pre is not None:
                    before.add(mode, pre)
                print(
                    f"repeat {repeat} {mode:<12} median step {row['median_ms']:8.2f} ms over {row['steps']} steps"
                    + (f" (before the window {pre:.2f} ms)" if pre is not None else ""),
                    flush=True,
                )
    print_ratios(results, before)
    print_breakdown(breakdowns)


def run_child(args: argparse.Namespace, mode: str, out: Path, env: dict[str, str]) -> dict[str, Any]:
    """One arm's training in a fresh process (`--child MODE`): the row it writes to `out`."""
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
            "--model",
            args.model,
            "--nvml-backend",
            args.nvml_backend,
            "--skip-first",
            str(args.skip_first),
        ],
        check=True,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    return json.loads(out.read_text())


def print_ratios(results: Samples[str], before: Samples[str]) -> None:
    """The arms' medians of medians and their ratio: of the medians, and repeat by repeat."""
    median = results.medians()
    plain, inst = median["plain"], median["instrumented"]
    ratios = results.paired_ratios("instrumented", "plain")
    print(f"\nplain        median of medians {plain:8.2f} ms")
    print(f"instrumented median of medians {inst:8.2f} ms")
    print(
        f"ratio instrumented/plain: {inst / plain:.4f} (per-repeat ratios {', '.join(f'{r:.3f}' for r in ratios)})"
        f"  goal <= 1.03"
    )
    print(
        f"median of the per-pair ratios: {statistics.median(ratios):.4f} (range {min(ratios):.3f} - {max(ratios):.3f})"
    )
    if before["plain"] and before["instrumented"]:
        pre = before.medians()
        print(f"before the window: plain {pre['plain']:.2f} ms, instrumented {pre['instrumented']:.2f} ms")


if __name__ == "__main__":
    main()
