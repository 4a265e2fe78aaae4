"""The analyzer on a real CPU trace, on synthetic traces with known answers, and on bad input."""

from __future__ import annotations

import gzip
import json
import shutil

import pytest

from yolo_mlops.analysis import TraceError, analyze_traces
from yolo_mlops.analysis.host import CUDA_SYNC_CATEGORY, DATA_LOADER_CATEGORY, OPTIMIZER_CATEGORY
from yolo_mlops.cli.analyze import analyze_command
from yolo_mlops.labels import PHASE_LABEL_PREFIX

# ------------------------------------------------------------------------------- real CPU trace


def test_cpu_trace_host_breakdown(cpu_trace_file, cpu_trace_spec):
    phases, active_steps = cpu_trace_spec
    analysis = analyze_traces(cpu_trace_file)
    (rank,) = analysis.ranks
    assert rank.gpu is None and rank.kernel_types == [] and rank.top_kernels == []
    assert rank.step_time is not None and rank.step_time.count == active_steps
    categories = {c.category: c for c in rank.host}
    for phase in phases:
        assert categories[PHASE_LABEL_PREFIX + phase].count == active_steps
    assert categories[DATA_LOADER_CATEGORY].count == active_steps
    assert categories[OPTIMIZER_CATEGORY].count == active_steps
    # The phases are disjoint parts of each step.
    phase_pct = sum(categories[PHASE_LABEL_PREFIX + p].pct for p in phases)
    assert 0 < phase_pct <= 100.0
    # The data loader runs inside the data_wait label.
    assert categories[DATA_LOADER_CATEGORY].time_us <= categories[PHASE_LABEL_PREFIX + "data_wait"].time_us
    for step in rank.steps:
        assert sum(step.host_us[PHASE_LABEL_PREFIX + p] for p in phases) <= step.duration_us
        assert step.gpu is None
    assert rank.memory is not None and rank.memory.device == "cpu"
    assert rank.memory.peak_allocated_bytes > 0
    # Which operators lead depends on the machine's load (a preempted aten::mean can outlast a tiny conv), so
    # the ranking is checked against the trace's own cpu_op events, summed here independently.
    with gzip.open(cpu_trace_file, "rt") as fh:
        events = json.load(fh)["traceEvents"]
    totals: dict[str, float] = {}
    counts: dict[str, int] = {}
    for e in events:
        if e.get("ph") == "X" and e.get("cat") == "cpu_op":
            totals[e["name"]] = totals.get(e["name"], 0.0) + float(e["dur"])
            counts[e["name"]] = counts.get(e["name"], 0) + 1
    expected_times = sorted(totals.values(), reverse=True)[: len(rank.top_host_ops)]
    assert len(rank.top_host_ops) == min(10, len(totals))
    assert [op.time_us for op in rank.top_host_ops] == pytest.approx(expected_times)
    for op in rank.top_host_ops:
        assert op.time_us == pytest.approx(totals[op.name]) and op.count == counts[op.name]
    # every active step ran the convolution forward once
    assert counts["aten::conv2d"] == active_steps


def test_cpu_trace_json_has_null_gpu(cpu_trace_dir):
    doc = json.loads(analyze_command(str(cpu_trace_dir), fmt="json"))
    assert doc["ranks"][0]["gpu"] is None
    assert doc["ranks"][0]["kernel_types"] == []
    assert doc["spread"] is None


def test_cpu_trace_text(cpu_trace_file):
    text = analyze_command(str(cpu_trace_file), fmt="text")
    assert "gpu: none (CPU-only trace)" in text
    assert PHASE_LABEL_PREFIX + "forward_loss" in text


def test_unknown_format_is_rejected(cpu_trace_file):
    with pytest.raises(ValueError, match="format"):
        analyze_command(str(cpu_trace_file), fmt="yaml")


# ------------------------------------------------------------------------- synthetic, known answer


