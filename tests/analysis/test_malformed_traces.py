"""Malformed traces are named, not analyzed as if sound: ambiguous steps are refused in one line (exit 2), and
what can be left out (an event with a negative duration, a phase label outside every step) is left out with a
warning printed and kept in the result. Damaged indexed multi-member files (truncated, half-written, a corrupt
member, concatenated) are read or refused as the one-process reader reads or refuses them."""

from __future__ import annotations

import io
import json
import os
import sys
from pathlib import Path

import pytest

from yolo_mlops import cli
from yolo_mlops.analysis import analyze_traces
from yolo_mlops.analysis.loading import columns
from yolo_mlops.analysis.loading import parallel as parallel_reader
from yolo_mlops.profiling import trace_gzip

sys.path.insert(0, str(Path(__file__).resolve().parent))
from parallel_reading import as_members, force_parallel_reading  # noqa: E402
from trace_golden_gen import trace_text  # noqa: E402


def _trace(path: Path, steps: list[tuple[int, float]], extra: list[dict] | None = None) -> Path:
    """ProfilerStep#n spans of 10 ms at the given start (us), each with a 4 ms backward label and an operator."""
    events = []
    for number, start in steps:
        events.append(
            {
                "ph": "X",
                "cat": "user_annotation",
                "name": f"ProfilerStep#{number}",
                "pid": 1,
                "tid": 1,
                "ts": start,
                "dur": 10_000.0,
            }
        )
        events.append(
            {
                "ph": "X",
                "cat": "user_annotation",
                "name": "yolo_mlops/backward",
                "pid": 1,
                "tid": 1,
                "ts": start + 1_000,
                "dur": 4_000.0,
            }
        )
        events.append(
            {
                "ph": "X",
                "cat": "cpu_op",
                "name": "aten::conv2d",
                "pid": 1,
                "tid": 1,
                "ts": start + 1_500,
                "dur": 2_000.0,
            }
        )
    path.write_text(json.dumps({"traceEvents": events + (extra or [])}))
    return path


def _analyze(capsys, path: Path) -> tuple[int, str, str]:
    code = cli.main(["analyze", str(path)])
    captured = capsys.readouterr()
    return code, captured.out, captured.err.strip()


@pytest.mark.parametrize(
    "steps, fragment",
    [
        (
            [(1, 0.0), (1, 20_000.0), (2, 40_000.0)],
            "ProfilerStep#1 appears twice, at 0 and 20000 us (a duplicate step id)",
        ),
        (
            [(2, 0.0), (1, 20_000.0)],
            "ProfilerStep#1 at 20000 us starts after ProfilerStep#2 (step ids out of time order)",
        ),
    ],
)
def test_ambiguous_steps_are_refused_in_one_line(tmp_path, capsys, steps, fragment):
    code, out, err = _analyze(capsys, _trace(tmp_path / "t.json", steps))
    assert code == 2 and fragment in err and len(err.splitlines()) == 1 and not out


