"""Cost of the peak-memory-by-holder split: torch's memory profile of the first profiler cycle, its
gzipped timeline and the split at the peak (`MemoryByHolder.compute_s`, counted into perf/profiler_export_s).

Two models, interleaved (small, yolo11n, small, yolo11n, ...), each repeat a fresh TrainingProfiler
window (wait 1, warmup 1, active 3; record_shapes, profile_memory, with_stack on) over real training
steps: the small conv net of the memory-by-holder tests (tests/conv_net.py) with Adam, and YOLO11n built from
its yaml (no weights, offline) with SGD momentum, loss = mean of its raw head outputs. Prints medians
and the last split in MiB per holder; `--result` writes them as JSON. On a GPU (`--device 0`) the models
train on cuda:0 with CUDA activities profiled and the split is that device's (benchmarks/gpu_checks.py).

    .venv/bin/python benchmarks/bench_memory_by_holder.py --repeats 3 --imgsz 320 --batch 2
    python3 benchmarks/bench_memory_by_holder.py --device 0 --repeats 1 --imgsz 640 --batch 16 --models yolo11n
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from harness import Samples, Stopwatch, interleave

# torch, the project and the tests' small conv net (tests/conv_net.py) are imported inside the functions:
# benchmarks/gpu_checks.py parses this script's arguments (build_parser) in its own process, with the standard
# library and benchmarks/harness.py only
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
WINDOW = {"wait": 1, "warmup": 1, "active": 3, "with_stack": True}


def small(device):
    import torch
    from conv_net import small_conv_net
    from torch import nn

    model = small_conv_net().to(device)
    x, y = torch.randn(8, 3, 32, 32, device=device), torch.randint(0, 10, (8,), device=device)
    return model, torch.optim.Adam(model.parameters(), lr=1e-3), lambda: nn.functional.cross_entropy(model(x), y)


def yolo11n(device, imgsz: int, batch: int):
    import torch
    from ultralytics.nn.tasks import DetectionModel

    model = DetectionModel("yolo11n.yaml", nc=80, verbose=False).to(device).train()
    x = torch.randn(batch, 3, imgsz, imgsz, device=device)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
    return model, optimizer, lambda: sum(t.float().mean() for t in _tensors(model(x)))


def _tensors(out) -> list:
    """Every tensor of the head's raw training output (a tensor, list or dict, nested)."""
    import torch

    if isinstance(out, torch.Tensor):
        return [out]
    items = out.values() if isinstance(out, dict) else out if isinstance(out, (list, tuple)) else []
    return [t for item in items for t in _tensors(item)]


def window(build, out: Path, device: str) -> tuple[float, float, dict]:
    """(split seconds, total window seconds, MiB by holder) of one profiled window."""
    import torch

    from yolo_mlops.config import ProfilerSettings
    from yolo_mlops.profiling.torch_profiler import TrainingProfiler

    settings = ProfilerSettings.model_validate(WINDOW)
    model, optimizer, loss = build()
    cuda = device != "cpu"
    profiler = TrainingProfiler(settings, out, with_cuda=cuda, device=device)
    with Stopwatch() as watch, profiler:
        for _ in range(settings.window_end_step):
            optimizer.zero_grad(set_to_none=True)
            loss().backward()
            optimizer.step()
            if cuda:
                torch.cuda.synchronize()
            profiler.step()
    took = watch.seconds
    result = profiler.memory.result
    assert result is not None, profiler.memory.status
    return result.compute_s, took, {"device": result.device, **{k: round(v, 2) for k, v in result.metrics().items()}}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--imgsz", type=int, default=320)
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--device", default="cpu", help="cpu, or a CUDA index such as 0")
    parser.add_argument("--models", default="small,yolo11n", help="comma-separated: small, yolo11n")
    parser.add_argument("--result", type=Path, help="write medians and the last split as JSON")
    return parser


def main() -> None:
    import torch

    args = build_parser().parse_args()
    device = "cpu" if args.device == "cpu" else f"cuda:{args.device.removeprefix('cuda:')}"
    if device != "cpu":
        torch.cuda.set_device(torch.device(device))  # the split reads the current CUDA device
    dev = torch.device(device)
    builders = {
        "small": ("small conv + Adam", lambda: small(dev)),
        "yolo11n": (f"yolo11n {args.imgsz}px batch {args.batch} + SGD", lambda: yolo11n(dev, args.imgsz, args.batch)),
    }
    arms = dict(builders[m.strip()] for m in args.models.split(",") if m.strip())
    split: Samples[str] = Samples(arms)
    whole: Samples[str] = Samples(arms)
    last: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for r, name in interleave(arms, args.repeats, order="same"):
            s, w, last[name] = window(arms[name], Path(tmp) / f"{r}_{len(split[name])}_{abs(hash(name))}", device)
            split.add(name, s)
            whole.add(name, w)
    split_median, whole_median = split.medians(), whole.medians()
    summary = {
        name: {
            "split_s_median": split_median[name],
            "split_s": split[name],
            "window_s_median": whole_median[name],
            "last": last[name],
        }
        for name in arms
    }
    if args.result:
        args.result.write_text(json.dumps(summary, indent=2))
    for name in arms:
        runs = [round(s, 3) for s in split[name]]
        print(
            f"{name}: split median {split_median[name]:.3f} s (runs {runs}),"
            f" whole window median {whole_median[name]:.2f} s; {last[name]}"
        )


if __name__ == "__main__":
    main()