def _two_step_gpu_trace(builder, rank=None, step_us=1000.0, sync=False):
    """Two 1 ms steps (plus a third, which HTA-style windowing drops from the GPU totals)."""
    b = builder(rank)
    for i in range(3):
        t0 = i * step_us
        b.step(i, t0, step_us)
        b.host("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", t0 + 10, 200)
        b.host(PHASE_LABEL_PREFIX + "forward_loss", t0 + 300, 300)
        b.host("Optimizer.step#SGD.step", t0 + 700, 100)
        if sync:
            b.host("cudaStreamSynchronize", t0 + 850, 50, cat="cuda_runtime")
        # compute kernel 400 us, then a memcpy 100 us, 100 us gap between them, launched in time
        b.kernel("volta_sgemm_128x64_nn", launch=t0 + 310, start=t0 + 320, dur=400)
        b.kernel("Memcpy DtoH (Device -> Pageable)", launch=t0 + 400, start=t0 + 820, dur=100)
    return b


def test_synthetic_gpu_trace_known_numbers(tmp_path, trace_builder):
    path = _two_step_gpu_trace(trace_builder, rank=0).write(tmp_path / "t.json")
    (rank,) = analyze_traces(path).ranks
    # GPU window = steps 0 and 1: kernels 320..720, 820..920, 1320..1720, 1820..1920 -> span 1600
    assert rank.gpu is not None
    assert rank.gpu.kernel_time_us == 1600
    assert rank.gpu.compute_time_us == 800
    assert rank.gpu.non_compute_time_us == 200
    assert rank.gpu.idle_time_us == 600
    assert rank.gpu.idle_pct == pytest.approx(37.5)
    assert {k.kernel_type: k.pct for k in rank.kernel_types} == {"COMPUTATION": 80.0, "MEMORY": 20.0}
    host = {c.category: c for c in rank.host}
    assert host[DATA_LOADER_CATEGORY].pct == pytest.approx(20.0)
    assert host[PHASE_LABEL_PREFIX + "forward_loss"].pct == pytest.approx(30.0)
    assert host[OPTIMIZER_CATEGORY].pct == pytest.approx(10.0)
    assert CUDA_SYNC_CATEGORY not in host
    # per step: each step's own kernels, 320..920 -> 600 span, 100 idle
    assert [s.gpu and s.gpu.idle_time_us for s in rank.steps] == [100, 100, 100]
    assert rank.device_name == "Test GPU"


def test_sync_calls_are_counted(tmp_path, trace_builder):
    path = _two_step_gpu_trace(trace_builder, sync=True).write(tmp_path / "t.json.gz")
    host = {c.category: c for c in analyze_traces(path).ranks[0].host}
    assert host[CUDA_SYNC_CATEGORY].count == 3
    assert host[CUDA_SYNC_CATEGORY].pct == pytest.approx(5.0)


def test_ranks_from_distributed_info_and_spread(tmp_path, trace_builder):
    # File order is the reverse of rank order: the rank must come from distributedInfo.
    _two_step_gpu_trace(trace_builder, rank=1, step_us=1500.0).write(tmp_path / "a.pt.trace.json.gz")
    _two_step_gpu_trace(trace_builder, rank=0, step_us=1000.0).write(tmp_path / "b.pt.trace.json.gz")
    (tmp_path / "notes.txt").write_text("not a trace")
    analysis = analyze_traces(tmp_path)
    assert [r.rank for r in analysis.ranks] == [0, 1]
    assert analysis.spread is not None
    assert analysis.spread.slowest_rank == 1
    assert analysis.spread.spread_us == pytest.approx(500.0)
    assert analysis.spread.spread_pct == pytest.approx(50.0)
    assert "slowest rank 1" in analyze_command(str(tmp_path))


def test_rank_from_metadata_written_after_the_events(tmp_path, trace_builder):
    doc = _two_step_gpu_trace(trace_builder, rank=3).document()
    reordered = {"traceEvents": doc.pop("traceEvents"), **doc}
    path = tmp_path / "late_meta.json"
    path.write_text(json.dumps(reordered))
    assert analyze_traces(path).ranks[0].rank == 3


