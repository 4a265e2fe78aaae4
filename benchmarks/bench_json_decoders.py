"""Benchmark: the JSON decoders in this project's dependency stack, turning trace events into what the analyses read.

The trace loader (`yolo_mlops/analysis/loading/`, `DecodeBackend.MSGSPEC_CHUNKED`) decodes the events with
msgspec into a typed struct of the fields it uses, then builds numpy-ready columns from those objects in Python.
This measures, on the same decompressed text of a generated trace (`bench_trace_analysis.write_big_trace`), cut
into the loader's ~4 MiB blocks of whole events, each in one thread (the time one core spends):

- msgspec, typed: the loader's own decoder (`msgspec_chunks.CHUNK_DECODER`);
- msgspec, untyped, and orjson: every key of every event into dicts;
- pyarrow's JSON reader and polars' NDJSON reader, each with an explicit schema of the same fields and one thread;
  they read one object per line, so the blocks are first rewritten to that (a C-level bytes.replace, counted);
  real Kineto traces spread an event over several lines, which these readers would need more rewriting for;
- the loader's column building on top of the typed decode (`columns.ColumnBuilder.add_events`).

Interleaved repeats (each repeat runs every decoder once, order rotating), medians. Also `gzip -dc` of the file.

    .venv/bin/python benchmarks/bench_json_decoders.py [--events 1000000] [--repeats 5]
"""

from __future__ import annotations

import argparse
import gzip
import io
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

os.environ["POLARS_MAX_THREADS"] = "1"  # read when polars is imported: one core, as every other decoder here

import msgspec  # noqa: E402
import orjson  # noqa: E402
import polars as pl  # noqa: E402
import pyarrow as pa  # noqa: E402
import pyarrow.json as pa_json  # noqa: E402

from yolo_mlops.analysis.loading.columns import ColumnBuilder  # noqa: E402
from yolo_mlops.analysis.loading.msgspec_chunks import CHUNK_DECODER  # noqa: E402
from yolo_mlops.render import markdown_table  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_trace_analysis import gunzip_run, write_big_trace  # noqa: E402

BLOCK_BYTES = 4 << 20
_ARROW_SCHEMA = pa.schema(
    [
        ("ph", pa.string()),
        ("cat", pa.string()),
        ("name", pa.string()),
        ("pid", pa.int64()),
        ("tid", pa.int64()),
        ("ts", pa.float64()),
        ("dur", pa.float64()),
        ("args", pa.struct([("stream", pa.int64()), ("correlation", pa.int64())])),
    ]
)
_POLARS_SCHEMA = {
    "ph": pl.String,
    "cat": pl.String,
    "name": pl.String,
    "pid": pl.Int64,
    "tid": pl.Int64,
    "ts": pl.Float64,
    "dur": pl.Float64,
    "args": pl.Struct({"stream": pl.Int64, "correlation": pl.Int64}),
}


def event_blocks(text: bytes) -> list[bytes]:
    """The traceEvents array's text in blocks of about BLOCK_BYTES, each whole events joined by `,` (no brackets);
    the generated trace writes one event per line, so a block ends at a `},` before a newline."""
    start = text.index(b"[", text.index(b'"traceEvents"')) + 1
    last = text.rindex(b"}\n]")
    blocks, pos = [], start
    while pos < last:
        cut = text.find(b"},\n", pos + BLOCK_BYTES, last)
        end = last + 1 if cut < 0 else cut + 1
        blocks.append(text[pos:end].strip())
        pos = end + 1
    return blocks


def _as_array(block: bytes) -> bytes:
    return b"[" + block + b"]"


def _one_per_line(block: bytes) -> bytes:
    return block.replace(b"},\n{", b"}\n{")


def msgspec_typed(blocks: list[bytes]) -> int:
    return sum(len(CHUNK_DECODER.decode(_as_array(b))) for b in blocks)


_UNTYPED = msgspec.json.Decoder()


def msgspec_untyped(blocks: list[bytes]) -> int:
    return sum(len(_UNTYPED.decode(_as_array(b))) for b in blocks)


def orjson_dicts(blocks: list[bytes]) -> int:
    return sum(len(orjson.loads(_as_array(b))) for b in blocks)


def pyarrow_reader(blocks: list[bytes]) -> int:
    options = pa_json.ParseOptions(explicit_schema=_ARROW_SCHEMA, unexpected_field_behavior="ignore")
    read = pa_json.ReadOptions(use_threads=False, block_size=2 * BLOCK_BYTES)
    return sum(
        pa_json.read_json(io.BytesIO(_one_per_line(b)), read_options=read, parse_options=options).num_rows
        for b in blocks
    )


def polars_reader(blocks: list[bytes]) -> int:
    return sum(pl.read_ndjson(io.BytesIO(_one_per_line(b)), schema=_POLARS_SCHEMA).height for b in blocks)


def typed_and_columns(blocks: list[bytes]) -> int:
    columns = ColumnBuilder()
    for b in blocks:
        columns.add_events(CHUNK_DECODER.decode(_as_array(b)))
    return columns.seen_events


DECODERS: dict[str, Callable[[list[bytes]], int]] = {
    "msgspec, typed (the loader's decode)": msgspec_typed,
    "msgspec, untyped (dicts)": msgspec_untyped,
    "orjson (dicts)": orjson_dicts,
    "pyarrow.json, schema, 1 thread": pyarrow_reader,
    "polars read_ndjson, schema, 1 thread": polars_reader,
    "msgspec typed + the loader's columns": typed_and_columns,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-json-decoders-") as folder:
        path = Path(folder) / "trace.json.gz"
        write_big_trace(path, args.events)
        text = gzip.decompress(path.read_bytes())
        blocks = event_blocks(text)
        del text
        times: dict[str, list[float]] = {name: [] for name in DECODERS}
        gunzips = []
        counts: dict[str, int] = {}
        names = list(DECODERS)
        for repeat in range(args.repeats):
            gunzips.append(gunzip_run(path))
            for name in names[repeat % len(names) :] + names[: repeat % len(names)]:
                t = time.perf_counter()
                counts[name] = DECODERS[name](blocks)
                times[name].append(time.perf_counter() - t)
    mib = sum(len(b) for b in blocks) / 2**20
    if len(set(counts.values())) != 1:
        raise SystemExit(f"the decoders disagree on the number of events: {counts}")
    events = next(iter(counts.values()))
    typed = statistics.median(times[names[0]])
    gz = statistics.median(gunzips)
    rows = [
        [
            name,
            f"{statistics.median(t):.2f}",
            f"{mib / statistics.median(t):.0f}",
            f"{statistics.median(t) / events * 1e6:.2f}",
            f"{statistics.median(t) / typed:.2f}x",
            f"{statistics.median(t) / gz:.2f}x",
        ]
        for name, t in times.items()
    ]
    print(
        f"{events:,} events, {mib:.0f} MiB of event text in {len(blocks)} blocks; gzip -dc of the file "
        f"{gz:.2f} s; {args.repeats} interleaved repeats, medians; Python {sys.version.split()[0]}, "
        f"msgspec {msgspec.__version__}, orjson {orjson.__version__}, pyarrow {pa.__version__}, "
        f"polars {pl.__version__}\n"
    )
    print(
        markdown_table(
            ["decoder (one thread)", "s", "MiB/s", "µs per event", "/ msgspec typed", "/ gzip -dc"],
            rows,
        )
    )


if __name__ == "__main__":
    main()
