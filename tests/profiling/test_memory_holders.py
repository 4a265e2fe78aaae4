"""Peak memory by holder from a real torch.profiler window over a small conv model trained on the CPU.

The model's parameter bytes are known exactly (sum of numel * element_size); Adam keeps two moment
buffers per parameter, so its state is about twice the parameter bytes; the gradients of a backward pass
are live around the optimizer step. torch's memory profiler is real here; nothing is faked.
"""

from __future__ import annotations

import gzip
import json

import pytest
import torch
from conv_net import small_conv_net
from torch import nn

from yolo_mlops import names
from yolo_mlops.config import ProfilerSettings
from yolo_mlops.profiling import memory_holders
from yolo_mlops.profiling.torch_profiler import TrainingProfiler

MIB = 2**20


def small_model() -> nn.Module:
    torch.manual_seed(0)
    return small_conv_net()


def param_bytes(model: nn.Module) -> int:
    return sum(p.numel() * p.element_size() for p in model.parameters())


def train_profiled(tmp_path, settings: ProfilerSettings, steps: int = 5):
    """`steps` Adam steps on the CPU under a TrainingProfiler (wait 1, warmup 1, active 3 by default)."""
    model = small_model()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    x, y = torch.randn(8, 3, 32, 32), torch.randint(0, 10, (8,))
    profiler = TrainingProfiler(settings, tmp_path / "profiler", with_cuda=False, device="cpu")
    with profiler:
        for _ in range(steps):
            optimizer.zero_grad(set_to_none=True)
            nn.functional.cross_entropy(model(x), y).backward()
            optimizer.step()
            profiler.step()
    return model, profiler


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    settings = ProfilerSettings(with_stack=True)
    return train_profiled(tmp_path_factory.mktemp("memsplit"), settings)


def test_split_matches_the_model_and_optimizer(recorded):
    model, profiler = recorded
    assert profiler.memory.status == memory_holders.RECORDED
    split = profiler.memory.result
    assert split.device == "cpu"
    held = split.bytes_by_holder
    assert set(held) == set(memory_holders.HOLDERS)
    assert sum(held.values()) == split.peak_total_bytes > 0
    params = param_bytes(model)
    assert held["parameter"] == pytest.approx(params, rel=0.05)
    assert held["optimizer_state"] == pytest.approx(2 * params, rel=0.1)  # Adam: exp_avg and exp_avg_sq
    assert held["gradient"] > 0
    print(
        {h: round(b / MIB, 3) for h, b in held.items()},
        "total",
        round(split.peak_total_bytes / MIB, 3),
        "MiB; param",
        round(params / MIB, 3),
        "MiB; compute",
        round(split.compute_s, 3),
        "s",
    )


def test_timeline_file_is_torchs_layout_and_its_peak_is_the_split(recorded):
    _, profiler = recorded
    path = profiler.trace_dir / names.file_name(names.MEMORY_TIMELINE_GZ)
    with gzip.open(path, "rt") as f:
        times, sizes = json.load(f)
    labels = memory_holders.column_labels()
    assert len(times) == len(sizes) > 1 and all(len(row) == len(labels) for row in sizes)
    totals = [sum(row) for row in sizes]
    split = profiler.memory.result
    assert max(totals) == split.peak_total_bytes
    assert times[totals.index(max(totals))] == split.peak_time_us
    # the timeline is not a trace: the trace folder still lists only the profiler's traces
    assert path not in profiler.trace_files() and len(profiler.trace_files()) == 1


def test_metrics_are_mib_of_each_holder_and_the_total(recorded):
    _, profiler = recorded
    split = profiler.memory.result
    metrics = split.metrics()
    assert metrics[names.MEMORY_PEAK_TOTAL] == split.peak_total_bytes / MIB
    assert metrics[names.memory_peak_metric("parameter")] == split.bytes_by_holder["parameter"] / MIB
    assert len(metrics) == 1 + len(memory_holders.HOLDERS)
    rows = split.rows()
    assert [r[1] for r in rows] == sorted((r[1] for r in rows), reverse=True)
    assert sum(r[2] for r in rows) == pytest.approx(100.0)


def test_without_stacks_nothing_is_measured(tmp_path):
    _, profiler = train_profiled(tmp_path, ProfilerSettings(with_stack=False))
    assert profiler.memory.status == (
        "skipped: needs record_shapes, profile_memory and with_stack (profiler settings; off: with_stack)"
    )
    assert profiler.memory.result is None
    assert not (profiler.trace_dir / names.file_name(names.MEMORY_TIMELINE_GZ)).exists()
    assert len(profiler.trace_files()) == 1  # the trace itself is unaffected


def test_every_missing_switch_is_named():
    assert memory_holders.why_not(True, True, True) is None
    why = memory_holders.why_not(False, False, True)
    assert why is not None and why.endswith("off: record_shapes, profile_memory)")


def test_split_at_peak_reads_the_row_with_most_bytes():
    labels = memory_holders.column_labels()
    width = len(labels)
    low, high = [0] * width, [0] * width
    high[labels.index("parameter")], high[labels.index("activation")] = 100, 50
    low[labels.index("parameter")] = 100
    split = memory_holders.split_at_peak([[10, 20, 30], [low, high, low]], labels, "cpu")
    assert (split.peak_total_bytes, split.peak_time_us) == (150, 20)
    assert split.bytes_by_holder["activation"] == 50 and split.bytes_by_holder["gradient"] == 0


def test_a_layout_torch_no_longer_writes_is_a_layout_error():
    labels = memory_holders.column_labels()
    with pytest.raises(memory_holders.LayoutError, match="columns wide"):
        memory_holders.split_at_peak([[1], [[0] * (len(labels) + 1)]], labels, "cpu")
    with pytest.raises(memory_holders.LayoutError, match="no memory events"):
        memory_holders.split_at_peak([[], []], labels, "cuda:0")


def test_a_failing_export_is_a_one_line_status_not_an_error(tmp_path):
    # a recorder told that stacks are on, given a real profile recorded without them: torch refuses
    with torch.profiler.profile(record_shapes=True, profile_memory=True, with_stack=False) as prof:
        small_model()(torch.randn(2, 3, 16, 16)).sum().backward()
    recorder = memory_holders.MemoryByHolderRecorder(tmp_path, "cpu", True, True, True)
    recorder.record(prof)
    assert recorder.status is not None
    assert recorder.status.startswith("skipped: ValueError: ") and "with_stack" in recorder.status
    assert "\n" not in recorder.status
    assert recorder.result is None


def test_report_section_lists_every_holder_largest_first(recorded):
    _, profiler = recorded
    split = profiler.memory.result
    section = memory_holders.markdown_section(split)
    lines = section.splitlines()
    assert lines[0] == "## Peak memory by holder"
    rows = [line.split(" | ") for line in lines if line.startswith("| ") and not line.startswith("| holder")]
    assert [r[0].strip("| ") for r in rows[:-1]] == [h for h, _, _ in split.rows()]
    assert rows[-1][0] == "| total" and float(rows[-1][1]) == pytest.approx(split.peak_total_bytes / MIB, abs=0.01)