def test_ranks_from_file_order_without_distributed_info(tmp_path, trace_builder):
    _two_step_gpu_trace(trace_builder, step_us=2000.0).write(tmp_path / "a.json")
    _two_step_gpu_trace(trace_builder, step_us=1000.0).write(tmp_path / "b.json")
    analysis = analyze_traces(tmp_path)
    assert [(r.rank, r.step_time and r.step_time.mean_us) for r in analysis.ranks] == [(0, 2000.0), (1, 1000.0)]


def test_duplicate_rank_is_an_error(tmp_path, trace_builder):
    _two_step_gpu_trace(trace_builder, rank=0).write(tmp_path / "a.json")
    _two_step_gpu_trace(trace_builder, rank=0).write(tmp_path / "b.json")
    with pytest.raises(TraceError, match="two traces for rank 0"):
        analyze_traces(tmp_path)


def test_memory_growth_is_flagged(tmp_path, trace_builder):
    b = trace_builder(0)
    for i in range(4):
        b.step(i, i * 1000.0, 1000.0)
        b.memory(i * 1000.0 + 500, allocated=(1 + i) * 2**30, reserved=8 * 2**30)
    (rank,) = analyze_traces(b.write(tmp_path / "t.json")).ranks
    assert rank.memory is not None
    assert rank.memory.device == "cuda"
    assert rank.memory.step_peak_allocated_bytes == [float(2**30 * k) for k in (1, 2, 3, 4)]
    assert rank.memory.growth_bytes_per_step == pytest.approx(2**30)
    assert rank.memory.steadily_rising
    assert rank.steps[3].peak_reserved_bytes == 8 * 2**30


def test_flat_memory_is_not_flagged(tmp_path, trace_builder):
    b = trace_builder(0)
    for i in range(4):
        b.step(i, i * 1000.0, 1000.0)
        b.memory(i * 1000.0 + 500, allocated=2**30 + (i % 2) * 2**20, reserved=2 * 2**30)
    (rank,) = analyze_traces(b.write(tmp_path / "t.json")).ranks
    assert rank.memory is not None
    assert not rank.memory.steadily_rising


# ------------------------------------------------------------------------------------ bad input


