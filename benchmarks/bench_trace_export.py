"""Writing one profiler cycle's gzipped Chrome trace: torch's own `.gz` export against `write_chrome_trace`.

torch's `export_chrome_trace("….json.gz")` copies its JSON into gzip line by line at level 9; the profiler of a
run writes indexed gzip members (`trace_gzip.write_members`: ~4 MiB of text each, cut at events, compressed by a
few threads) at zlib's default level; `one gzip stream` is how it wrote them before, the JSON copied into one gzip
stream in 1 MiB blocks at the same level. All three write the same kind of profiled cycle (real YOLO11n training
steps on the CPU, a fresh cycle for every write since torch saves a cycle's trace once), interleaved, `--repeats`
times; the table gives the medians, the ratio, the events in the files and their sizes.

    python benchmarks/bench_trace_export.py --steps 3 --repeats 7
"""

from __future__ import annotations

import argparse
import gzip
import json
import shutil
import statistics
import tempfile
from pathlib import Path

import torch
from harness import Samples, Stopwatch, interleave
from torch.profiler import ProfilerActivity, profile

from yolo_mlops.profiling.torch_profiler import write_chrome_trace


def _tensors(out) -> list[torch.Tensor]:
    """The tensors of a model's output, however nested (a training-mode head returns a dict of them)."""
    if isinstance(out, torch.Tensor):
        return [out]
    values = out.values() if isinstance(out, dict) else out if isinstance(out, list | tuple) else []
    return [t for v in values for t in _tensors(v)]


def profiled_cycle(steps: int, imgsz: int, batch: int) -> profile:
    """`steps` forward+backward+optimizer steps of YOLO11n, profiled as a run profiles them (shapes, memory)."""
    from ultralytics.nn.tasks import DetectionModel

    model = DetectionModel("yolo11n.yaml", nc=3, verbose=False)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    images = torch.rand(batch, 3, imgsz, imgsz)
    prof = profile(activities=[ProfilerActivity.CPU], record_shapes=True, profile_memory=True)
    with prof:
        for _ in range(steps):
            loss = torch.stack([t.float().mean() for t in _tensors(model(images))]).sum()
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
    return prof


def write_one_stream(prof: profile, folder: Path) -> Path:
    """The same export as one gzip stream (1 MiB blocks, level 6): how write_chrome_trace wrote it before."""
    plain = folder / "w.1.pt.trace.json"
    prof.export_chrome_trace(str(plain))
    gzipped = plain.with_name(plain.name + ".gz")
    with open(plain, "rb") as source, gzip.open(gzipped, "wb", compresslevel=6) as target:
        shutil.copyfileobj(source, target, 1 << 20)
    plain.unlink()
    return gzipped


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--imgsz", type=int, default=64)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()

    writers = ("torch", "one gzip stream", "write_chrome_trace")
    times: Samples[str] = Samples(writers)
    sizes: dict[str, list[int]] = {name: [] for name in writers}
    events: dict[str, list[int]] = {name: [] for name in writers}
    with tempfile.TemporaryDirectory() as tmp:
        for i, name in interleave(writers, args.repeats, order="rotate"):
            prof = profiled_cycle(args.steps, args.imgsz, args.batch)  # a cycle's trace is saved only once
            folder = Path(tmp) / f"{name}-{i}"
            folder.mkdir()
            with Stopwatch() as watch:
                if name == "torch":
                    path = folder / "w.1.pt.trace.json.gz"
                    prof.export_chrome_trace(str(path))
                elif name == "one gzip stream":
                    path = write_one_stream(prof, folder)
                else:
                    path = write_chrome_trace(prof, folder, "w")
            times.add(name, watch.seconds)
            sizes[name].append(path.stat().st_size)
            events[name].append(len(json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]))
    medians, ratios = times.medians(), times.ratios("torch")
    print(
        f"{args.steps} profiled steps of YOLO11n (imgsz {args.imgsz}, batch {args.batch}, shapes and memory "
        f"recorded), {args.repeats} interleaved repeats, a fresh cycle each, torch {torch.__version__}"
    )
    print("| writer | median s | ratio | median events | median file MB |")
    print("|---|---|---|---|---|")
    for name in times:
        print(
            f"| {name} | {medians[name]:.3f} | {ratios[name]:.2f} | {statistics.median(events[name]):,.0f} | "
            f"{statistics.median(sizes[name]) / 1e6:.2f} |"
        )


if __name__ == "__main__":
    main()
