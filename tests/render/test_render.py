from __future__ import annotations

import math

import matplotlib

from yolo_mlops.render import fmt, markdown_table, new_figure, save_figure


def test_fmt_numbers_missing_and_text():
    assert fmt(1234.5678) == "1235"
    assert fmt(0.123456, ".3f") == "0.123"
    assert fmt(None) == "-" and fmt(math.nan) == "-"
    assert fmt("amp_bf16") == "amp_bf16" and fmt(True) == "True"


def test_markdown_table_escapes_pipes_and_newlines():
    text = markdown_table(["a", "b|c"], [[1, "x\ny"], ["p|q", fmt(2.0)]])
    assert text.splitlines() == ["| a | b\\|c |", "|---|---|", "| 1 | x y |", "| p\\|q | 2 |"]


def test_figure_does_not_touch_global_backend(tmp_path):
    backend = matplotlib.get_backend()
    fig = new_figure(3, 2)
    fig.add_subplot().plot([0, 1], [1, 0])
    path = save_figure(fig, tmp_path / "f.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert matplotlib.get_backend() == backend