def test_truncated_gzip(tmp_path, cpu_trace_file):
    data = cpu_trace_file.read_bytes()
    bad = tmp_path / "cut.json.gz"
    bad.write_bytes(data[: len(data) // 2])
    with pytest.raises(TraceError, match="cut.json.gz"):
        analyze_traces(bad)


def test_corrupt_gzip(tmp_path):
    bad = tmp_path / "corrupt.json.gz"
    bad.write_bytes(b"\x1f\x8b\x08\x00" + b"garbage" * 50)
    with pytest.raises(TraceError, match="corrupt.json.gz"):
        analyze_traces(bad)


def test_truncated_plain_json(tmp_path, trace_builder):
    text = json.dumps(_two_step_gpu_trace(trace_builder).document())
    bad = tmp_path / "cut.json"
    bad.write_text(text[: len(text) - 40])
    with pytest.raises(TraceError, match="cut.json"):
        analyze_traces(bad)


@pytest.mark.parametrize(
    "content, message",
    [
        (b"", "empty"),
        (b'{"traceEvents": []}', "empty trace"),
        (b'{"schemaVersion": 1, "rows": [1, 2]}', "not a Kineto trace"),
        (b"[1, 2, 3]", "not a Kineto trace"),
        (b'{"traceEvents": [{"ph": "M", "name": "process_name"}]}', "not a Kineto trace"),
    ],
)
def test_not_a_usable_trace(tmp_path, content, message):
    path = tmp_path / "x.json"
    path.write_bytes(content)
    with pytest.raises(TraceError, match=message) as err:
        analyze_traces(path)
    assert "x.json" in str(err.value) and "\n" not in str(err.value)
    assert isinstance(err.value, ValueError)


def test_directory_without_traces(tmp_path):
    (tmp_path / "readme.md").write_text("nothing here")
    with pytest.raises(TraceError, match="no trace files"):
        analyze_traces(tmp_path)


def test_missing_path(tmp_path):
    with pytest.raises(TraceError, match="nope"):
        analyze_traces(tmp_path / "nope.json")


def test_gzip_and_plain_json_agree(tmp_path, cpu_trace_file):
    plain = tmp_path / "plain.json"
    with gzip.open(cpu_trace_file, "rb") as src, open(plain, "wb") as dst:
        shutil.copyfileobj(src, dst)
    a, b = analyze_traces(cpu_trace_file).ranks[0], analyze_traces(plain).ranks[0]
    assert a.step_time == b.step_time and a.host == b.host


# ----------------------------------------------------------------------------- parser paths


def _columns_equal(a, b) -> None:
    for column in ("ts", "dur", "stream", "correlation", "name_id", "cat_id", "pid_id"):
        assert list(a._final(column)) == list(b._final(column)), column
    assert a.names.values == b.names.values
    assert a.pids.values == b.pids.values
    assert list(a._final("mem_allocated")) == list(b._final("mem_allocated"))
    assert a.seen_events == b.seen_events


def test_chunked_decoder_matches_streaming_parser(cpu_trace_file, gpu_traces_dir):
    """The fast msgspec path and the ijson fallback read the same columns from real traces."""
    from yolo_mlops.analysis.loading import formats
    from yolo_mlops.analysis.loading.columns import ColumnBuilder
    from yolo_mlops.analysis.loading.ijson_stream import stream_events_ijson
    from yolo_mlops.analysis.loading.msgspec_chunks import decode_events_chunked

    for path in (cpu_trace_file, gpu_traces_dir / "small_comm_rank0.json.gz"):
        fast = ColumnBuilder()
        with formats.open_binary(path) as fh:
            assert decode_events_chunked(formats.read_blocks(fh), fast)
        slow = ColumnBuilder()
        with formats.open_binary(path) as fh:
            stream_events_ijson(fh, slow, formats.READ_BUFFER_BYTES)
        _columns_equal(fast, slow)


@pytest.mark.parametrize("layout", ["compact", "indented", "spaced", "odd_value"])
def test_any_json_layout_gives_the_same_analysis(tmp_path, trace_builder, layout, monkeypatch):
    """Layouts the chunked decoder does not cut (or values it rejects) fall back to ijson."""
    from yolo_mlops.analysis.loading import backends, formats

    monkeypatch.setattr(formats, "READ_BUFFER_BYTES", 512)  # many blocks even for a small trace
    monkeypatch.setattr(formats, "METADATA_HEAD_BYTES", 512)  # the head is the first block
    doc = _two_step_gpu_trace(trace_builder, rank=0).document()
    reference = analyze_traces(_two_step_gpu_trace(trace_builder, rank=0).write(tmp_path / "ref.json"))
    if layout == "compact":
        text = json.dumps(doc, separators=(",", ":"))
    elif layout == "indented":
        text = json.dumps(doc, indent=3)
    elif layout == "spaced":
        text = json.dumps(doc).replace("},", "}\n ,")  # no "}," anywhere: never cut
    else:
        doc["traceEvents"].append({"ph": "X", "name": "weird", "ts": "12", "dur": "x", "args": [1]})
        text = json.dumps(doc)
    path = tmp_path / f"{layout}.json"
    path.write_text(text)
    fallbacks: list[int] = []
    streaming = backends.stream_events_ijson

    def counted_streaming(*args):
        fallbacks.append(1)
        return streaming(*args)

    monkeypatch.setattr(backends, "stream_events_ijson", counted_streaming)
    result = analyze_traces(path).ranks[0]
    assert bool(fallbacks) == (layout == "odd_value")  # a string ts is a type the fast decoder rejects
    assert result.gpu == reference.ranks[0].gpu
    assert result.host == reference.ranks[0].host
    assert result.step_time == reference.ranks[0].step_time


# ------------------------------------------------------------------------------ interval helpers


def test_rounding_and_merging():
    import numpy as np

    from yolo_mlops.analysis.gpu import hta_rounded_interval, kernel_type, merge_intervals

    start, end = hta_rounded_interval(np.array([10.2, 20.0, 30.3]), np.array([5.5, 3.0, 0.5]))
    assert start.tolist() == [11.0, 20.0, 31.0]
    assert end.tolist() == [15.0, 23.0, 31.0]  # 30.3 + 0.5 rounds to end < start: clamped to 0 length
    s, e = merge_intervals(np.array([5.0, 0.0, 10.0, 2.0, 12.0]), np.array([10.0, 3.0, 11.0, 4.0, 13.0]))
    # [0,3]+[2,4] overlap; [5,10] and [10,11] touch (merged, as HTA does); [12,13] stays apart
    assert s.tolist() == [0.0, 5.0, 12.0] and e.tolist() == [4.0, 11.0, 13.0]
    assert kernel_type("ncclDevKernel_AllGather_RING_LL(ncclDevComm*)") == "COMMUNICATION"
    assert kernel_type("Memcpy HtoD (Pinned -> Device)") == "MEMORY"
    assert kernel_type("void at::native::vectorized_elementwise_kernel<4>") == "COMPUTATION"
    assert kernel_type("cudaStreamSync") == "OTHER"


def test_merging_intervals_in_order_or_not_gives_the_same_union():
    # input already in order is read where it lies, any other is sorted first: both must give the one union
    import numpy as np

    from yolo_mlops.analysis.gpu import merge_intervals

    rng = np.random.default_rng(3)
    start = np.round(np.sort(rng.uniform(0, 1000, 500)))  # rounded: ties and touching intervals
    end = start + np.round(rng.uniform(0, 8, 500))
    in_order = merge_intervals(start, end)
    shuffled = rng.permutation(500)
    sorted_first = merge_intervals(start[shuffled], end[shuffled])
    assert np.array_equal(in_order[0], sorted_first[0]) and np.array_equal(in_order[1], sorted_first[1])
    assert np.all(in_order[0][1:] > in_order[1][:-1])  # disjoint, not touching
    assert np.isclose(
        (in_order[1] - in_order[0]).sum(),
        len(set().union(*(range(int(a), int(b)) for a, b in zip(start, end, strict=True)))),
    )


def _random_activities(seed: int, count: int = 3000, ties: bool = True):
    """Activities of every kernel type on a few streams, rounded to whole microseconds: overlaps, ties,
    touching intervals and some unknown launches."""
    import numpy as np

    from yolo_mlops.analysis.gpu import KERNEL_TYPES, GpuActivities

    rng = np.random.default_rng(seed)
    start = np.sort(rng.uniform(0, 20 * count, count))
    start = np.round(start) if ties else start
    end = start + np.round(rng.exponential(12, count))
    launch = start - np.round(rng.uniform(1, 40, count))
    launch[rng.random(count) < 0.05] = np.nan
    return GpuActivities(
        start=start,
        end=end,
        stream=rng.integers(0, 3, count).astype(np.int8),
        name_id=rng.integers(0, 50, count).astype(np.int16),
        type_code=rng.integers(0, len(KERNEL_TYPES), count).astype(np.int8),
        launch_ts=launch,
    )


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_kernel_type_breakdown_is_the_sweep_over_sorted_deltas_exactly(monkeypatch, seed):
    """The breakdown searches each type's union, a chunk at a time; the plain sweep (every boundary a +bit or
    -bit, stably sorted, summed by bincount) must give the same floats to the last bit."""
    import numpy as np

    from yolo_mlops.analysis import gpu

    monkeypatch.setattr(gpu, "CHUNK_ELEMENTS", 256)  # many chunks, and boundaries of a tie split between them
    acts = _random_activities(seed)
    merged = [
        gpu.merge_intervals(acts.start[acts.of_type(k)], acts.end[acts.of_type(k)]) for k in gpu.BREAKDOWN_KERNEL_TYPES
    ]
    time = np.concatenate([v for pair in merged for v in pair])
    delta = np.concatenate(
        [np.full(v.size, sign << bit) for bit, (s, e) in enumerate(merged) for v, sign in ((s, 1), (e, -1))]
    )
    order = np.argsort(time, kind="stable")
    totals = np.bincount(np.cumsum(delta[order])[:-1], weights=np.diff(time[order]), minlength=8)
    expected = {gpu._overlap_label(bits): float(t) for bits, t in enumerate(totals) if bits > 0 and t > 0}
    assert {row.kernel_type: row.time_us for row in gpu.kernel_type_breakdown(acts)} == expected
    assert any(" overlapping " in label for label in expected)  # the data has overlaps of types


@pytest.mark.parametrize("ties", [True, False])
def test_the_launch_that_ends_a_gap_is_the_earliest_of_those_starting_then(monkeypatch, ties):
    import numpy as np

    from yolo_mlops.analysis import idle_attribution
    from yolo_mlops.analysis.gpu import merge_intervals

    monkeypatch.setattr(idle_attribution, "CHUNK_ELEMENTS", 100)
    acts = _random_activities(4, ties=ties)
    busy_s, busy_e = merge_intervals(acts.start, acts.end)
    gap_s, gap_e = busy_e[:-1], busy_s[1:]
    order = np.lexsort((acts.launch_ts, acts.start))  # by start, then launch, an unknown (NaN) launch last
    expected = acts.launch_ts[order[np.searchsorted(acts.start[order], gap_e, side="left")]] > gap_s
    assert np.array_equal(idle_attribution._launched_within(acts, gap_s, gap_e), expected)
    assert expected.any() and not expected.all()


def test_steps_of_timestamps_a_chunk_at_a_time(monkeypatch):
    import numpy as np

    from yolo_mlops.analysis import host

    monkeypatch.setattr(host, "CHUNK_ELEMENTS", 7)
    steps = host.Steps(number=np.arange(3), start=np.array([10.0, 20.0, 35.0]), end=np.array([20.0, 30.0, 40.0]))
    ts = np.array([5.0, 10.0, 19.9, 20.0, 29.0, 30.0, 33.0, 35.0, 39.9, 40.0, 41.0, np.nan] * 3)
    assert steps.index_of(ts).tolist() == [-1, 0, 0, 1, 1, -1, -1, 2, 2, -1, -1, -1] * 3


def test_id_mask_is_isin():
    import numpy as np

    from yolo_mlops.analysis.trace_loader import id_mask

    ids = np.random.default_rng(7).integers(0, 300, 5000).astype(np.int16)
    for wanted in ([], [0], [5, 77, 299], {3: "a dict's keys", 9: ""}, np.array([1, 2]), range(300)):
        assert np.array_equal(id_mask(ids, wanted, 300), np.isin(ids, list(wanted)))
    assert id_mask(np.zeros(0, dtype=np.int8), [1], 4).shape == (0,)


@pytest.mark.parametrize("seed", [0, 1])
def test_gap_and_duration_sums_a_chunk_at_a_time_are_the_plain_sums_exactly(monkeypatch, seed):
    """The idle breakdown, the kernel name shares and the top kernels fill their selections a chunk at a time;
    the plain computations (every gap or duration at once, masked, summed; bincount) give the same floats."""
    import numpy as np

    from yolo_mlops.analysis import gpu

    monkeypatch.setattr(gpu, "CHUNK_ELEMENTS", 97)  # many chunks, cut anywhere
    acts = _random_activities(seed, ties=False)
    rows = {(r.stream, r.idle_category): r.idle_time_us for r in gpu.idle_breakdown(acts)}
    for stream in np.unique(acts.stream):
        on = acts.stream == stream
        start, end, launch = acts.start[on], acts.end[on], acts.launch_ts[on]
        gap = start[1:] - end[:-1]
        host_wait = launch[1:] > end[:-1]
        kernel_wait = ~host_wait & (gap < gpu.KERNEL_WAIT_THRESHOLD_US)
        other = ~host_wait & ~kernel_wait
        for category, mask in zip(gpu.IDLE_CATEGORIES, (host_wait, kernel_wait, other), strict=True):
            assert rows[(int(stream), category)] == float(gap[mask].sum())
    names = [f"kernel_{i}" + ("_bf16" if i % 3 == 0 else "") for i in range(50)]
    durations = acts.end - acts.start
    hit = np.isin(acts.name_id, [i for i, n in enumerate(names) if "bf16" in n])
    expected_pct = 100.0 * float(durations[hit].sum()) / float(durations.sum())
    assert gpu.kernel_time_share_pct(acts, names, gpu.is_reduced_precision_kernel) == expected_pct
    totals = np.bincount(acts.name_id, weights=durations, minlength=len(names))
    counts = np.bincount(acts.name_id, minlength=len(names))
    assert [(k.name, k.time_us, k.count) for k in gpu.top_kernels(acts, names)] == [
        (names[i], float(totals[i]), int(counts[i])) for i in np.argsort(-totals, kind="stable")[: gpu.TOP_KERNELS]
    ]


def test_memory_peaks_per_step_a_chunk_at_a_time(monkeypatch):
    import numpy as np

    from yolo_mlops.analysis import host, memory

    monkeypatch.setattr(memory, "CHUNK_ELEMENTS", 5)
    steps = host.Steps(number=np.arange(3), start=np.array([0.0, 10.0, 20.0]), end=np.array([10.0, 20.0, 25.0]))
    ts = np.arange(0.0, 30.0, 0.5)
    values = np.random.default_rng(1).uniform(0, 1e9, ts.size)
    values[::7] = np.nan
    step = steps.index_of(ts)
    expected = [float(np.nanmax(values[step == i])) for i in range(3)]
    assert memory._peak_per_step(steps, ts, values) == expected


def test_step_summaries_of_activities_launched_out_of_step_order_are_the_same():
    """Activities launched in step order are grouped by slices, others by a stable sort: the same groups."""
    import numpy as np

    from yolo_mlops.analysis import host
    from yolo_mlops.analysis.trace_analysis import _step_summaries

    acts = _random_activities(6)
    steps = host.Steps(
        number=np.arange(4),
        start=np.array([0.0, 15000.0, 30000.0, 45000.0]),
        end=np.array([15000.0, 30000.0, 45000.0, 59000.0]),
    )
    category_times = {"cpu_op": np.zeros((2, 4))}
    by_step = np.argsort(steps.index_of(acts.launch_ts), kind="stable")  # launched in step order
    in_order = _step_summaries(acts.subset(by_step), steps, category_times, None)
    shuffled = _step_summaries(
        acts.subset(np.random.default_rng(0).permutation(acts.count)), steps, category_times, None
    )
    assert in_order == shuffled and all(s.gpu is not None for s in in_order)


def test_the_window_made_in_place_is_the_window():
    import numpy as np

    from yolo_mlops.analysis.gpu import keep_launched_before, launched_before

    acts = _random_activities(5)
    window = launched_before(acts, 30000.0)
    in_place = keep_launched_before(acts, 30000.0)
    for field in window.__dataclass_fields__:
        assert np.array_equal(getattr(window, field), getattr(in_place, field), equal_nan=True), field


def test_one_jump_is_not_steady_growth():
    from yolo_mlops.analysis.memory import growth_trend

    mib = 2**20
    # a clean real CPU run whose last profiled step spanned an epoch boundary
    assert growth_trend([57.0 * mib, 57.2 * mib, 73.5 * mib])[1] is False
    # a tensor kept alive every step
    assert growth_trend([16.4 * mib, 32.6 * mib, 57.3 * mib])[1] is True


def test_a_value_out_of_range_is_a_trace_error_naming_the_file(tmp_path):
    events = [
        {"ph": "X", "name": "ProfilerStep#1", "ts": 0, "dur": 100, "pid": 1, "tid": 1, "cat": "user_annotation"},
        {
            "ph": "X",
            "name": "k",
            "ts": 10,
            "dur": 10,
            "pid": 0,
            "tid": 7,
            "cat": "kernel",
            "args": {"stream": 2**40, "correlation": 1, "device": 0},
        },
    ]
    path = tmp_path / "huge_stream.json"
    path.write_text(json.dumps({"traceEvents": events}))
    with pytest.raises(TraceError, match="huge_stream.json: a value out of range"):
        analyze_traces(path)


@pytest.mark.parametrize("small_batches", [False, True])
def test_integer_columns_are_as_narrow_as_their_values_and_keep_every_value(tmp_path, monkeypatch, small_batches):
    import numpy as np

    from yolo_mlops.analysis.loading import formats
    from yolo_mlops.analysis.trace_loader import load_trace_file

    if small_batches:  # columns widen while read: the first batches fit int8, later ones need int16 and int64
        monkeypatch.setattr(formats, "READ_BUFFER_BYTES", 512)

    def kernel(i: int, correlation: int) -> dict:
        args = {"stream": 7, "correlation": correlation}
        return {"ph": "X", "name": f"k{i}", "ts": 10 + i, "dur": 1, "pid": 0, "tid": 7, "cat": "kernel", "args": args}

    # 200 names (int16), one category, pid and thread (int8), streams -1 and 7 (int8), correlations past int32
    events = [{"ph": "X", "name": "ProfilerStep#1", "ts": 0, "dur": 500, "pid": 1, "tid": 1, "cat": "cpu_op"}]
    events += [kernel(i, 2**40 + i if i % 2 else i) for i in range(199)]
    path = tmp_path / "wide.json"
    path.write_text(json.dumps({"traceEvents": events}))
    trace = load_trace_file(path)
    assert (trace.name_id.dtype, trace.stream.dtype, trace.tid_id.dtype) == (np.int16, np.int8, np.int8)
    assert trace.correlation.dtype == np.int64
    assert trace.correlation.tolist() == [-1] + [2**40 + i if i % 2 else i for i in range(199)]
    assert trace.stream.tolist() == [-1] + [7] * 199
    assert [trace.names[i] for i in trace.name_id] == ["ProfilerStep#1"] + [f"k{i}" for i in range(199)]


def test_a_trace_without_steps_has_no_per_step_idle_figures(tmp_path):
    events = [
        {
            "ph": "X",
            "name": "aten::mm",
            "ts": 0,
            "dur": 50,
            "pid": 1,
            "tid": 1,
            "cat": "cpu_op",
            "args": {"correlation": 1},
        },
        {
            "ph": "X",
            "name": "k1",
            "ts": 10,
            "dur": 10,
            "pid": 0,
            "tid": 7,
            "cat": "kernel",
            "args": {"stream": 7, "correlation": 1, "device": 0},
        },
        {
            "ph": "X",
            "name": "k2",
            "ts": 40,
            "dur": 10,
            "pid": 0,
            "tid": 7,
            "cat": "kernel",
            "args": {"stream": 7, "correlation": 2, "device": 0},
        },
    ]
    path = tmp_path / "no_steps.json"
    path.write_text(json.dumps({"traceEvents": events}))
    rank = analyze_traces(path).ranks[0]
    assert rank.window_steps == 0
    assert rank.gpu_idle_by_cause and all(c.ms_per_step is None and c.step_pct is None for c in rank.gpu_idle_by_cause)
