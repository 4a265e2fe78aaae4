"""Whole bisections simulated: how often a one-commit regression is named, deciding on step time or on the
operator that moved (`yolo_mlops.bisect.decide.simulate_bisection`).

8 commits after good, the slow one drawn uniformly; the regression is `--effect` run-to-run sds of log step
time. figure noise: the sd of the slowed operator's ms/step at its slow level over the sd of step time (an
operator made 10x slower carrying the whole shift; 200 other operators that never move). For such an
operator it is 1.67 x the run-to-run sd of the log of its own time (benchmarks/bench_bisect_noise.py measures
that on real runs). "none": the runs have no profiles, step time decides. Effect 0: the premise's false
regressions (it must call one in at most alpha of bisections).

    .venv/bin/python benchmarks/bench_bisect.py --trials 1000
"""

from __future__ import annotations

import argparse
import time

from yolo_mlops.bisect.decide import Settings, simulate_bisection

ROWS = [(1.5, None), (1.5, 0.05), (1.5, 0.1), (1.5, 0.2), (1.5, 0.3), (1.5, 0.5), (1.5, 1.0), (3.0, None), (0.0, 0.1)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=1000)
    parser.add_argument("--commits", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--max-repeats", type=int, default=6)
    parser.add_argument("--max-runs", type=int, default=30)
    args = parser.parse_args()
    settings = Settings(repeats=args.repeats, max_repeats=args.max_repeats)
    print(
        f"| effect (step-time sd) | figure noise | named right | right within {args.max_runs} runs | wrong | "
        "inconclusive | no regression | decided on the operator | runs mean | runs max |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    t0 = time.perf_counter()
    for effect, noise in ROWS:
        r = simulate_bisection(effect, args.commits, noise, settings, args.trials, seed=7, max_runs=args.max_runs)
        print(
            f"| {effect:g} | {'none' if noise is None else f'{noise:g}'} | {100 * r['right']:.1f}% | "
            f"{100 * r['right_within']:.1f}% | {100 * r['wrong']:.1f}% | {100 * r['inconclusive']:.1f}% | "
            f"{100 * r['no_regression']:.1f}% | {100 * r['figure']:.1f}% | {r['runs_mean']:.1f} | "
            f"{r['runs_max']:.0f} |",
            flush=True,
        )
    print(
        f"({args.trials} bisections a row, {args.commits} commits, {args.repeats}..{args.max_repeats} runs a side, "
        f"alpha {settings.alpha}; {time.perf_counter() - t0:.0f} s)"
    )


if __name__ == "__main__":
    main()
