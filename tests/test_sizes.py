"""Modules and functions of the library stay small enough to read whole: no module of yolo_mlops/ over
MAX_MODULE_LINES lines, no function (a method or a nested function counted with its body) of yolo_mlops/ or flows/
over MAX_FUNCTION_LINES. A concern that grows past them is split by what its parts are."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 80


def _sources(*folders: str) -> list[Path]:
    return sorted(p for folder in folders for p in (REPO / folder).rglob("*.py"))


def test_no_module_of_the_library_is_over_600_lines():
    long = [
        f"{p.relative_to(REPO)}: {n} lines"
        for p in _sources("yolo_mlops")
        if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES
    ]
    assert not long, long


def test_no_function_is_over_80_lines():
    long = []
    for path in _sources("yolo_mlops", "flows"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                start = min([node.lineno, *(d.lineno for d in node.decorator_list)])
                if (n := (node.end_lineno or node.lineno) - start + 1) > MAX_FUNCTION_LINES:
                    long.append(f"{path.relative_to(REPO)}:{node.lineno} {node.name}: {n} lines")
    assert not long, long
