"""The trace loader and the analysis layer's process pool of two source trees, side by side: the whole
`yolo-mlops analyze PATH --format json` command of each tree (its folder first on PYTHONPATH, the same virtualenv),
interleaved in every repeat (order alternating), medians; peak RSS of the command and of its largest child (a
parallel reader or a rank worker, from RUSAGE_CHILDREN once the fork server is stopped); the outputs compared.

Cases: 1M generated events as one gzip stream and as indexed members, 4M as indexed members (the parallel
reader), and 2 and 8 rank traces of 500k events (the per-rank pool: as many workers as traces, and more traces
than cores). The traces are written once to --data.

    git worktree add /tmp/loader-before HEAD   # before a change
    .venv/bin/python benchmarks/bench_loader_trees.py --before /tmp/loader-before --after . --repeats 5
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import BinaryIO, cast

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_rank_traces import _RUN  # noqa: E402
from bench_trace_analysis import write_big_trace  # noqa: E402

from yolo_mlops.profiling.trace_gzip import write_members  # noqa: E402

RUN = _RUN.replace("{prelude}", "")


def timed(tree: Path, target: Path) -> tuple[float, float, float, str]:
    """Seconds, the command's and its largest child's peak RSS MiB, and a digest of what it printed."""
    env = dict(os.environ, PYTHONPATH=str(tree), PYTHONWARNINGS="ignore")
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", RUN, "analyze", str(target), "--format", "json"],
        capture_output=True,
        text=True,
        env=env,
        cwd="/",  # not a source tree: PYTHONPATH alone says which one runs
        check=False,
    )
    seconds = time.perf_counter() - started
    line = next((x for x in done.stderr.splitlines() if x.startswith("RSS ")), None)
    if done.returncode != 0 or line is None:
        raise SystemExit(f"{tree}: analyze {target} failed: {done.stderr[-2000:]}")
    _, own, child = line.split()
    return seconds, int(own) / 1024, int(child) / 1024, hashlib.sha1(done.stdout.encode()).hexdigest()[:8]


def cases(folder: Path) -> dict[str, Path]:
    folder.mkdir(parents=True, exist_ok=True)
    found = {}
    for events in (1_000_000, 4_000_000):
        single, members = folder / f"stream_{events}.json.gz", folder / f"members_{events}.json.gz"
        if not members.exists():
            write_big_trace(single, events)
            with gzip.open(single, "rb") as text, open(members, "wb") as out:
                write_members(cast(BinaryIO, text), out)
        if events == 1_000_000:
            found[f"{events // 1000}k events, one gzip stream"] = single
        found[f"{events // 1000}k events, indexed members"] = members
    for ranks in (2, 8):
        ranks_folder = folder / f"ranks_{ranks}"
        if not ranks_folder.exists():
            ranks_folder.mkdir()
            for rank in range(ranks):
                path = ranks_folder / f"rank{rank}.pt.trace.json.gz"
                write_big_trace(path, 500_000, seed=rank, rank=rank, world_size=ranks)
        found[f"{ranks} rank traces x 500k events"] = ranks_folder
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path, required=True)
    parser.add_argument("--after", type=Path, required=True)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--data", type=Path, default=Path("/tmp/bench-loader-trees"))
    args = parser.parse_args()
    trees = {"before": args.before.resolve(), "after": args.after.resolve()}
    targets = cases(args.data)
    runs: dict[tuple[str, str], list[tuple[float, float, float, str]]] = {(c, t): [] for c in targets for t in trees}
    for repeat in range(args.repeats):
        for case, target in targets.items():
            for tree in trees if repeat % 2 == 0 else reversed(trees):
                runs[(case, tree)].append(timed(trees[tree], target))
                seconds, own, child, _ = runs[(case, tree)][-1]
                print(f"repeat {repeat + 1}, {case}, {tree}: {seconds:.2f} s, {own:.0f} / {child:.0f} MiB", flush=True)
    print("\n| case | before s | after s | after / before | peak RSS MiB before (largest child) | after | same |")
    print("|---|---|---|---|---|---|---|")
    for case in targets:
        before, after = runs[(case, "before")], runs[(case, "after")]

        def median(rows: list[tuple[float, float, float, str]], i: int) -> float:
            return statistics.median(float(row[i]) for row in rows)

        ratio = statistics.median(a[0] / b[0] for a, b in zip(after, before, strict=True))
        same = "yes" if len({row[3] for row in before + after}) == 1 else "NO"
        print(
            f"| {case} | {median(before, 0):.2f} | {median(after, 0):.2f} | {ratio:.3f} | {median(before, 1):.0f} "
            f"({median(before, 2):.0f}) | {median(after, 1):.0f} ({median(after, 2):.0f}) | {same} |"
        )


if __name__ == "__main__":
    main()
