"""Cost of the NVML sampler (fake backend), not a timed test.

1. Sampler thread CPU: run NvmlSampler on FakeNvmlBackend at 10 Hz and 100 Hz for
   --seconds each; CPU time is time.thread_time() measured inside the sampling thread,
   reported as % of one core (goal at 10 Hz: <= 0.5 %).
2. Training slowdown: a small torch CPU training loop (1 torch thread), blocks of
   --steps steps without the sampler, with it (10 Hz), and without it again (A/A control,
   the noise floor of the machine), the block order rotated every repeat; per block the
   median step wall time and main-thread CPU time; ratio = median over repeats of
   block/without (goal <= 1.01), with quartiles. Steps are also split by whether a poll
   happened during them (with-sampler blocks) or a pseudo-poll on the same grid (control
   blocks, measuring the bias that long steps catch more polls): the difference of the two
   splits is the delay one poll adds to a training step.

The fake backend measures the sampler's own work (scheduling, Python, ring writes), not
the NVML driver calls of the real backend (tens of µs each on a GPU machine).

    .venv/bin/python benchmarks/bench_nvml_sampler.py
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np
from harness import Samples, round_order

from yolo_mlops.nvml import FakeNvmlBackend, FakeScript, NvmlSampler
from yolo_mlops.nvml.backend import Mode


def sampler_cpu_pct(mode: Mode, rate_hz: float, seconds: float) -> dict[str, object]:
    backend = FakeNvmlBackend(FakeScript(mode=mode))
    sampler = NvmlSampler(backend, interval_s=1.0 / rate_hz)
    wall_start = time.perf_counter()
    with sampler:
        time.sleep(seconds)
    wall_s = time.perf_counter() - wall_start
    return {
        "mode": mode,
        "rate_hz": rate_hz,
        "effective_hz": sampler.polls / wall_s,
        "cpu_pct_of_one_core": 100.0 * sampler.thread_cpu_s / wall_s,
        "cpu_us_per_poll": 1e6 * sampler.thread_cpu_s / max(sampler.polls, 1),
        "polls": sampler.polls,
    }


def _make_training():
    import torch
    from torch import nn

    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(32, 10),
    )
    optimiser = torch.optim.SGD(model.parameters(), lr=0.01)
    images = torch.randn(16, 3, 64, 64)
    labels = torch.randint(0, 10, (16,))
    loss_fn = nn.CrossEntropyLoss()

    def step() -> None:
        optimiser.zero_grad(set_to_none=True)
        loss_fn(model(images), labels).backward()
        optimiser.step()

    return step


def _block(step, steps: int) -> tuple[float, float, list[tuple[int, int]]]:
    """Median wall and main-thread CPU time of `steps` steps (s), and each step's span (ns)."""
    wall, cpu, spans = [], [], []
    for _ in range(steps):
        wall_start, cpu_start = time.perf_counter_ns(), time.thread_time_ns()
        step()
        wall_end = time.perf_counter_ns()
        wall.append(wall_end - wall_start)
        cpu.append(time.thread_time_ns() - cpu_start)
        spans.append((wall_start, wall_end))
    return statistics.median(wall) / 1e9, statistics.median(cpu) / 1e9, spans


def _quartiles(values: list[float]) -> dict[str, float]:
    q25, q50, q75 = statistics.quantiles(values, n=4)  # q50 is the median
    return {"median": q50, "q25": q25, "q75": q75}


def training_ratio(repeats: int, steps: int, rate_hz: float) -> dict[str, object]:
    """Blocks "without", "with" sampler and a second "without" (A/A control: how much two
    identical conditions differ on this machine), in an order rotated every repeat."""
    import torch

    torch.set_num_threads(1)  # one core for training, like a dataloader-bound rank
    step = _make_training()
    _block(step, 20)  # warm-up
    conditions = ("without", "with", "control")
    wall: Samples[str] = Samples(conditions)
    cpu: Samples[str] = Samples(conditions)
    # Steps split by whether a poll happened during them. A long step catches a poll more
    # often, so the split is biased; the control blocks get the same split against a
    # pseudo-poll grid (first "poll" one interval after the block starts, like the
    # sampler's), which measures that bias.
    split: dict[str, list[int]] = {"with_poll": [], "with_no_poll": [], "control_poll": [], "control_no_poll": []}
    interval_ns = int(1e9 / rate_hz)
    for repeat in range(repeats):
        for condition in round_order(conditions, repeat, order="rotate"):
            if condition == "with":
                with NvmlSampler(FakeNvmlBackend(FakeScript(mode="utilization")), interval_s=1.0 / rate_hz) as sampler:
                    w, c, spans = _block(step, steps)
                polls = sampler.timeline().t_ns
            else:
                w, c, spans = _block(step, steps)
                polls = spans[0][0] + interval_ns * np.arange(1, 1 + (spans[-1][1] - spans[0][0]) // interval_ns + 1)
            if condition != "without":
                prefix = "with" if condition == "with" else "control"
                for start, end in spans:
                    polled = bool(((polls >= start) & (polls <= end)).any())
                    split[f"{prefix}_poll" if polled else f"{prefix}_no_poll"].append(end - start)
            wall.add(condition, w)
            cpu.add(condition, c)

    def ratios(times: Samples[str], condition: str) -> dict[str, float]:
        return _quartiles(times.paired_ratios(condition, "without"))

    return {
        "rate_hz": rate_hz,
        "repeats": repeats,
        "steps_per_block": steps,
        "median_step_ms_without": 1e3 * wall.medians()["without"],
        "median_step_ms_with": 1e3 * wall.medians()["with"],
        "wall_ratio_with_sampler": ratios(wall, "with"),
        "wall_ratio_aa_control": ratios(wall, "control"),
        "cpu_ratio_with_sampler": ratios(cpu, "with"),
        "cpu_ratio_aa_control": ratios(cpu, "control"),
        "mean_of_block_median_step_ms": {c: 1e3 * statistics.fmean(wall[c]) for c in conditions},
        "median_step_ms_by_poll": {k: statistics.median(v) / 1e6 for k, v in split.items() if v},
        "steps_by_poll": {k: len(v) for k, v in split.items()},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0, help="sampling time per rate")
    parser.add_argument("--repeats", type=int, default=30, help="with/without block pairs")
    parser.add_argument("--steps", type=int, default=15, help="training steps per block")
    parser.add_argument("--only", choices=["cost", "training"], help="run one part only")
    args = parser.parse_args()

    if args.only != "training":
        modes: tuple[tuple[Mode, float], ...] = (("gpm", 10.0), ("utilization", 10.0), ("utilization", 100.0))
        for mode, rate in modes:
            print(json.dumps(sampler_cpu_pct(mode, rate, args.seconds)), flush=True)
    if args.only != "cost":
        print(json.dumps(training_ratio(args.repeats, args.steps, 10.0)), flush=True)


if __name__ == "__main__":
    main()
