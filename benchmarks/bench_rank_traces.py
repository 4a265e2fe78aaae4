"""A data-parallel job's rank traces analyzed together, against each alone: the whole `yolo-mlops analyze`
command, interleaved repeats, medians.

N rank traces of the benchmark generator's shape (benchmarks/bench_trace_analysis.write_big_trace, each naming
its rank) are written once. Each repeat times `analyze FILE --format json` for every trace alone, then
`analyze DIR --format json` over all of them, in alternating order. The directory is analyzed in one worker
process per core (analysis/trace_analysis.py, above PARALLEL_MIN_BYTES), so the goal is a wall time of at most
1.2 x (sum of the single-trace times / cores). Peak RSS: the single command's, and the largest worker's.

    .venv/bin/python benchmarks/bench_rank_traces.py --ranks 8 --events 500000 --repeats 3
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_trace_analysis import write_big_trace  # noqa: E402

# run the command and report its own and its largest descendant's peak RSS. The workers are children of
# multiprocessing's fork server, which reaps them; stopping the server (a private call: the server otherwise ends
# with the process) reaps it in turn, so their peaks reach this process's RUSAGE_CHILDREN.
_RUN = (
    "import resource, runpy, sys; sys.argv = ['yolo-mlops', *sys.argv[1:]];\n"
    "{prelude}"
    "try:\n    runpy.run_module('yolo_mlops.cli', run_name='__main__')\nexcept SystemExit:\n    pass\n"
    "from multiprocessing import forkserver\n"
    "forkserver._forkserver._stop()\n"
    "print('RSS', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,"
    " resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, file=sys.stderr)"
)


def timed(args: list[str], env: dict[str, str] | None = None, prelude: str = "") -> tuple[float, int, int]:
    """Seconds, and peak RSS MiB of the command `yolo-mlops ARGS` and of its largest child; `prelude`: Python
    run in the command's process before it (an A/B arm's change)."""
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", _RUN.replace("{prelude}", prelude), *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        check=False,
        env=env,
    )
    seconds = time.perf_counter() - started
    line = next((x for x in done.stderr.splitlines() if x.startswith("RSS ")), None)
    if done.returncode not in (0, None) or line is None:
        raise SystemExit(f"analyze {args} failed: {done.stderr[-2000:]}")
    _, own, child = line.split()
    return seconds, int(own) // 1024, int(child) // 1024


def arguments(doc: str | None, repeats: int) -> argparse.Namespace:
    """--ranks, --events (per rank trace) and --repeats of a rank-traces benchmark."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ranks", type=int, default=8)
    parser.add_argument("--events", type=int, default=500_000, help="events per rank trace")
    parser.add_argument("--repeats", type=int, default=repeats)
    return parser.parse_args()


def write_rank_traces(ranks: int, events: int, prefix: str) -> Path:
    """A new folder of `ranks` rank traces of the trace benchmark's generator, each naming its rank."""
    folder = Path(tempfile.mkdtemp(prefix=prefix))
    for rank in range(ranks):
        write_big_trace(folder / f"rank{rank}.pt.trace.json.gz", events, seed=rank, rank=rank, world_size=ranks)
    return folder


def main() -> None:
    args = arguments(__doc__, repeats=3)
    cores = os.cpu_count() or 1
    folder = write_rank_traces(args.ranks, args.events, "bench-rank-traces-")
    files = sorted(folder.glob("*.json.gz"))
    mib = sum(f.stat().st_size for f in files) / 2**20
    print(f"{args.ranks} rank traces of {args.events} events, {mib:.0f} MiB gzipped in all; {cores} cores")
    singles, together, single_rss, own_rss, worker_rss = [], [], [], [], []
    for repeat in range(args.repeats):

        def alone() -> None:
            results = [timed(["analyze", str(f), "--format", "json"]) for f in files]
            singles.append(sum(r[0] for r in results))
            single_rss.append(max(r[1] for r in results))

        def all_ranks() -> None:
            seconds, own, child = timed(["analyze", str(folder), "--format", "json"])
            together.append(seconds)
            own_rss.append(own)
            worker_rss.append(child)

        for step in (alone, all_ranks) if repeat % 2 == 0 else (all_ranks, alone):
            step()
        print(f"repeat {repeat + 1}: each alone {singles[-1]:.2f} s in all, together {together[-1]:.2f} s")
    alone_s, together_s = statistics.median(singles), statistics.median(together)
    bound = alone_s / cores
    print(
        f"sum of single-trace times {alone_s:.2f} s, / {cores} cores = {bound:.2f} s; together {together_s:.2f} s: "
        f"{together_s / bound:.2f} x the bound (goal <= 1.2)"
    )
    print(
        f"peak RSS: one trace alone {statistics.median(single_rss)} MiB; together: the command "
        f"{statistics.median(own_rss)} MiB, its largest worker {statistics.median(worker_rss)} MiB"
    )


if __name__ == "__main__":
    main()
