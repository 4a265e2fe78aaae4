"""Benchmark: yolo-mlops' trace analyzer against HolisticTraceAnalysis (HTA) 0.5.0.

Headline, measured as a user meets it: the whole `yolo-mlops analyze TRACE --format json` process
(interpreter start, imports, load, breakdowns, idle attribution, diagnosis, JSON) against a whole HTA
process doing its temporal, kernel-type (with memory kernels) and idle-time breakdowns on the same
trace, interleaved so that machine noise hits both alike, medians of --repeats. Also: CLI start
(`yolo-mlops --help`), the in-process analysis (load + analyze + diagnose, imports excluded) against
merely gunzipping the file in the same process, and each child's peak RSS (from wait4).
HTA lives in its own virtualenv (.bench-venv-hta, created here if missing); it is never a
runtime dependency of yolo-mlops.

A generated trace of --big-events events (default 1,000,000) measures our analyzer alone at scale,
plus one of a quarter of that size to show how memory grows with the event count.

--floor-events 250000,1000000,4000000 measures big traces against the decompression floor instead (section
`## Trace analysis at the decompression floor`): each generated trace as one gzip stream (as other tools write
it) and as the indexed gzip members `yolo-mlops` writes, the whole `yolo-mlops analyze FILE --format json` process
against `gzip -dc FILE > /dev/null` of the same file, one after the other in every repeat (interleaved), medians
of the per-repeat ratios; peak RSS of the process (and of its reader process, for the parallel reader); and the
floors beneath: zlib alone in one thread and in one thread per core, msgspec's decode alone, decode + columns.

    .venv/bin/python benchmarks/bench_trace_analysis.py [--repeats 3] [--hta-generated] [--write-docs]
    .venv/bin/python benchmarks/bench_trace_analysis.py --floor-events 250000,1000000,4000000 --repeats 5 --write-docs
"""

from __future__ import annotations

import argparse
import compileall
import gzip
import json
import os
import platform
import random
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, cast

from yolo_mlops.profiling.trace_gzip import write_members
from yolo_mlops.render import markdown_table

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))  # trace_events.py: the events the analysis tests build their traces from

from trace_events import complete_event, memory_event  # noqa: E402

HTA_VENV = REPO / ".bench-venv-hta"
HTA_VERSION = "0.5.0"
DOCS = REPO / "docs" / "benchmarks.md"
SECTION = "## Trace analysis"
FLOOR_SECTION = "## Trace analysis at the decompression floor"


def gpu_traces_dir() -> Path:
    """The real GPU traces the tests use (tests/fixtures/gpu_traces), or $YOLO_MLOPS_GPU_TRACES."""
    env = os.environ.get("YOLO_MLOPS_GPU_TRACES")
    return Path(env) if env else REPO / "tests" / "fixtures" / "gpu_traces"


FIXTURES = ["v100_compute_rank0.json.gz", "a100_nccl_rank0.json.gz", "small_comm_rank0.json.gz"]

# The child programs print one JSON line: {"seconds": in-process load+analyze time}.
HTA_CHILD = r"""
import json, logging, sys, time, warnings
warnings.filterwarnings("ignore")
logging.disable(logging.CRITICAL)
t0 = time.perf_counter()
from hta.trace_analysis import TraceAnalysis
t1 = time.perf_counter()
analyzer = TraceAnalysis(trace_dir=sys.argv[1])
analyzer.get_temporal_breakdown(visualize=False)
analyzer.get_gpu_kernel_breakdown(visualize=False, include_memory_kernels=True)
analyzer.get_idle_time_breakdown(visualize=False)
print(json.dumps({"seconds": time.perf_counter() - t1}))
"""

OURS_CHILD = r"""
import gzip, json, sys, time
from yolo_mlops.cli.analyze import analyze_command
from yolo_mlops.analysis.trace_loader import load_traces
t0 = time.perf_counter()
with gzip.open(sys.argv[1], "rb") as fh:
    while fh.read(1 << 20):
        pass
t1 = time.perf_counter()
analyze_command(sys.argv[1], "json")  # load, breakdowns, idle attribution, diagnosis, JSON
t2 = time.perf_counter()
result = {"seconds": t2 - t1, "gunzip_seconds": t1 - t0}
if "--load" in sys.argv:  # the parser alone (gunzip + decode + columns), after analyze: its one-time costs paid
    load_traces(sys.argv[1])
    result["load_seconds"] = time.perf_counter() - t2
print(json.dumps(result))
"""
CLI = Path(sys.executable).parent / "yolo-mlops"
HELP_REPEATS = 10


