"""Benchmark: the least a numpy-free `analyze` would pay on the shared GPU traces.

`analyze` keeps its events in numpy columns, so every process pays numpy's import (the floor that
`bench_trace_analysis.py` measures). This measures the other design's floor, to show whether dropping
numpy could reach HTA / 10 on the larger fixtures: an interpreter that imports only msgspec, gunzip,
msgspec's typed decode of the events (the fields the loader reads), and one bare pure-Python pass over
them (summing durations per category), the cheapest analysis there is. Medians of interleaved repeats.

    .venv/bin/python benchmarks/bench_numpy_free_floor.py [--repeats 7]
"""

from __future__ import annotations

import argparse
import gzip
import statistics
import sys
import time
from pathlib import Path

import msgspec
from bench_trace_analysis import FIXTURES as TRACES  # run as a script: its folder is on sys.path
from bench_trace_analysis import gpu_traces_dir
from harness import interleave, time_child

from yolo_mlops.analysis.loading.events import TypedEvent


class Trace(msgspec.Struct, gc=False):
    traceEvents: list[TypedEvent]  # the loader's own event type: the same fields, decoded the same way


DECODER = msgspec.json.Decoder(Trace)


def one_repeat(path: Path) -> dict[str, float]:
    start = time.perf_counter()
    with gzip.open(path, "rb") as fh:
        text = fh.read()
    gunzipped = time.perf_counter()
    events = DECODER.decode(text).traceEvents
    decoded = time.perf_counter()
    by_category: dict[str, float] = {}
    for event in events:
        if event.ph == "X" and event.dur is not None:
            by_category[event.cat] = by_category.get(event.cat, 0.0) + event.dur
    passed = time.perf_counter()
    return {"gunzip": gunzipped - start, "decode": decoded - gunzipped, "pass": passed - decoded, "events": len(events)}


def interpreter_with_msgspec() -> float:
    return time_child([sys.executable, "-c", "import msgspec.json"], check=True).seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    repeats = parser.parse_args().repeats
    fixtures = gpu_traces_dir()
    samples: dict[str, list[dict[str, float]]] = {name: [] for name in TRACES}
    starts = []
    # interleaved: every trace and the interpreter start in each repeat
    for _, arm in interleave([None, *TRACES], repeats, order="same"):
        if arm is None:
            starts.append(interpreter_with_msgspec())
        else:
            samples[arm].append(one_repeat(fixtures / arm))
    start_s = statistics.median(starts)
    print(f"interpreter + import msgspec.json: {start_s:.3f} s (median of {repeats})")
    print("| trace | events | gunzip s | typed decode s | one bare pass s | start + gunzip + decode + pass s |")
    print("|---|---|---|---|---|---|")
    for name in TRACES:
        med = {key: statistics.median(s[key] for s in samples[name]) for key in ("gunzip", "decode", "pass")}
        total = start_s + sum(med.values())
        print(
            f"| {name} | {samples[name][0]['events']:,} | {med['gunzip']:.3f} | {med['decode']:.3f} | "
            f"{med['pass']:.4f} | {total:.3f} |"
        )


if __name__ == "__main__":
    main()
