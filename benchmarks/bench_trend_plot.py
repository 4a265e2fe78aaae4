"""The nightly picture of one series (`trends.trend_report.plot_series`, drawn and saved as PNG for every judged
series each night) at the lengths a series reaches: 63, 188 and 375 nights (two months, half a year, a year),
a new commit every 7 nights, a 10% step-time regression at 70% of the history, 2% noise. Medians of interleaved
repeats, in one process (matplotlib imported once, as in the nightly judging).

    .venv/bin/python benchmarks/bench_trend_plot.py --runs 63 188 375 --repeats 5
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np

from yolo_mlops import names
from yolo_mlops.trends import trend_report
from yolo_mlops.trends.history import HistoryRun
from yolo_mlops.trends.trend import DetectionSettings, SeriesTrend, series_trend

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))  # tests/histories.py: the run records
from harness import Samples, Stopwatch, interleave  # noqa: E402
from histories import history_run  # noqa: E402

DAY_MS = 86_400_000


def history(nights: int) -> list[HistoryRun]:
    rng = np.random.default_rng(0)
    runs = []
    for night in range(nights):
        step = 50.0 * (1 + 0.02 * rng.standard_normal()) * (1.1 if night > 0.7 * nights else 1.0)
        runs.append(
            history_run(
                night,
                {
                    names.STEP_TIME_P50: step,
                    names.IMAGES_PER_S: 16_000.0 / step,
                    names.DATA_WAIT_PCT: 2.0 + 0.1 * rng.standard_normal(),
                },
                {"commit": f"{night // 7:040x}", "torch": "2.14.1"},
                f"night-{night}",
                series="bench",
                label="yolo11n batch 16",
                every_ms=DAY_MS,
            )
        )
    return runs


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, nargs="+", default=[63, 188, 375])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    trends: dict[int, SeriesTrend] = {n: series_trend(history(n), DetectionSettings()) for n in args.runs}
    times: Samples[int] = Samples(args.runs)
    with tempfile.TemporaryDirectory() as tmp:
        trend_report.plot_series(trends[args.runs[0]], Path(tmp) / "warm.png")  # fonts and caches loaded once
        for _, n in interleave(trends, args.repeats, order="same"):
            with Stopwatch() as watch:
                trend_report.plot_series(trends[n], Path(tmp) / f"{n}.png")
            times.add(n, watch.seconds)
    medians = times.medians()
    print("| runs | version changes | plot_series median s | repeats |\n|---|---|---|---|")
    for n, trend in trends.items():
        changes = max(len(m.candidates) for m in trend.metrics)
        print(f"| {n} | {changes} | {medians[n]:.3f} | {', '.join(f'{t:.3f}' for t in times[n])} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
