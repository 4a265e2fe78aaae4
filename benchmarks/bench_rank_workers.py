"""The pool that analyzes a job's rank traces: a fresh process per trace, forked from a server that imported the
analysis once (what `analyze_traces` does), against workers that each analyze several traces one after another
(spawned, reused: the pool before). The whole `yolo-mlops analyze DIR --format json` command, arms interleaved,
medians; the time and the largest worker's peak RSS of each.

A reused worker keeps some heap of the traces it analyzed before, so its peak passes the largest trace's own;
a fresh process per trace costs a fork each, where a spawned one would import the analysis again.

    .venv/bin/python benchmarks/bench_rank_workers.py --ranks 8 --events 500000 --repeats 6
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_rank_traces import arguments, timed, write_rank_traces  # noqa: E402
from harness import column_medians, interleave  # noqa: E402

# the reused-workers arm: spawned workers without a task limit
REUSED_WORKERS = """\
import multiprocessing, concurrent.futures as cf
from yolo_mlops.analysis import worker_pool
worker_pool._server_context = lambda: multiprocessing.get_context("spawn")
class _Reused(cf.ProcessPoolExecutor):
    def __init__(self, *args, max_tasks_per_child=None, **kwargs):
        super().__init__(*args, **kwargs)
cf.ProcessPoolExecutor = _Reused
"""


def main() -> None:
    args = arguments(__doc__, repeats=6)
    folder = write_rank_traces(args.ranks, args.events, "bench-rank-workers-")
    command = ["analyze", str(folder), "--format", "json"]
    arms = {"fresh process per trace": "", "reused workers": REUSED_WORKERS}
    results: dict[str, list[tuple[float, int]]] = {arm: [] for arm in arms}
    for repeat, arm in interleave(arms, args.repeats, order="alternate"):
        seconds, _, worker = timed(command, prelude=arms[arm])
        results[arm].append((seconds, worker))
        print(f"repeat {repeat + 1}, {arm}: {seconds:.2f} s, largest worker {worker} MiB", flush=True)
    for arm, runs in results.items():
        seconds, worker = column_medians(runs)
        print(f"{arm}: {seconds:.2f} s, largest worker {worker:.0f} MiB (medians of {len(runs)})")


if __name__ == "__main__":
    main()