def test_a_step_recorded_twice_as_one_span_is_one_step(tmp_path):
    """torch may record a step as a cpu_op and a user_annotation over the same span: not a duplicate."""
    again = {"ph": "X", "cat": "cpu_op", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": 0.0, "dur": 9_990.0}
    analysis = analyze_traces(_trace(tmp_path / "t.json", [(1, 0.0), (2, 20_000.0)], [again]))
    step_time = analysis.ranks[0].step_time
    assert step_time is not None and step_time.count == 2 and not analysis.warnings


def test_a_negative_duration_is_left_out_and_said(tmp_path, capsys):
    bad = {"ph": "X", "cat": "cpu_op", "name": "aten::broken", "pid": 1, "tid": 1, "ts": 2_000.0, "dur": -5.0}
    path = _trace(tmp_path / "t.json", [(1, 0.0), (2, 20_000.0)], [bad])
    analysis = analyze_traces(path)
    (warning,) = analysis.warnings
    assert "1 event(s) with a negative duration left out, e.g. 'aten::broken' at 2000 us (dur -5 us)" in warning
    assert "aten::broken" not in {op.name for op in analysis.ranks[0].top_host_ops}
    code, out, _ = _analyze(capsys, path)
    assert code == 0 and out.startswith("warning: t.json: 1 event(s) with a negative duration")
    assert cli.main(["analyze", str(path), "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["warnings"] == [warning]


def test_a_phase_label_outside_every_step_is_said(tmp_path):
    stray = {
        "ph": "X",
        "cat": "user_annotation",
        "name": "yolo_mlops/data_wait",
        "pid": 1,
        "tid": 1,
        "ts": 50_000.0,
        "dur": 3_000.0,
    }
    analysis = analyze_traces(_trace(tmp_path / "t.json", [(1, 0.0), (2, 20_000.0)], [stray]))
    (warning,) = analysis.warnings
    assert "1 phase label event(s) outside every ProfilerStep" in warning and "'yolo_mlops/data_wait'" in warning


def test_a_sound_trace_has_no_warning(cpu_trace_dir):
    assert analyze_traces(cpu_trace_dir).warnings == []


@pytest.fixture
def members_trace(tmp_path) -> Path:
    plain = tmp_path / "plain.json"
    plain.write_text(trace_text(6_000, layout="kineto"))
    (tmp_path / "m").mkdir()
    return as_members(plain, tmp_path / "m" / "t.json.gz", member_bytes=32 << 10)


def _one_line_error(capsys, path: Path) -> str:
    code, out, err = _analyze(capsys, path)
    assert code == 2 and not out and len(err.splitlines()) == 1 and path.name in err
    return err


@pytest.mark.parametrize("parallel", [True, False])
def test_a_truncated_multi_member_trace_is_refused_in_one_line(capsys, monkeypatch, members_trace, parallel):
    forked = force_parallel_reading(monkeypatch, 3 if parallel else 1)
    data = members_trace.read_bytes()
    members_trace.write_bytes(data[: len(data) * 2 // 3])  # inside a member: the index no longer adds up
    assert "cannot read (EOFError: Compressed file ended" in _one_line_error(capsys, members_trace)
    assert not forked  # read as one stream, which finds the end missing


def test_a_half_written_multi_member_trace_is_refused_in_one_line(capsys, monkeypatch, members_trace):
    """Cut at a member's end (an exporter stopped between members): sound gzip, JSON without its end."""
    forked = force_parallel_reading(monkeypatch)
    data = members_trace.read_bytes()
    members = trace_gzip.read_index(io.BytesIO(bytes(data)), len(data))
    assert members is not None and len(members) > 6
    members_trace.write_bytes(data[: members[-3].offset])
    assert "invalid or truncated JSON" in _one_line_error(capsys, members_trace)
    assert len(forked) == 2  # the parallel reader ran, found the end missing and left it to the one-process reader


def test_a_corrupt_member_is_refused_in_one_line(capsys, monkeypatch, members_trace):
    forked = force_parallel_reading(monkeypatch)
    data = bytearray(members_trace.read_bytes())
    members = trace_gzip.read_index(io.BytesIO(bytes(data)), len(data))
    assert members is not None
    data[members[-2].offset + members[-2].size - 6] ^= 0xFF  # a CRC in the last process's share
    members_trace.write_bytes(bytes(data))
    assert "cannot read" in _one_line_error(capsys, members_trace)
    assert len(forked) == 2


def test_concatenated_multi_member_traces_read_as_one_process_reads_them(monkeypatch, members_trace):
    data = members_trace.read_bytes()
    members_trace.write_bytes(data + data)  # still a sound index: two documents, one after the other
    monkeypatch.setattr(parallel_reader, "parallel_processes", lambda: 1)
    alone = analyze_traces(members_trace)
    forked = force_parallel_reading(monkeypatch)
    assert analyze_traces(members_trace) == alone
    assert len(forked) == 2


def test_a_reader_process_lost_mid_send_is_one_line_and_leaves_no_process(capsys, monkeypatch, members_trace):
    """A reader that dies after sending some of its columns (killed, out of memory): the command says so in one
    line, and every reader is waited for (no process left, not even a zombie)."""
    forked = force_parallel_reading(monkeypatch)
    sent = columns.ColumnBuilder.state_items

    def dies_after_the_first_item(self):
        yield next(sent(self))
        os._exit(1)  # runs in the reader process only: the parent merges, it never sends

    monkeypatch.setattr(columns.ColumnBuilder, "state_items", dies_after_the_first_item)
    before = _children()
    code, out, err = _analyze(capsys, members_trace)
    assert code != 0 and not out and len(err.splitlines()) == 1, err
    assert "a trace reader process ended without a result" in err
    assert len(forked) == 2
    assert _children() == before


def _children() -> set[int]:
    """The processes whose parent is this one, zombies included."""
    me, found = os.getpid(), set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:  # ended meanwhile
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == me:
                found.add(int(entry.name))
    return found
