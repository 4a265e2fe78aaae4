"""A sweep over two machines of a Prefect work pool against the same sweep one child at a time (CPU).

A local fleet (tests/local_fleet.py: a real Prefect server and MLflow server, a process work pool with the
`profile-training` deployment, two workers with their own YOLO_MLOPS_MACHINE) runs the same 8-child sweep
(baseline + batch_2, 4 repeats, tiny YOLO11n children on the synthetic dataset) two ways, interleaved:

- side by side: `yolo-mlops sweep --pool fleet-test ...` (one child per machine at a time, both at once)
- exclusive:    the same with `--isolation exclusive` (one child at a time over both machines)

Reported: the whole command's wall time (what a user waits for), median of the repeats, the ratio, and how
much each child's own median step time moved when children ran side by side.

`--pin` (default) gives each "machine" one of this host's two cores (taskset, one torch thread), as separate
hosts would not share cores; the sweep's own process and the servers float over both. `--no-pin` lets both
workers use both cores, as two GPUs of one host compete for its CPUs and data loading.

    .venv/bin/python benchmarks/bench_fleet_sweep.py --repeats 3
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from harness import Samples, Stopwatch, interleave  # noqa: E402
from local_fleet import local_fleet  # noqa: E402
from pool_sweeps import parent_run_id, start_pool_sweep, sweep_children, sweep_workload  # noqa: E402

TINY = sweep_workload(profiler={"wait": 0, "warmup": 1, "active": 1})  # shapes and memory recorded, as by default
MACHINES = ("bench-a", "bench-b")


def _sweep(fleet, config: Path, experiment: str, exclusive: bool) -> tuple[float, str]:
    options = ["--experiment", experiment]
    if exclusive:
        options += ["--isolation", "exclusive"]
    with Stopwatch() as watch:
        proc, log = start_pool_sweep(fleet, config, 4, *options)
        if proc.wait(3600) != 0:
            raise SystemExit(f"sweep failed:\n{log.read_text(errors='replace')[-4000:]}")
    return watch.seconds, parent_run_id(log)


def _child_step_ms(fleet, parent_id: str) -> list[float]:
    runs = sweep_children(fleet, parent_id)
    return [r.data.metrics["perf/step_time_ms_p50"] for r in runs if "perf/step_time_ms_p50" in r.data.metrics]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--pin",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="one core per machine (default), or both machines on every core",
    )
    args = parser.parse_args()
    walls: Samples[str] = Samples(["side-by-side", "exclusive"])
    steps: Samples[str] = Samples(walls)
    with tempfile.TemporaryDirectory(prefix="bench-fleet-") as tmp:
        cpus = {m: str(i) for i, m in enumerate(MACHINES)} if args.pin else None
        with local_fleet(Path(tmp), {m: {} for m in MACHINES}, cpus) as fleet:
            config = Path(tmp) / "tiny.yaml"
            config.write_text(yaml.safe_dump(TINY))
            _sweep(fleet, config, "bench-fleet-warmup", exclusive=False)  # datasets built, caches warm
            for repeat, mode in interleave(walls, args.repeats, order="alternate"):
                wall, parent = _sweep(fleet, config, f"bench-fleet-{mode}", exclusive=mode == "exclusive")
                walls.add(mode, wall)
                steps[mode] += _child_step_ms(fleet, parent)
                print(f"repeat {repeat + 1} {mode}: {wall:.1f} s", flush=True)
    side, excl = walls.medians().values()
    step_side, step_excl = steps.medians().values()
    print()
    print("| sweep of 8 children over 2 machines | whole command, median s | child step p50, median ms |")
    print("|---|---|---|")
    print(f"| side by side | {side:.1f} | {step_side:.1f} |")
    print(f"| exclusive (one at a time) | {excl:.1f} | {step_excl:.1f} |")
    print(
        f"| ratio | {excl / side:.2f}x faster side by side | {step_side / step_excl:.2f}x child step time "
        "side by side |"
    )
    print(
        f"\n{args.repeats} interleaved repeats each, {'one core per machine' if args.pin else 'shared cores'}; "
        f"walls side by side {[round(w, 1) for w in walls['side-by-side']]}, "
        f"exclusive {[round(w, 1) for w in walls['exclusive']]}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
