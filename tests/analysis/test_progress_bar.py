"""`yolo-mlops analyze` shows a progress bar on a terminal once a file takes a while, and nothing elsewhere."""

from __future__ import annotations

import io
from pathlib import Path

from yolo_mlops import cli
from yolo_mlops.analysis import progress_bar
from yolo_mlops.analysis.progress_bar import TerminalProgress


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_bar_appears_only_after_a_while_and_is_wiped_at_the_end():
    stream, clock = io.StringIO(), _Clock()
    bar = TerminalProgress(Path("/x/big.json.gz"), 100 << 20, stream, clock)
    bar(10 << 20)
    assert stream.getvalue() == ""  # a quick file draws nothing
    clock.now += progress_bar.SHOW_AFTER_S
    bar(40 << 20)
    assert stream.getvalue().startswith("\rbig.json.gz   50% |###############") and "50/100 MiB" in stream.getvalue()
    drawn = stream.getvalue()
    bar(1 << 20)
    assert stream.getvalue() == drawn  # redrawn at most every REDRAW_S
    clock.now += 2 * progress_bar.REDRAW_S
    bar(1 << 20)
    assert "52/100 MiB" in stream.getvalue()
    bar.close()
    assert stream.getvalue().endswith("\r" + " " * bar.width + "\r")


def test_a_quick_file_leaves_no_trace_on_the_terminal():
    stream = io.StringIO()
    bar = TerminalProgress(Path("small.json"), 1000, stream, _Clock())
    bar(1000)
    bar.close()
    assert stream.getvalue() == ""


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_analyze_draws_the_bar_on_a_terminal_only(gpu_traces_dir, capsys, monkeypatch):
    trace = str(gpu_traces_dir / "small_comm_rank0.json.gz")
    monkeypatch.setattr(progress_bar, "SHOW_AFTER_S", 0.0)
    assert cli.main(["analyze", trace, "--format", "json"]) == 0
    plain = capsys.readouterr()
    assert plain.err == "" and plain.out.startswith("{")  # stderr is no terminal here: nothing drawn
    terminal = _Terminal()
    monkeypatch.setattr("sys.stderr", terminal)
    assert cli.main(["analyze", trace, "--format", "json"]) == 0
    assert "small_comm_rank0.json.gz" in terminal.getvalue() and "% |" in terminal.getvalue()
    assert capsys.readouterr().out == plain.out  # the report itself is unchanged
