"""Benchmark: the fleet test's error rates by simulation, the table of docs/trends.md ("Fleet view").

Each run's step time is log-normal around 100 ms with 8% run-to-run noise (sd of the log). Without a slow
machine the share of fleets flagged (any machine) is the false-alarm rate per workload; with machine 0 slowed
10%, 20% or 30% the share where it, and only it, is flagged is the power. Seeded: the same figures every time.

    .venv/bin/python benchmarks/bench_fleet.py [--false-seeds 4000] [--power-seeds 1000]
"""

from __future__ import annotations

import argparse
import math

import numpy as np

from yolo_mlops.render import markdown_table
from yolo_mlops.trends.fleet_stats import FleetSettings, slow_machines


def simulate(
    machines: int,
    runs: int,
    slower: float = 1.0,
    noise: float = 0.08,
    seeds: int = 1000,
    settings: FleetSettings | None = None,
    seed: int = 0,
) -> float:
    """The share of simulated workloads the test flags. Each run's step time is log-normal around 100 ms with
    `noise` (sd of the log); with `slower` == 1 no machine differs and the share is the false-alarm rate (any
    machine flagged), else machine 0 is `slower` times slower and the share is the power (it, and only it)."""
    settings = settings or FleetSettings()
    rng = np.random.default_rng(seed)
    hits = 0
    for _ in range(seeds):
        logs = {
            f"m{i}": math.log(100.0 * (slower if i == 0 else 1.0)) + rng.normal(0.0, noise, runs)
            for i in range(machines)
        }
        found = [machine for machine, *_ in slow_machines(logs, settings.max_pvalue, settings.min_effect)]
        hits += bool(found) if slower == 1.0 else found == ["m0"]
    return hits / seeds


def simulation_table(false_seeds: int = 4000, power_seeds: int = 1000) -> str:
    rows = []
    for machines, runs in ((3, 3), (5, 4), (5, 6), (8, 3)):
        for max_pvalue in (0.01, 0.05):
            settings = FleetSettings(max_pvalue=max_pvalue)
            false = simulate(machines, runs, seeds=false_seeds, settings=settings, seed=1)
            found = [
                simulate(machines, runs, slower, seeds=power_seeds, settings=settings, seed=2)
                for slower in (1.1, 1.2, 1.3)
            ]
            rows.append(
                (f"{machines} x {runs}", max_pvalue, f"{100 * false:.1f}%", *(f"{100 * x:.0f}%" for x in found))
            )
    return markdown_table(
        [
            "machines x runs",
            "max p",
            "flagged, no slow machine",
            "10% slower found",
            "20% slower found",
            "30% slower found",
        ],
        rows,
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--false-seeds", type=int, default=4000, help="fleets without a slow machine per row")
    parser.add_argument("--power-seeds", type=int, default=1000, help="fleets with machine 0 slowed per cell")
    args = parser.parse_args()
    print(simulation_table(args.false_seeds, args.power_seeds))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
