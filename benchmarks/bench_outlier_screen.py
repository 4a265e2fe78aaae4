"""Benchmark: what the operator series' outlier screen (`op_series.set_aside`) adds to a series' trend.

One series of a nightly history (`--nights` nights of 3 runs, 40 operators as a real CPU profile falls off, the 20
or more judged: tests/histories.py), `series_trend` with the screen (`outlier_sds` 5) and without (0), interleaved
repeats, medians and their ratio, and `set_aside` alone.

    .venv/bin/python benchmarks/bench_outlier_screen.py [--nights 125] [--repeats 7]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from yolo_mlops.trends import op_series
from yolo_mlops.trends.trend import DetectionSettings, series_trend

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))  # tests/histories.py: the histories
from harness import Samples, Stopwatch, interleave  # noqa: E402
from histories import operator_history, operator_levels  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nights", type=int, default=125, help="nights of 3 runs (125: a series' 375 runs)")
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    runs = operator_history(args.nights, levels=operator_levels(40), load_noise=0.02, seed=1, torch_every=5)
    chosen = op_series.select(runs)
    filled = op_series.with_values(runs, chosen)
    series_trend(runs)  # untimed: imports and first-call costs
    samples = Samples(("screen on", "screen off", "set_aside alone"))
    for _, arm in interleave(samples, args.repeats):
        with Stopwatch() as watch:
            if arm == "set_aside alone":
                op_series.set_aside(filled, chosen, DetectionSettings().outlier_sds)
            else:
                series_trend(runs, DetectionSettings(outlier_sds=5.0 if arm == "screen on" else 0.0))
        samples.add(arm, watch.seconds)
    med = samples.medians()
    print(
        f"{len(runs)} runs, {len(chosen)} operator series: series_trend {med['screen on']:.3f} s with the screen, "
        f"{med['screen off']:.3f} s without (x{med['screen on'] / med['screen off']:.3f}); "
        f"set_aside alone {1000 * med['set_aside alone']:.1f} ms"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
