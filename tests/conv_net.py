"""A small conv net to train under torch.profiler on any device: three 3x3 convolutions (3 -> 32 -> 64 -> 64
channels) with ReLU, global average pooling and a 10-way linear head, for 32x32 images. Its parameters are few and
their bytes exact, so what its optimizer state and gradients hold is known: the memory-by-holder tests
(tests/profiling/test_memory_holders.py) and benchmark (benchmarks/bench_memory_by_holder.py) train it."""

from __future__ import annotations

from torch import nn


def small_conv_net() -> nn.Sequential:
    """The net, freshly initialised from torch's current random state, on the CPU."""
    return nn.Sequential(
        nn.Conv2d(3, 32, 3, padding=1),
        nn.ReLU(),
        nn.Conv2d(32, 64, 3, padding=1),
        nn.ReLU(),
        nn.Conv2d(64, 64, 3, padding=1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(64, 10),
    )
