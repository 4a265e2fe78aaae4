"""Benchmark: yolo_mlops.trends.changepoint against Apache Otava 0.8.0 (the reference implementation).

Both run on the same generated series (fixed seeds: stationary, one planted shift of several magnitudes,
noise levels and positions, two shifts, a lone outlier, a slow drift, heavy-tailed noise, 1,000-run
histories). Otava runs `otava.analysis.compute_change_points` (the function behind `otava analyze`) at its
defaults (window 50, max_pvalue 0.001, min_magnitude 0) in its own virtualenv, since it pins numpy 2.2 and
scipy < 1.17 and cannot sit beside the project's stack; ours runs in this interpreter, twice: at its
defaults and with `otava_compatible=True` (Otava's arithmetic, to check the implementation point for point).

Reported per group of series: agreement of the change-point indices with Otava (identical sets; same
count and every index within +-1), the change points each reports, accuracy against the planted truth
(exactly the planted change points, +-1) and the false-alarm share on stationary series; then timing:
in-process detection time (imports excluded) for the same series, medians of interleaved repeats.

The Otava virtualenv is .bench-venv-otava (created here if missing; needs PyPI once), or --otava-python.

    .venv/bin/python benchmarks/otava_compare.py [--seeds 50] [--repeats 3] [--otava-python PATH]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_changepoint import Planted, exact_within, history  # noqa: E402
from harness import Samples, Stopwatch, interleave  # noqa: E402

from yolo_mlops.render import fmt, markdown_table  # noqa: E402
from yolo_mlops.trends.changepoint import detect  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
OTAVA_VENV = REPO / ".bench-venv-otava"
OTAVA_VERSION = "0.8.0"

# Reads a JSON list of series, prints one JSON line: the change-point indices of each and the seconds the
# detection took in-process. Series are passed as Python lists, as Otava's own Series.analyze does
# (its window code slices only list input).
OTAVA_CHILD = r"""
import json, sys, time
from otava.analysis import compute_change_points
series = json.load(open(sys.argv[1]))
t0 = time.perf_counter()
found = [[int(cp.index) for cp in compute_change_points(s, window_len=50, max_pvalue=0.001)[0]] for s in series]
print(json.dumps({"seconds": time.perf_counter() - t0, "found": found}))
"""


def ensure_otava_python(given: str | None) -> str:
    if given:
        return given
    python = OTAVA_VENV / "bin" / "python"
    if not python.exists():
        print(f"creating {OTAVA_VENV} with apache-otava=={OTAVA_VERSION} ...", file=sys.stderr)
        subprocess.run([sys.executable, "-m", "venv", str(OTAVA_VENV)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", f"apache-otava=={OTAVA_VERSION}"], check=True)
    return str(python)


def run_otava(python: str, series: list[np.ndarray]) -> tuple[float, list[list[int]]]:
    with tempfile.NamedTemporaryFile("w", suffix=".json") as f:
        json.dump([s.tolist() for s in series], f)
        f.flush()
        out = subprocess.run([python, "-c", OTAVA_CHILD, f.name], capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"otava child failed:\n{out.stderr[-2000:]}")
    result = json.loads(out.stdout.strip().splitlines()[-1])
    return result["seconds"], result["found"]


def run_ours(series: list[np.ndarray], **kw) -> tuple[float, list[list[int]]]:
    with Stopwatch() as watch:
        found = [[cp.index for cp in detect(s, **kw)] for s in series]
    return watch.seconds, found


def groups(seeds: int) -> list[tuple[str, list[Planted], list[int]]]:
    """(name, series specs, seeds) — one series per (spec, seed)."""
    n = 200
    one_shift = [
        Planted(n, noise, shifts=((at, mag),))
        for noise in (1.0, 2.0)
        for mag in (2.0, 5.0, 10.0, 30.0)
        for at in (15, 100, 190)
    ]
    s = list(range(seeds))
    return [
        ("stationary, Gaussian noise 1%", [Planted(n, 1.0)], list(range(10 * seeds))),
        ("stationary, Student t(3) noise 1%", [Planted(n, 1.0, heavy_tails=True)], list(range(4 * seeds))),
        ("one shift (2-30%, noise 1-2%, early/mid/late)", one_shift, s),
        ("one shift >= 2.5 sd (subset of the above)", [p for p in one_shift if p.shifts[0][1] / p.noise_pct >= 2.5], s),
        ("two shifts (+10% at 70, -5% at 140, noise 1%)", [Planted(n, 1.0, shifts=((70, 10.0), (140, -5.0)))], s),
        ("lone outlier +30% (noise 1%)", [Planted(n, 1.0, spike=(100, 30.0))], s),
        ("linear drift +5% over 200 runs (noise 1%)", [Planted(n, 1.0, drift_pct=5.0)], s),
    ]


def agreement(a: list[list[int]], b: list[list[int]]) -> tuple[float, float]:
    same = sum(x == y for x, y in zip(a, b, strict=True)) / len(a)
    near = sum(exact_within(x, y) for x, y in zip(a, b, strict=True)) / len(a)
    return 100 * same, 100 * near


def print_timing(otava: str, repeats: int) -> None:
    """Detection time of Otava and of ours (both modes) on three sets of series, medians of interleaved repeats."""
    timing_sets = {
        "8 metrics x 1,000 runs (realistic)": history("realistic"),
        "8 metrics x 1,000 runs (stationary)": history("stationary"),
        "100 series x 200 runs (one 5% shift)": [Planted(200, 1.0, shifts=((100, 5.0),)).values(s) for s in range(100)],
    }
    trows = []
    for name, series in timing_sets.items():
        t: Samples[str] = Samples(["otava", "compat", "ours"])
        found = {}
        for _, arm in interleave(t, repeats, order="same"):
            if arm == "otava":
                sec, found[arm] = run_otava(otava, series)
            else:
                sec, found[arm] = run_ours(series, otava_compatible=arm == "compat")
            t.add(arm, sec)
        med = t.medians()
        trows.append(
            [
                name,
                fmt(med["otava"], ".3f"),
                fmt(med["compat"], ".3f"),
                fmt(med["ours"], ".3f"),
                fmt(med["otava"] / med["ours"], ".1f"),
                "/".join(fmt(x, ".0f") for x in agreement(found["compat"], found["otava"])),
            ]
        )
    print(f"### Timing (in-process, median of {repeats} interleaved repeats)\n")
    print(
        markdown_table(
            [
                "series",
                "Otava s",
                "ours, otava_compatible s",
                "ours, default s",
                "Otava / ours",
                "compatible vs Otava identical/+-1 (%)",
            ],
            trows,
        )
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=3, help="timing repeats (interleaved)")
    parser.add_argument("--otava-python", help="a Python with apache-otava installed")
    args = parser.parse_args()
    otava = ensure_otava_python(args.otava_python)

    rows = []
    for name, specs, seeds in groups(args.seeds):
        cases = [(p, seed) for p in specs for seed in seeds]
        series = [p.values(seed) for p, seed in cases]
        truth = [p.truth for p, _ in cases]
        _, f_otava = run_otava(otava, series)
        _, f_compat = run_ours(series, otava_compatible=True)
        _, f_ours = run_ours(series)
        rows.append(
            [
                name,
                len(series),
                "/".join(fmt(x, ".1f") for x in agreement(f_compat, f_otava)),
                "/".join(fmt(x, ".1f") for x in agreement(f_ours, f_otava)),
                " / ".join(str(sum(map(len, f))) for f in (f_otava, f_compat, f_ours)),
                " / ".join(
                    fmt(100 * sum(map(exact_within, found, truth)) / len(series), ".1f") for found in (f_otava, f_ours)
                ),
            ]
        )
        print(f"  {name}: done", file=sys.stderr, flush=True)
    print("### Agreement with Otava 0.8.0 and accuracy\n")
    print(
        markdown_table(
            [
                "series (200 runs each)",
                "series",
                "otava_compatible vs Otava: identical / +-1 (%)",
                "default vs Otava: identical / +-1 (%)",
                "change points: Otava / compatible / default",
                "exactly the planted points +-1 (%): Otava / default",
            ],
            rows,
        )
        + "\n"
    )

    print_timing(otava, args.repeats)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
