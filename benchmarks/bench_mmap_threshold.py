"""glibc's mmap threshold under `yolo-mlops analyze`: its default (dynamic) against fixed values.

glibc serves an allocation at or above the threshold with mmap and gives it back to the system when it is freed.
The default threshold starts at 128 KiB and rises to the size of each big block freed (up to 32 MiB), so later
blocks of that size come from the heap, where a freed one still counts in the RSS until the heap's top is free
too; a fixed threshold (`MALLOC_MMAP_THRESHOLD_`, or mallopt) turns that rise off. This measures what a fixed one
would give a big trace's analysis in time and peak memory.

The whole `yolo-mlops analyze FILE --format json` command over one generated trace (the trace benchmark's
generator), as one gzip stream and as the indexed gzip members `yolo-mlops` writes, with each setting in turn
(order rotating between repeats), medians of the wall time and of the peak RSS of the command and of its largest
child (the members' reader process).

    .venv/bin/python benchmarks/bench_mmap_threshold.py --events 4000000 --repeats 3 --thresholds 1048576
"""

from __future__ import annotations

import argparse
import gzip
import os
import sys
import tempfile
from pathlib import Path
from typing import BinaryIO, cast

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_rank_traces import timed  # noqa: E402
from bench_trace_analysis import write_big_trace  # noqa: E402
from harness import column_medians, round_order  # noqa: E402

from yolo_mlops.profiling.trace_gzip import write_members  # noqa: E402

_VAR = "MALLOC_MMAP_THRESHOLD_"


def timed_under(setting: str, path: Path) -> tuple[float, int, int]:
    """`timed` (bench_rank_traces) of `analyze PATH --format json` under one threshold setting."""
    env = {k: v for k, v in os.environ.items() if k != _VAR}
    if setting != "default":
        env[_VAR] = setting
    return timed(["analyze", str(path), "--format", "json"], env)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=4_000_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--thresholds", default="1048576", help="fixed thresholds in bytes, comma-separated")
    args = parser.parse_args()
    settings = ["default", *args.thresholds.split(",")]
    folder = Path(tempfile.mkdtemp(prefix="bench-mmap-threshold-"))
    single = folder / "trace.json.gz"
    write_big_trace(single, args.events)
    members = folder / "trace.members.json.gz"
    with gzip.open(single, "rb") as text, open(members, "wb") as out:
        write_members(cast(BinaryIO, text), out)
    forms = {"one gzip stream": single, "indexed members": members}
    runs: dict[tuple[str, str], list[tuple[float, int, int]]] = {
        (form, setting): [] for form in forms for setting in settings
    }
    for repeat in range(args.repeats):
        order = round_order(settings, repeat, order="rotate")
        for form, path in forms.items():
            for setting in order:
                runs[(form, setting)].append(timed_under(setting, path))
        print(f"repeat {repeat + 1} of {args.repeats} done", file=sys.stderr)
    print(f"{args.events:,} events, {args.repeats} interleaved repeats, medians")
    print("| form | mmap threshold | analyze s | peak RSS MiB (reader process) |")
    print("|---|---|---|---|")
    for (form, setting), results in runs.items():
        seconds, own, child = column_medians(results)
        reader = f" (+{child:.0f})" if child else ""
        print(f"| {form} | {setting} | {seconds:.2f} | {own:.0f}{reader} |")


if __name__ == "__main__":
    main()
