"""Benchmark: operator series judged night by night: false alerts with many operators, and power for a planted one.

Histories from tests/histories.py (`operator_history`): each series' operators fall off as a real CPU profile's
(each 0.85 of the one before, or 0.93 for a flatter profile with more operators above 1% of the step), each with
its own run-to-run noise (6%), a per-run load factor on everything (2%) and, where said, a night factor shared by a
night's runs and its confirmation runs; a new commit every night and torch every 5th. `operator_nights` judges
every night as the nightly flow does (`trend.verdict` over the history up to the night, the operators held to
Holm over the night's operator tests at 1%) and re-measures a night that opens an operator regression with 3
confirmation runs (`confirm.judge`, 0.1%).

1. No change: per 1,000 series-nights, nights that open an operator event with each test at its own level (no
   multiplicity control), nights that open one with the family (Holm), and alerts after confirmation. Goal: at
   most 10 opened (the family's 1%) and at most 1 alert (the published rate) per 1,000 series-nights.
2. A planted slowdown of one operator from one night on (its rank in the profile, its share of the step and
   the factor): % of series whose night alerts on that operator, and % where step time opens a regression.
3. Preempted runs (`--preempted-series`): a share of runs (confirmation runs included) lost 2 ms a profiled step
   inside one operator (drawn by its share of the step), with the outlier screen (`outlier_sds` 5, the default)
   and without it (0): nights opening an operator event / 1,000 with no change, and % of nights that open a
   planted x1.5 of the 13th operator (2.1% of the step).

    .venv/bin/python benchmarks/bench_operator_series.py [--series 100] [--nights 20] [--power-series 200]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from histories import operator_levels, operator_nights  # noqa: E402

from yolo_mlops.render import markdown_table  # noqa: E402
from yolo_mlops.trends.trend import DetectionSettings  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--series", type=int, default=100, help="series a no-change row (each judged --nights)")
    parser.add_argument("--nights", type=int, default=20)
    parser.add_argument("--power-series", type=int, default=200, help="series a planted row (one night judged)")
    parser.add_argument("--preempted-series", type=int, default=50, help="series a preempted row (0: no table 3)")
    args = parser.parse_args()
    started = time.perf_counter()
    rows: list[tuple[object, ...]] = []
    for ops, decay, night_noise in ((40, 0.85, 0.0), (40, 0.85, 0.02), (80, 0.93, 0.0), (80, 0.93, 0.02)):
        c = operator_nights(args.series, args.nights, ops=ops, decay=decay, night_noise=night_noise, seed=100)
        n = c["series_nights"]
        rows.append(
            (
                f"{ops} ({'steep' if decay < 0.9 else 'flat'} profile)",
                f"{100 * night_noise:g}%",
                int(n),
                f"{c['op_series'] / n:.1f}",
                f"{c['op_tests'] / n:.1f}",
                f"{1000 * c['raw_opened'] / n:.2f}",
                f"{1000 * c['opened'] / n:.2f}",
                f"{1000 * c['alerts'] / n:.2f}",
            )
        )
    print(
        markdown_table(
            [
                "operators",
                "night effect sd",
                "series-nights",
                "operator series judged",
                "operator tests a night",
                "nights opening an operator event / 1,000, each test at its level",
                "... with Holm over the operators",
                "alerts / 1,000 (3 confirmation runs)",
            ],
            rows,
        )
    )
    levels = list(operator_levels(40).values())
    step = 100.0
    rows = []
    for rank, factor in ((12, 1.5), (12, 2.0), (12, 3.0), (5, 1.2), (5, 1.5), (20, 3.0)):
        c = operator_nights(args.power_series, 1, ops=40, slowed=(rank, factor), seed=200 + rank)
        n = c["series_nights"]
        share = 100 * levels[rank] / step
        rows.append(
            (
                rank + 1,
                f"{share:.1f}%",
                f"x{factor:g}",
                f"+{share * (factor - 1):.1f}%",
                int(n),
                f"{100 * c['found'] / n:.1f}",
                f"{100 * c['alerts'] / n:.1f}",
                f"{100 * c['step_found'] / n:.1f}",
            )
        )
    print()
    print(
        markdown_table(
            [
                "operator (rank)",
                "share of step",
                "slowed",
                "step time moved",
                "series",
                "% its night opens it",
                "% alerted (3 confirmation runs)",
                "% step time opens a regression",
            ],
            rows,
        )
    )
    if args.preempted_series:
        print()
        print(preempted_table(args.preempted_series, args.nights, args.power_series))
    print(f"\n{time.perf_counter() - started:.0f} s")
    return 0


def preempted_table(series: int, nights: int, power_series: int) -> str:
    """Table 3: no-change and planted nights with preempted runs, the outlier screen on and off."""
    rows = []
    for preempted in (0.0, 0.05, 0.15):
        for sds in (5.0, 0.0):
            settings = DetectionSettings(outlier_sds=sds)
            c = operator_nights(series, nights, night_noise=0.01, preempted=preempted, settings=settings, seed=300)
            p = operator_nights(power_series, 1, slowed=(12, 1.5), preempted=preempted, settings=settings, seed=400)
            n = c["series_nights"]
            rows.append(
                (
                    f"{100 * preempted:g}%",
                    "on" if sds else "off",
                    int(n),
                    f"{1000 * c['opened'] / n:.2f}",
                    f"{1000 * c['alerts'] / n:.2f}",
                    f"{100 * p['found'] / p['series_nights']:.1f}",
                )
            )
    return markdown_table(
        [
            "runs preempted",
            "outlier screen",
            "series-nights",
            "nights opening an operator event / 1,000 (no change)",
            "alerts / 1,000",
            "% of nights opening a planted x1.5 (13th operator)",
        ],
        rows,
    )


if __name__ == "__main__":
    sys.exit(main())
