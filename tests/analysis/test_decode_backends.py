"""The trace decoders as named choices (`DecodeBackend`): each reads the same columns from real traces, a named one
is used alone (no fallback, no parallel reader), and each refuses unusable input in a TraceError naming the file."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

from yolo_mlops.analysis.trace_loader import DecodeBackend, RankTrace, TraceError, load_trace_file

sys.path.insert(0, str(Path(__file__).resolve().parent))
from parallel_reading import as_members, force_parallel_reading  # noqa: E402

COLUMNS = ("name_id", "cat_id", "pid_id", "tid_id", "ts", "dur", "stream", "correlation")


def _same(a: RankTrace, b: RankTrace) -> None:
    for column in COLUMNS:
        assert getattr(a, column).dtype == getattr(b, column).dtype, column
        assert np.array_equal(getattr(a, column), getattr(b, column)), column
    assert (a.names, a.categories, a.pids, a.tids) == (b.names, b.categories, b.pids, b.tids)
    assert a.collective_records == b.collective_records
    assert (a.rank, a.backend, a.world_size, a.device_properties) == (
        b.rank,
        b.backend,
        b.world_size,
        b.device_properties,
    )
    for column in ("ts", "device_type", "total_allocated", "total_reserved"):
        assert np.array_equal(getattr(a.memory, column), getattr(b.memory, column), equal_nan=True), column


def test_backends_are_named_choices():
    assert [b.value for b in DecodeBackend] == ["msgspec-chunked", "ijson-streaming", "json"]
    assert DecodeBackend("ijson-streaming") is DecodeBackend.IJSON_STREAMING


@pytest.mark.parametrize("backend", list(DecodeBackend))
def test_every_backend_reads_what_the_default_reads(backend, cpu_trace_file, gpu_traces_dir):
    for path in (
        cpu_trace_file,
        gpu_traces_dir / "small_comm_rank0.json.gz",
        gpu_traces_dir / "a100_nccl_rank0.json.gz",
    ):
        _same(load_trace_file(path, backend=backend), load_trace_file(path))


def test_a_value_the_block_decoder_rejects_is_refused_by_it_named_and_read_by_default(tmp_path):
    events = [{"ph": "X", "name": "op", "ts": 0, "dur": 5, "pid": 1, "tid": 1, "cat": "cpu_op"}] * 3
    events.append({"ph": "X", "name": "odd", "ts": "12", "dur": "x", "args": [1]})  # types the typed decode rejects
    path = tmp_path / "odd.json"
    path.write_text(json.dumps({"traceEvents": events}))
    with pytest.raises(TraceError, match=r"odd.json: .*the msgspec-chunked decoder"):
        load_trace_file(path, backend=DecodeBackend.MSGSPEC_CHUNKED)
    assert load_trace_file(path).event_count == 3
    assert load_trace_file(path, backend=DecodeBackend.IJSON_STREAMING).event_count == 3


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "empty file"),
        ("[1, 2]", "not a Kineto trace (top level is not a JSON object)"),
        ('{"traceEvents": [{"ph": "X", "ts": 1, ', "invalid or truncated JSON"),
        ('{"traceEvents": []}', "empty trace (traceEvents has no events)"),
        ('{"other": 1}', "not a Kineto trace (no traceEvents)"),
    ],
)
@pytest.mark.parametrize("backend", list(DecodeBackend))
def test_every_backend_refuses_unusable_input_naming_the_file(tmp_path, backend, text, message):
    path = tmp_path / "bad.json"
    path.write_text(text)
    if backend is DecodeBackend.MSGSPEC_CHUNKED and "truncated" in message:
        message = "the msgspec-chunked decoder"  # named alone, it tells a cut it cannot make from a broken file
    with pytest.raises(TraceError, match="bad.json: ") as raised:
        load_trace_file(path, backend=backend)
    assert message in str(raised.value)


@pytest.mark.parametrize("backend", [DecodeBackend.IJSON_STREAMING, DecodeBackend.JSON])
def test_only_the_block_decoder_reads_members_in_parallel(tmp_path, monkeypatch, cpu_trace_file, backend):
    path = as_members(cpu_trace_file, tmp_path / "members.json.gz", member_bytes=32 << 10)
    started = force_parallel_reading(monkeypatch)
    _same(load_trace_file(path, backend=backend), load_trace_file(path))
    assert len(started) == 2  # the default read it in parallel; the named backend, alone
