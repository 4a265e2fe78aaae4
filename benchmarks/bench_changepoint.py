"""Benchmark: change-point detection (yolo_mlops.trends.changepoint) — speed, false alarms, accuracy.

1. Speed: `detect` + `segments` over a 1,000-run history of 8 metrics (goal: <= 1 s for the whole call),
   medians of interleaved repeats, for three kinds of history: stationary, realistic (a few shifts per
   metric, 1-3% noise) and busy (a shift every 50 runs).
2. False alarms: the share of stationary series (Gaussian and heavy-tailed noise, several lengths) in which
   the default settings report any change point.
3. Accuracy: a single planted shift (several magnitudes, noise levels, early/middle/late), two shifts, a
   lone outlier and slow drifts: how often exactly the planted change is found (index within +-1).
4. Delay: how many runs after a shift the detector needs before it reports it (the nightly case).

Series are generated with numpy's default_rng from fixed seeds, so every figure is reproducible.

    .venv/bin/python benchmarks/bench_changepoint.py [--repeats 7] [--seeds 100] [--fa-seeds 500]
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
from dataclasses import dataclass

import numpy as np
from harness import Samples, Stopwatch, interleave

from yolo_mlops.render import fmt, markdown_table
from yolo_mlops.trends.changepoint import detect, segments

LEVEL = 100.0


@dataclass(frozen=True)
class Planted:
    """A generated series: level 100, Gaussian noise of noise_pct % of the level, relative shifts."""

    n: int
    noise_pct: float
    shifts: tuple[tuple[int, float], ...] = ()  # (first index of the new level, change in % of LEVEL)
    spike: tuple[int, float] | None = None  # (index, height in % of LEVEL)
    drift_pct: float = 0.0  # linear drift over the whole series, % of LEVEL
    heavy_tails: bool = False  # Student t noise with 3 degrees of freedom (scaled to the same std)

    def values(self, seed: int) -> np.ndarray:
        rng = np.random.default_rng(seed)
        sd = LEVEL * self.noise_pct / 100
        if self.heavy_tails:
            noise = rng.standard_t(3, self.n) * sd / np.sqrt(3.0)  # var of t(3) is 3
        else:
            noise = rng.normal(0.0, sd, self.n)
        z = LEVEL + noise + np.linspace(0.0, LEVEL * self.drift_pct / 100, self.n)
        for index, pct in self.shifts:
            z[index:] += LEVEL * pct / 100
        if self.spike:
            z[self.spike[0]] += LEVEL * self.spike[1] / 100
        return z

    @property
    def truth(self) -> list[int]:
        return [i for i, _ in self.shifts]


def exact_within(found: list[int], truth: list[int], tol: int = 1) -> bool:
    """Exactly the planted change points, each within +-tol (same count, matched in order)."""
    return len(found) == len(truth) and all(abs(f - t) <= tol for f, t in zip(found, truth, strict=True))


def history(kind: str, n: int = 1000, metrics: int = 8, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    out = []
    for k in range(metrics):
        if kind == "stationary":
            p = Planted(n, noise_pct=1.0 + k % 3)
        elif kind == "realistic":
            at = sorted(rng.choice(np.arange(60, n - 60), size=3, replace=False))
            shifts = tuple((int(i), float(rng.choice([-8, -4, 5, 12]))) for i in at)
            p = Planted(n, noise_pct=1.0 + k % 3, shifts=shifts)
        else:  # busy: a shift every 50 runs
            p = Planted(n, noise_pct=1.0, shifts=tuple((i, 6.0 * (-1) ** (i // 50)) for i in range(50, n, 50)))
        out.append(p.values(seed * 100 + k))
    return out


def detect_history(series: list[np.ndarray]) -> int:
    found = 0
    for values in series:
        cps = detect(values)
        segments(values, cps)
        found += len(cps)
    return found


def bench_speed(repeats: int) -> str:
    kinds = ["stationary", "realistic", "busy"]
    data = {k: history(k) for k in kinds}
    times: Samples[str] = Samples(kinds)
    found = {}
    detect_history(data["realistic"])  # warm-up (imports, first allocations)
    for _, k in interleave(kinds, repeats, order="same"):  # interleaved, so machine noise hits every kind alike
        with Stopwatch() as watch:
            found[k] = detect_history(data[k])
        times.add(k, watch.seconds)
    medians = times.medians()
    rows = [[k, found[k], fmt(medians[k], ".3f"), fmt(min(times[k]), ".3f"), fmt(max(times[k]), ".3f")] for k in kinds]
    return markdown_table(
        ["history (8 metrics x 1,000 runs)", "change points found", "median s", "min s", "max s"], rows
    )


def false_alarm_rate(p: Planted, seeds: int, **kw) -> float:
    return sum(bool(detect(p.values(10_000 + s), **kw)) for s in range(seeds)) / seeds


def bench_false_alarms(seeds: int) -> str:
    rows = []
    for n in (50, 200, 1000):
        s = seeds if n <= 200 else max(seeds // 5, 20)
        for heavy in (False, True):
            p = Planted(n, noise_pct=1.0, heavy_tails=heavy)
            rows.append(
                [
                    n,
                    "Student t(3)" if heavy else "Gaussian",
                    s,
                    fmt(100 * false_alarm_rate(p, s), ".1f"),
                    fmt(100 * false_alarm_rate(p, s, min_segment=5), ".1f"),
                    fmt(100 * false_alarm_rate(p, s, otava_compatible=True), ".1f"),
                ]
            )
    return markdown_table(
        [
            "points",
            "noise",
            "series",
            "false alarms % (default)",
            "... with min_segment=5",
            "... with otava_compatible",
        ],
        rows,
    )


def accuracy(p: Planted, seeds: int, **kw) -> tuple[float, float]:
    """(% of seeds with exactly the planted change points at +-1, mean change points reported)."""
    hits, count = 0, 0
    for s in range(seeds):
        found = [cp.index for cp in detect(p.values(s), **kw)]
        hits += exact_within(found, p.truth)
        count += len(found)
    return 100 * hits / seeds, count / seeds


def bench_accuracy(seeds: int) -> str:
    n = 200
    rows = []
    for noise in (1.0, 2.0):
        for mag in (2.0, 5.0, 10.0, 30.0):
            cells = []
            for at in (15, 100, 190):
                hit, _ = accuracy(Planted(n, noise, shifts=((at, mag),)), seeds)
                cells.append(fmt(hit, ".0f"))
            rows.append([f"+{mag:g}% shift, noise {noise:g}% ({mag / noise:g} sd)", *cells])
    return markdown_table(["200 runs, one shift", "at run 15 (early)", "at run 100", "at run 190 (late)"], rows)


def bench_other_shapes(seeds: int) -> str:
    n = 200
    cases = [
        ("two shifts: +10% at 70, -5% at 140, noise 1%", Planted(n, 1.0, shifts=((70, 10.0), (140, -5.0)))),
        ("two shifts: +5% at 100, +5% at 110, noise 1%", Planted(n, 1.0, shifts=((100, 5.0), (110, 5.0)))),
        ("lone outlier +30% at 100, noise 1%", Planted(n, 1.0, spike=(100, 30.0))),
        ("lone outlier +300% at 100, noise 1%", Planted(n, 1.0, spike=(100, 300.0))),
        (
            "+10% shift at 100 and outlier +30% at 50, noise 1%",
            Planted(n, 1.0, shifts=((100, 10.0),), spike=(50, 30.0)),
        ),
    ]
    rows = []
    for name, p in cases:
        hit, mean_count = accuracy(p, seeds)
        rows.append([name, fmt(hit, ".0f"), fmt(mean_count, ".2f")])
    for drift in (2.0, 5.0, 10.0, 30.0):
        p = Planted(n, 1.0, drift_pct=drift)
        counts, monotone = [], 0
        for s in range(seeds):
            cps = detect(p.values(s))
            counts.append(len(cps))
            monotone += all(cp.mean_after > cp.mean_before for cp in cps)
        rows.append(
            [
                f"linear drift +{drift:g}% over 200 runs, noise 1% ({drift:g} sd)",
                f"{100 * sum(c > 0 for c in counts) / seeds:.0f} (any; all upward in {100 * monotone / seeds:.0f})",
                fmt(statistics.mean(counts), ".2f"),
            ]
        )
    return markdown_table(["series (200 runs)", "% exactly right (+-1)", "mean change points"], rows)


def bench_delay(seeds: int) -> str:
    """Runs after a shift until it is reported: 100 runs of history, then k runs at the new level."""
    rows = []
    for sd in (3.0, 5.0, 10.0, 30.0):
        rates = {}
        for k in range(1, 21):
            p = Planted(100 + k, 1.0, shifts=((100, sd),))
            rates[k] = sum(any(abs(c.index - 100) <= 1 for c in detect(p.values(s))) for s in range(seeds)) / seeds
        first = [next((k for k in rates if rates[k] >= q), None) for q in (0.5, 0.95)]
        rows.append(
            [
                f"+{sd:g}% (noise 1%: {sd:g} sd)",
                *(f"{k}" if k else "> 20" for k in first),
                fmt(100 * rates[2], ".0f"),
                fmt(100 * rates[5], ".0f"),
            ]
        )
    return markdown_table(
        [
            "shift",
            "runs after it until found in 50% of seeds",
            "... in 95%",
            "% found after 2 runs",
            "% found after 5 runs",
        ],
        rows,
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--seeds", type=int, default=100, help="seeds per accuracy cell")
    parser.add_argument("--fa-seeds", type=int, default=500, help="stationary series per false-alarm row")
    args = parser.parse_args()
    print(
        f"# machine: {platform.machine()}, Python {platform.python_version()}, numpy {np.__version__}", file=sys.stderr
    )
    print("### Speed\n")
    print(bench_speed(args.repeats) + "\n", flush=True)
    print("### False alarms (stationary series, default settings)\n")
    print(bench_false_alarms(args.fa_seeds) + "\n", flush=True)
    print(f"### Detection accuracy: % of {args.seeds} seeds with exactly the planted change point (+-1)\n")
    print(bench_accuracy(args.seeds) + "\n", flush=True)
    print("### Other shapes\n")
    print(bench_other_shapes(args.seeds) + "\n", flush=True)
    print("### Runs after a shift until it is reported (100 runs before it)\n")
    print(bench_delay(args.seeds), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