@dataclass
class Run:
    wall_s: float
    inner_s: float
    peak_rss_mib: float
    gunzip_s: float = float("nan")
    load_s: float = float("nan")


def ensure_hta_venv() -> Path:
    python = HTA_VENV / "bin" / "python"
    if not python.exists():
        print(f"creating {HTA_VENV} with holistictraceanalysis=={HTA_VERSION} ...", file=sys.stderr)
        subprocess.run(["python3", "-m", "venv", str(HTA_VENV)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", f"holistictraceanalysis=={HTA_VERSION}"], check=True)
    return python


def run_child(python: str, program: str, target: Path, *flags: str) -> Run:
    """Run one child to completion; its own peak RSS comes from wait4, not the whole tree's maximum."""
    return _run([python, "-c", program, str(target), *flags])


def run_cli(*args: str) -> Run:
    """The installed `yolo-mlops` console script, as a user runs it (in-process time: not known, NaN)."""
    return _run([str(CLI), *args], parse=False)


def numpy_floor() -> Run:
    """A process that only starts the interpreter and imports numpy (as `analyze` does: OpenBLAS' thread pool
    kept to one thread): what any numpy-based analyzer pays before it reads a byte."""
    return _run([sys.executable, "-c", "import numpy"], parse=False, extra_env={"OPENBLAS_NUM_THREADS": "1"})


def _run(argv: list[str], parse: bool = True, extra_env: dict[str, str] | None = None) -> Run:
    env = dict(os.environ, PYTHONPATH=str(REPO), PYTHONWARNINGS="ignore", **(extra_env or {}))
    with tempfile.TemporaryFile() as err_file:  # HTA logs a lot: a file cannot fill up like a pipe
        start = time.perf_counter()
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=err_file, env=env, cwd=str(REPO))
        assert proc.stdout is not None  # stdout=PIPE
        out = proc.stdout.read()
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode != 0:
            err_file.seek(0)
            raise RuntimeError(f"{argv[0]} {' '.join(argv[-2:])} failed:\n{err_file.read().decode()[-2000:]}")
    rss = usage.ru_maxrss / 1024  # ru_maxrss is KiB on Linux
    if not parse:
        return Run(wall, float("nan"), rss)
    result = json.loads(out.decode().strip().splitlines()[-1])
    nan = float("nan")
    return Run(wall, result["seconds"], rss, result.get("gunzip_seconds", nan), result.get("load_seconds", nan))


def summarise(runs: list[Run]) -> dict:
    return {
        "wall_s": statistics.median(r.wall_s for r in runs),
        "inner_s": statistics.median(r.inner_s for r in runs),
        "rss_mib": statistics.median(r.peak_rss_mib for r in runs),
        "gunzip_s": statistics.median(r.gunzip_s for r in runs),
        "load_s": statistics.median(r.load_s for r in runs),
    }


def byte_compile_tree() -> None:
    """Byte-compile this tree, as `pip install` does for an installed package (and as HTA's venv is): an
    editable install under PYTHONDONTWRITEBYTECODE=1 would otherwise compile every module from source in
    every child (~10 ms of each `analyze` process on the development machine)."""
    for folder in ("yolo_mlops", "flows"):
        compileall.compile_dir(str(REPO / folder), quiet=1)


def cli_start(repeats: int) -> float:
    """Median wall time of `yolo-mlops --help` (what every command pays before it does anything)."""
    return statistics.median(run_cli("--help").wall_s for _ in range(repeats))


def compare_with_hta(repeats: int) -> tuple[list[dict], float]:
    """Per fixture, medians of HTA, the CLI and the in-process child; and the median numpy floor."""
    hta_python = str(ensure_hta_venv())
    fixtures = gpu_traces_dir()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        # HTA reads a directory of traces: one directory per fixture holding a link to it.
        dirs = {}
        for name in FIXTURES:
            d = Path(tmp) / name.split(".")[0]
            d.mkdir()
            (d / name).symlink_to((fixtures / name).resolve())
            dirs[name] = d
        results: dict[str, dict[str, list[Run]]] = {n: {"hta": [], "cli": [], "ours": []} for n in FIXTURES}
        floors: list[float] = []
        for rep in range(repeats):
            floors.append(numpy_floor().wall_s)
            for name in FIXTURES:
                results[name]["hta"].append(run_child(hta_python, HTA_CHILD, dirs[name]))
                results[name]["cli"].append(run_cli("analyze", str(dirs[name] / name), "--format", "json"))
                results[name]["ours"].append(run_child(sys.executable, OURS_CHILD, dirs[name] / name, "--load"))
                print(
                    f"  repeat {rep + 1}/{repeats} {name}: hta {results[name]['hta'][-1].wall_s:.2f}s, "
                    f"yolo-mlops analyze {results[name]['cli'][-1].wall_s:.3f}s",
                    file=sys.stderr,
                )
    for name in FIXTURES:
        rows.append({"trace": name, **{tool: summarise(runs) for tool, runs in results[name].items()}})
    return rows, statistics.median(floors)


def write_big_trace(path: Path, events: int, seed: int = 0, rank: int = 0, world_size: int = 1) -> None:
    """A Kineto-shaped trace: ProfilerSteps of cpu_op + cudaLaunchKernel + kernel triples, memory events; its
    distributedInfo names `rank` of `world_size`."""
    rng = random.Random(seed)
    kernels = [
        f"void at::native::vectorized_elementwise_kernel<4, at::native::Functor{i}<float>, "
        f"at::detail::Array<char*, 3> >(int, at::native::Functor{i}<float>, at::detail::Array<char*, 3>)"
        for i in range(300)
    ]
    ops = [f"aten::op{i}" for i in range(200)]
    per_step = 10_000
    with gzip.open(path, "wt", compresslevel=1) as out:
        out.write(
            f'{{"schemaVersion": 1, "distributedInfo": {{"backend": "nccl", "rank": {rank}, '
            f'"world_size": {world_size}}},\n'
        )
        out.write('"deviceProperties": [{"id": 0, "name": "Synthetic GPU", "totalGlobalMem": 34359738368}],\n')
        out.write('"traceEvents": [\n')
        written, t, gpu_t, corr, step = 0, 1.0e9, 1.0e9, 0, 0
        first = True

        def emit(event: dict) -> None:
            nonlocal first, written
            out.write(("" if first else ",\n") + json.dumps(event))
            first = False
            written += 1

        while written < events:
            step_start, n = t, 0
            while n < per_step - 5 and written < events - 1:
                corr += 1
                op = {"External id": corr, "Record function id": 0, "Ev Idx": corr}
                emit(complete_event("cpu_op", rng.choice(ops), 1, 1, t, 8.5, op))
                launch = {"External id": corr, "cbid": 211, "correlation": corr}
                emit(complete_event("cuda_runtime", "cudaLaunchKernel", 1, 1, t + 1, 4.2, launch))
                gpu_t = max(gpu_t, t + 5)
                dur = rng.uniform(2, 20)
                kernel = {
                    "External id": corr,
                    "queued": 0,
                    "device": 0,
                    "context": 1,
                    "stream": 7,
                    "correlation": corr,
                    "registers per thread": 30,
                    "shared memory": 0,
                    "grid": [4, 106, 1],
                    "block": [128, 1, 1],
                }
                emit(complete_event("kernel", rng.choice(kernels), 0, 7, gpu_t, dur, kernel))
                emit(memory_event(t + 2, 2**30 + rng.randint(0, 2**20), 2**31, size=512, addr=corr))
                gpu_t += dur
                t += 10
                n += 4
            emit(
                complete_event(
                    "user_annotation", f"ProfilerStep#{step}", 1, 1, step_start, t - step_start, {"External id": 0}
                )
            )
            step += 1
            t += 5
        out.write('\n], "traceName": "synthetic", "displayTimeUnit": "ms"}\n')


def big_trace_runs(events: int, repeats: int, with_hta: bool) -> list[dict]:
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in (events // 4, events):
            trace_dir = Path(tmp) / str(n)
            trace_dir.mkdir()
            path = trace_dir / f"synthetic_{n}.pt.trace.json.gz"
            write_big_trace(path, n)
            runs = [run_child(sys.executable, OURS_CHILD, path) for _ in range(repeats)]
            hta = None
            if with_hta and n == events // 4:
                hta = summarise([run_child(str(ensure_hta_venv()), HTA_CHILD, trace_dir)])
            with gzip.open(path, "rb") as fh:
                json_mib = sum(len(chunk) for chunk in iter(lambda: fh.read(1 << 22), b"")) / 2**20
            rows.append(
                {
                    "events": n,
                    "json_mib": json_mib,
                    "gz_mib": path.stat().st_size / 2**20,
                    "ours": summarise(runs),
                    "hta": hta,
                }
            )
            print(f"  {n} events: {rows[-1]['ours']}", file=sys.stderr)
    return rows


# `yolo-mlops analyze FILE --format json` exactly as the console script runs it, plus the peak RSS of the process
# and of its children (the parallel reader's forked processes) written to the file named by $BENCH_RSS_FILE.
ANALYZE_WITH_RSS = r"""
import json, os, resource, sys
from yolo_mlops.cli import main
code = main(["analyze", sys.argv[1], "--format", "json"])
sys.stdout.flush()
with open(os.environ["BENCH_RSS_FILE"], "w") as out:
    json.dump({"self": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
               "children": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024}, out)
sys.exit(code)
"""

# The floors beneath an analysis, in one process: zlib alone (one thread; one thread per core over indexed members),
# msgspec's typed decode of the events alone, the loader's columns built from what it decoded, and the analyses
# after loading (the whole analyze command's in-process time less the loading's, both warm).
FLOOR_CHILD = r"""
import contextlib, io, json, os, sys, time, zlib
from concurrent.futures import ThreadPoolExecutor
from yolo_mlops.analysis import trace_loader as loader
from yolo_mlops.analysis.loading.columns import ColumnBuilder
from yolo_mlops.analysis.loading.formats import TRACE_EVENTS_KEY_RE
from yolo_mlops.analysis.loading.msgspec_chunks import CHUNK_DECODER
from yolo_mlops.profiling import trace_gzip
single, members_path = sys.argv[1], sys.argv[2]
result = {}
t = time.perf_counter()
with open(single, "rb") as fh:
    d = zlib.decompressobj(31)
    for block in iter(lambda: fh.read(1 << 20), b""):
        d.decompress(block)
result["zlib_1_thread_s"] = time.perf_counter() - t
with open(members_path, "rb") as fh:
    members = trace_gzip.read_index(fh, os.fstat(fh.fileno()).st_size)
threads = len(os.sched_getaffinity(0))
t = time.perf_counter()
def inflate(member):
    with open(members_path, "rb") as fh:
        return len(trace_gzip.member_text(fh, member))
with ThreadPoolExecutor(threads) as pool:
    sum(pool.map(inflate, members))
result["zlib_members_threads_s"] = time.perf_counter() - t
result["threads"] = threads
decode = columns = 0.0
builder = ColumnBuilder()
with open(members_path, "rb") as fh:
    for i, member in enumerate(members):
        text = trace_gzip.member_text(fh, member)
        if i == 0:
            text = text[TRACE_EVENTS_KEY_RE.search(text).end():]
        if not member.ends_at_event:  # the last member: the array's end and the metadata after it
            text = text[: text.rindex(b"]")] + b","
        t = time.perf_counter()
        events = CHUNK_DECODER.decode(b"[" + text.rstrip().rstrip(b",") + b"]")
        decode += time.perf_counter() - t
        t = time.perf_counter()
        builder.add_events(events)
        columns += time.perf_counter() - t
        del events
result |= {"decode_s": decode, "columns_s": columns}
del builder
from yolo_mlops.cli.analyze import analyze_command
import yolo_mlops.analysis.diagnosis, yolo_mlops.analysis.model, yolo_mlops.analysis.render_text
import yolo_mlops.analysis.trace_analysis  # the command's lazy imports, paid before the timed passes
t = time.perf_counter()
loader.load_traces(single)
load = time.perf_counter() - t
t = time.perf_counter()
with contextlib.redirect_stdout(io.StringIO()):
    analyze_command(single, "json")
result["analyses_s"] = time.perf_counter() - t - load
print(json.dumps(result))
"""
# Interpreter start and the analyze command's imports, what every `yolo-mlops analyze` pays before reading.
START_CHILD = (
    "import yolo_mlops.cli, yolo_mlops.cli.analyze, yolo_mlops.analysis.diagnosis, yolo_mlops.analysis.model, "
    "yolo_mlops.analysis.render_text, yolo_mlops.analysis.trace_analysis"
)


def start_s(repeats: int = 5) -> float:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", START_CHILD], check=True, env=env, cwd=str(REPO))
        times.append(time.perf_counter() - start)
    return statistics.median(times)


@dataclass
class FloorRun:
    wall_s: float
    rss_mib: float
    children_rss_mib: float


def gunzip_run(path: Path) -> float:
    start = time.perf_counter()
    subprocess.run(["gzip", "-dc", str(path)], stdout=subprocess.DEVNULL, check=True)
    return time.perf_counter() - start


def analyze_run(path: Path) -> FloorRun:
    env = dict(os.environ, PYTHONPATH=str(REPO), PYTHONWARNINGS="ignore")
    with tempfile.NamedTemporaryFile(suffix=".json") as rss_file:
        env["BENCH_RSS_FILE"] = rss_file.name
        start = time.perf_counter()
        subprocess.run(
            [sys.executable, "-c", ANALYZE_WITH_RSS, str(path)],
            stdout=subprocess.DEVNULL,
            check=True,
            env=env,
            cwd=str(REPO),
        )
        wall = time.perf_counter() - start
        rss = json.loads(Path(rss_file.name).read_text())
    return FloorRun(wall, rss["self"], rss["children"])


def floor_runs(sizes: list[int], repeats: int, folder: Path) -> list[dict]:
    """Per size and form (one gzip stream, indexed members): medians of analyze, gunzip and their per-repeat ratio,
    interleaved over everything in each repeat; then the floors, measured once per size."""
    files: dict[tuple[int, str], Path] = {}
    for n in sizes:
        single = folder / f"synthetic_{n}.json.gz"
        write_big_trace(single, n)
        members = folder / f"synthetic_{n}.members.json.gz"
        with gzip.open(single, "rb") as text, open(members, "wb") as out:
            # a GzipFile reads as a binary file (write_members only calls read), but is no BinaryIO to mypy
            write_members(cast(BinaryIO, text), out)
        files[(n, "one gzip stream")] = single
        files[(n, "indexed members")] = members
        print(f"  wrote {n} events", file=sys.stderr)
    runs: dict[tuple[int, str], dict[str, list]] = {key: {"analyze": [], "gunzip": []} for key in files}
    for rep in range(repeats):
        for key, path in files.items():
            order = ("gunzip", "analyze") if rep % 2 == 0 else ("analyze", "gunzip")
            for what in order:
                runs[key][what].append(gunzip_run(path) if what == "gunzip" else analyze_run(path))
            print(
                f"  repeat {rep + 1}/{repeats} {key}: analyze {runs[key]['analyze'][-1].wall_s:.2f}s, "
                f"gunzip {runs[key]['gunzip'][-1]:.2f}s",
                file=sys.stderr,
            )
    rows = []
    for (n, form), path in files.items():
        analyze, gunzip = runs[(n, form)]["analyze"], runs[(n, form)]["gunzip"]
        with gzip.open(path, "rb") as fh:
            json_mib = sum(len(chunk) for chunk in iter(lambda: fh.read(1 << 22), b"")) / 2**20
        row = {
            "events": n,
            "form": form,
            "json_mib": json_mib,
            "gz_mib": path.stat().st_size / 2**20,
            "analyze_s": statistics.median(r.wall_s for r in analyze),
            "gunzip_s": statistics.median(gunzip),
            "ratio": statistics.median(a.wall_s / g for a, g in zip(analyze, gunzip, strict=True)),
            "rss_mib": statistics.median(r.rss_mib for r in analyze),
            "children_rss_mib": statistics.median(r.children_rss_mib for r in analyze),
        }
        if form == "indexed members":
            floor = subprocess.run(
                [sys.executable, "-c", FLOOR_CHILD, str(files[(n, "one gzip stream")]), str(path)],
                capture_output=True,
                check=True,
                env=dict(os.environ, PYTHONPATH=str(REPO)),
                cwd=str(REPO),
            )
            row["floor"] = json.loads(floor.stdout.decode().strip().splitlines()[-1])
        rows.append(row)
    return rows


def _total_rss(row: dict) -> float:
    return row["rss_mib"] + (row["children_rss_mib"] if row["form"] == "indexed members" else 0.0)


def render_floor(rows: list[dict], repeats: int, command: str, load: tuple[float, float], start: float) -> str:
    lines = [
        FLOOR_SECTION,
        "",
        "Big generated traces (`write_big_trace`: ProfilerSteps of cpu_op + cudaLaunchKernel + kernel + `[memory]`",
        "events, one line each) against the decompression floor, as a user meets both: the whole",
        "`yolo-mlops analyze FILE --format json` process against `gzip -dc FILE > /dev/null` of the same file, one",
        f"right after the other (order alternating) in each of {repeats} repeats over all files; ratio = median of the",
        "per-repeat ratios. Each trace twice: as one gzip stream (level 1, as other tools' traces come) and as the",
        "indexed gzip members `yolo-mlops` writes (`yolo_mlops/profiling/trace_gzip.py`, level 6, ~4 MiB of text per",
        "member), which the loader splits between one process per core.",
        f"Machine: {len(os.sched_getaffinity(0))} CPU cores available, shared with other jobs (1-minute load average "
        f"{load[0]:.1f} at the start, {load[1]:.1f} at the end), Python {platform.python_version()}.",
        "",
        f"Command: `{command}`",
        "",
        markdown_table(
            (
                "events",
                "form",
                "JSON MiB (gz MiB)",
                "analyze s",
                "gunzip s",
                "analyze / gunzip",
                "peak RSS MiB (reader process)",
                "MiB per M events",
                "µs per event",
            ),
            [
                (
                    f"{r['events']:,}",
                    r["form"],
                    f"{r['json_mib']:.0f} ({r['gz_mib']:.0f})",
                    f"{r['analyze_s']:.2f}",
                    f"{r['gunzip_s']:.2f}",
                    f"{r['ratio']:.2f}x",
                    f"{r['rss_mib']:.0f}"
                    + (f" (+{r['children_rss_mib']:.0f})" if r["form"] == "indexed members" else ""),
                    f"{_total_rss(r) / (r['events'] / 1e6):.0f}",
                    f"{r['analyze_s'] / r['events'] * 1e6:.2f}",
                )
                for r in rows
            ],
        ),
        "",
        "The reader process of the indexed form is forked from the analyzing one: its peak RSS includes pages it",
        "shares with its parent, so parent + reader over-counts the memory both use together.",
        "",
        "Floors, in one process per size: zlib inflating the one-stream file in one thread, and the indexed members",
        "in one thread per core; msgspec's typed decode of the events alone (no columns), summed over the members;",
        "the loader's columns built from those decoded events; the analyses after loading:",
        "",
        markdown_table(
            (
                "events",
                "zlib, 1 thread s",
                "zlib, threads over members s",
                "threads",
                "decode alone s",
                "columns s",
                "analyses s",
                "gzip -dc s (above)",
            ),
            [
                (
                    f"{r['events']:,}",
                    f"{r['floor']['zlib_1_thread_s']:.2f}",
                    f"{r['floor']['zlib_members_threads_s']:.2f}",
                    str(r["floor"]["threads"]),
                    f"{r['floor']['decode_s']:.2f}",
                    f"{r['floor']['columns_s']:.2f}",
                    f"{r['floor']['analyses_s']:.2f}",
                    f"{r['gunzip_s']:.2f}",
                )
                for r in rows
                if "floor" in r
            ],
        ),
        "",
        "What each goal leaves room for, from the parts above (the `columns` are the loader's building of them from",
        "the decoded events; `analyses` the command's in-process time after loading; `start` the interpreter and the",
        "command's imports). One stream: inflating in the reader thread beside decoding and building the columns in",
        "the main one, `start + max(inflate, decode [+ columns]) + analyses`. Indexed members: inflating, decoding",
        "and building split over the cores, `start + (inflate over the members x threads + decode [+ columns]) /",
        "threads + analyses` (the merge of the readers' columns left out). Each in seconds and as a ratio to that",
        f"file's gzip -dc; start {start:.2f} s.",
        "",
        markdown_table(
            (
                "events",
                "form",
                "goal",
                "floor, columns free",
                "floor, columns as built",
                "measured (above)",
            ),
            [row for n in sorted({r["events"] for r in rows}) for row in _goal_rows(rows, n, start)],
        ),
    ]
    return "\n".join(lines) + "\n"


def _goal_rows(rows: list[dict], events: int, start: float) -> list[tuple[str, ...]]:
    by_form = {r["form"]: r for r in rows if r["events"] == events}
    members = by_form["indexed members"]
    f = members["floor"]
    threads = f["threads"]
    inflate_cpu = f["zlib_members_threads_s"] * threads
    floors = {
        "one gzip stream": (
            1.2,
            start + max(f["zlib_1_thread_s"], f["decode_s"]) + f["analyses_s"],
            start + max(f["zlib_1_thread_s"], f["decode_s"] + f["columns_s"]) + f["analyses_s"],
        ),
        "indexed members": (
            0.8,
            start + (inflate_cpu + f["decode_s"]) / threads + f["analyses_s"],
            start + (inflate_cpu + f["decode_s"] + f["columns_s"]) / threads + f["analyses_s"],
        ),
    }
    out: list[tuple[str, ...]] = []
    for form, (goal, free, built) in floors.items():
        gunzip = by_form[form]["gunzip_s"]
        out.append(
            (
                f"{events:,}",
                form,
                f"<= {goal}x",
                f"{free:.2f} s, {free / gunzip:.2f}x",
                f"{built:.2f} s, {built / gunzip:.2f}x",
                f"{by_form[form]['analyze_s']:.2f} s, {by_form[form]['ratio']:.2f}x",
            )
        )
    return out


def render(
    compare: list[dict],
    big: list[dict],
    repeats: int,
    command: str,
    help_s: float,
    load: tuple[float, float],
    floor_s: float,
) -> str:
    lines = [
        SECTION,
        "",
        "Measured as a user meets it: the whole `yolo-mlops analyze TRACE --format json` process (interpreter",
        "start, imports, load, breakdowns, GPU idle attribution, diagnosis with findings, JSON) against a whole",
        f"HolisticTraceAnalysis {HTA_VERSION} process doing its temporal, kernel-type (with memory kernels) and",
        "idle-time breakdowns, on the real GPU traces in `tests/fixtures/gpu_traces/`; interleaved, "
        f"{repeats} repeats, medians.",
        f"Machine: {len(os.sched_getaffinity(0))} CPU cores available (shared with other jobs; 1-minute load "
        f"average {load[0]:.1f} at the start, {load[1]:.1f} at the end), Python {platform.python_version()}.",
        "",
        f"Command (repository root; HTA is installed into `.bench-venv-hta` on first run): `{command}`",
        "",
        markdown_table(
            (
                "trace",
                "HTA process s",
                "`yolo-mlops analyze` process s",
                "speed-up (goal >= 10x)",
                "10x budget s (HTA / 10)",
                "HTA peak RSS MiB",
                "analyze peak RSS MiB",
            ),
            [
                (
                    row["trace"],
                    f"{row['hta']['wall_s']:.2f}",
                    f"{row['cli']['wall_s']:.3f}",
                    f"{row['hta']['wall_s'] / row['cli']['wall_s']:.1f}x",
                    f"{row['hta']['wall_s'] / 10:.3f}",
                    f"{row['hta']['rss_mib']:.0f}",
                    f"{row['cli']['rss_mib']:.0f}",
                )
                for row in compare
            ],
        ),
    ]
    lines += [
        "",
        f"Floor, in the same interleaved loop: a process that starts the interpreter and imports numpy, nothing "
        f"else, takes **{floor_s:.3f} s** (median), which any numpy-based analyzer pays before it reads a byte.",
        "",
        f"CLI start, `yolo-mlops --help` (median of {HELP_REPEATS}): **{help_s:.3f} s** (goal <= 0.15 s).",
        "",
        "In-process (imports excluded), same child: analysis = load + breakdowns + attribution + diagnosis + JSON;",
        "gunzip = reading and decompressing the file, nothing else (goal: analysis within 3x of gunzip);",
        "load = the parser alone (`load_traces`: gunzip + msgspec decode + columns), the floor of any analysis.",
        "",
        markdown_table(
            (
                "trace",
                "HTA in-process s",
                "ours in-process s",
                "speed-up",
                "gunzip s",
                "ours / gunzip",
                "load s",
                "load / gunzip",
            ),
            [
                (
                    row["trace"],
                    f"{row['hta']['inner_s']:.2f}",
                    f"{row['ours']['inner_s']:.3f}",
                    f"{row['hta']['inner_s'] / row['ours']['inner_s']:.1f}x",
                    f"{row['ours']['gunzip_s']:.3f}",
                    f"{row['ours']['inner_s'] / row['ours']['gunzip_s']:.1f}x",
                    f"{row['ours']['load_s']:.3f}",
                    f"{row['ours']['load_s'] / row['ours']['gunzip_s']:.1f}x",
                )
                for row in compare
            ],
        ),
    ]
    if not big:
        return "\n".join(lines) + "\n"
    lines += [
        "",
        "Generated traces (Kineto-shaped: ProfilerSteps of cpu_op + cudaLaunchKernel + kernel + `[memory]` events;",
        "HTA only with --hta-generated, on the smaller one, once):",
        "",
        markdown_table(
            (
                "events",
                "JSON MiB (gz MiB)",
                "ours wall s",
                "ours in-process s",
                "ours peak RSS MiB",
                "HTA wall s",
                "HTA peak RSS MiB",
            ),
            [
                (
                    f"{row['events']:,}",
                    f"{row['json_mib']:.0f} ({row['gz_mib']:.0f})",
                    f"{row['ours']['wall_s']:.2f}",
                    f"{row['ours']['inner_s']:.2f}",
                    f"{row['ours']['rss_mib']:.0f}",
                    f"{row['hta']['wall_s']:.2f}" if row.get("hta") else "-",
                    f"{row['hta']['rss_mib']:.0f}" if row.get("hta") else "-",
                )
                for row in big
            ],
        ),
    ]
    if len(big) == 2:
        (small, large) = big
        per_event = (large["ours"]["rss_mib"] - small["ours"]["rss_mib"]) * 2**20 / (large["events"] - small["events"])
        lines += [
            "",
            f"Memory grows by ~{per_event:.0f} bytes per event (the columns), not with the JSON size: the "
            "parser streams the file and keeps no per-event Python object.",
        ]
    return "\n".join(lines) + "\n"


def write_section(text: str, section: str = SECTION) -> None:
    """Replace (or append) one of our sections of docs/benchmarks.md, leaving the other sections alone."""
    DOCS.parent.mkdir(parents=True, exist_ok=True)
    old = DOCS.read_text() if DOCS.exists() else "# Benchmarks\n"
    lines = old.splitlines(keepends=True)
    start = next((i for i, line in enumerate(lines) if line.rstrip() == section), None)
    if start is None:
        new = old.rstrip("\n") + "\n\n" + text
    else:
        end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines))
        new = "".join(lines[:start]) + text + ("\n" + "".join(lines[end:]) if end < len(lines) else "")
    DOCS.write_text(new)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--big-events", type=int, default=1_000_000, help="0: skip the generated traces")
    parser.add_argument(
        "--hta-generated",
        action="store_true",
        help="also run HTA (once) on the smaller generated trace: slow and memory-hungry",
    )
    parser.add_argument(
        "--floor-events",
        default="",
        help="comma-separated event counts: measure those traces against gunzip (and nothing else)",
    )
    parser.add_argument("--write-docs", action="store_true", help=f"update '{SECTION}' in {DOCS}")
    args = parser.parse_args()
    if args.repeats < 1:
        parser.error("--repeats must be >= 1")
    command = ".venv/bin/python benchmarks/bench_trace_analysis.py " + " ".join(sys.argv[1:])
    byte_compile_tree()
    if args.floor_events:
        load_start = os.getloadavg()[0]
        start = start_s()
        with tempfile.TemporaryDirectory() as tmp:
            rows = floor_runs([int(n) for n in args.floor_events.split(",")], args.repeats, Path(tmp))
        text = render_floor(rows, args.repeats, command.strip(), (load_start, os.getloadavg()[0]), start)
        print(text)
        if args.write_docs:
            write_section(text, FLOOR_SECTION)
        return
    load_start = os.getloadavg()[0]
    help_s = cli_start(HELP_REPEATS)
    compare, floor_s = compare_with_hta(args.repeats)
    big = big_trace_runs(args.big_events, args.repeats, args.hta_generated) if args.big_events else []
    text = render(compare, big, args.repeats, command.strip(), help_s, (load_start, os.getloadavg()[0]), floor_s)
    print(text)
    if args.write_docs:
        write_section(text)


if __name__ == "__main__":
    main()
