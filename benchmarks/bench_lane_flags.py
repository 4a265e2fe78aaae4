"""Benchmark: how often a sweep flags a lane that has no effect of its own, and how often it finds one that has.

Simulated sweeps of the model in tests/sweeps/test_blocks.py (lane 0 uniformly 1.3x slower, a 3% drift shared
by a block's children, 3% run-to-run noise per child, 20 steps with 5% noise), through the real
`blocks.compare_paired`:

1. no lane effect (every lane's true speed-up 1.0): the share of sweeps with at least one lane flagged, for
   layouts of 1-8 lanes x 1-3 blocks a lane (goal: <= 5% for each);
2. one lane with its own effect (lane 1 at 0.85 while the others are at 1.0): the share of sweeps that flag
   lane 1 and only lane 1.

    .venv/bin/python benchmarks/bench_lane_flags.py [--sims 1000]
    .venv/bin/python benchmarks/bench_lane_flags.py --sims 400 --before 9a2ce2e~1  # the rule of that commit
"""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from yolo_mlops.render import fmt, markdown_table
from yolo_mlops.sweeps import blocks

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "sweeps"))
from test_blocks import simulate  # noqa: E402


def blocks_at(revision: str):
    """`yolo_mlops/sweeps/blocks.py` as it was at a git revision, imported as a module of its own."""
    root = Path(__file__).resolve().parent.parent
    text = subprocess.run(
        ["git", "show", f"{revision}:yolo_mlops/sweeps/blocks.py"], cwd=root, check=True, capture_output=True, text=True
    ).stdout
    path = Path(tempfile.mkdtemp(prefix="blocks-")) / "blocks_before.py"
    path.write_text(text)
    spec = importlib.util.spec_from_file_location("blocks_before", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["blocks_before"] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def flag_rate(
    lanes: int, per_lane: int, sims: int, lane_true: dict[str, float] | None = None, seed: int = 0, rule=blocks
) -> tuple[float, float]:
    """(share of sweeps with any lane flagged, share flagging lane "1" and no other: with two lanes, both)."""
    rng = np.random.default_rng([seed, lanes, per_lane])
    any_flag = only_one = 0
    for i in range(sims):
        cmp = rule.compare_paired(*simulate(rng, (per_lane,) * lanes, 1.0, lane_true=lane_true), resamples=50, seed=i)
        flagged = [lane.lane for lane in cmp.lanes if lane.disagrees]
        any_flag += bool(flagged)
        only_one += flagged == (["0", "1"] if lanes == 2 else ["1"])
    return any_flag / sims, only_one / sims


def _any_flag(rule, layout: tuple[int, ...], sims: int) -> float:
    rng = np.random.default_rng([5, len(layout)])
    return (
        sum(
            any(
                lane.disagrees for lane in rule.compare_paired(*simulate(rng, layout, 1.0), resamples=200, seed=i).lanes
            )
            for i in range(sims)
        )
        / sims
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sims", type=int, default=1000, help="simulated sweeps per layout")
    parser.add_argument("--before", help="a git revision: the no-effect table for the rule of its blocks.py")
    args = parser.parse_args()
    t0 = time.perf_counter()
    if args.before:
        rule = blocks_at(args.before)
        rows = [
            [
                f"{lanes} x {per_lane}" if len(set(layout)) == 1 else "x".join(map(str, layout)),
                fmt(100 * _any_flag(rule, layout, args.sims), ".1f"),
            ]
            for layout in ((1, 1), (1, 1, 1), (1, 1, 1, 1), (2, 2, 1), (3, 3), (1,))
            for lanes, per_lane in [(len(layout), layout[0])]
        ]
        print(
            markdown_table(["layout (lanes x blocks)", f"% of sweeps with a lane flagged, rule of {args.before}"], rows)
        )
        return 0
    rows = []
    for per_lane in (1, 2, 3):
        rows.append(
            [
                f"{per_lane} block{'s' * (per_lane > 1)} a lane",
                *(fmt(100 * flag_rate(lanes, per_lane, args.sims)[0], ".1f") for lanes in range(1, 9)),
            ]
        )
    print(f"### Sweeps with any lane flagged, no lane effect ({args.sims} sweeps a cell)\n")
    print(markdown_table(["layout", *(f"{n} lane{'s' * (n > 1)}" for n in range(1, 9))], rows) + "\n")
    rows = []
    for lanes, per_lane in ((2, 3), (3, 2), (3, 3), (4, 3), (8, 2), (8, 3)):
        found = flag_rate(lanes, per_lane, args.sims, lane_true={"1": 0.85}, seed=1)[1]
        rows.append([f"{lanes} x {per_lane}", fmt(100 * found, ".1f")])
    print(f"### Lane 1 at 0.85 while the others are at 1.0 ({args.sims} sweeps a row)\n")
    print(markdown_table(["lanes x blocks", "% flagging lane 1 and only lane 1 (two lanes: both)"], rows))
    print(f"\n({time.perf_counter() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
