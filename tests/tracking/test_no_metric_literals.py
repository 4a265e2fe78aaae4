"""Code writes MLflow metric names and run artifact paths only through yolo_mlops/names.py.

The source of yolo_mlops/ and flows/ is parsed with `ast`: a string constant, or a literal part of an
f-string, that starts with a metric group prefix (`perf/`, `gpu/`, ...) or a run artifact folder of those
groups (`trends/`) anywhere but in names.py is a name written outside the contract. Docstrings are text,
not names, and are skipped; comments never reach the AST.
"""

from __future__ import annotations

import ast
from pathlib import Path

from metric_groups import METRIC_GROUPS

ROOT = Path(__file__).resolve().parents[2]
SOURCES = (ROOT / "yolo_mlops", ROOT / "flows")
NAMES_MODULE = ROOT / "yolo_mlops" / "names.py"
PREFIXES = (*METRIC_GROUPS, "trends/", "nvml/")  # and the run artifact folders of the trend and NVML names

# (file relative to the repository root, the literal): strings that look like names but are none
ALLOWED = {
    # a key of the sweep's comparison input (the sum of names.LOSS_PARTS), never logged to MLflow
    ("yolo_mlops/sweeps/collect.py", "train/loss_total"),
    # a Prefect deployment (<flow name>/<deployment name>, deploy/prefect.yaml), not an MLflow name
    ("yolo_mlops/config/benchmark.py", "bisect/bisect"),
}


def _docstrings(tree: ast.AST) -> set[int]:
    """ids of the docstring nodes of the module, its classes and functions."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and node.body:
            first = node.body[0]
            if (
                isinstance(first, ast.Expr)
                and isinstance(first.value, ast.Constant)
                and isinstance(first.value.value, str)
            ):
                out.add(id(first.value))
    return out


def name_literals(path: Path) -> list[tuple[int, str]]:
    """(line, text) of every string constant or f-string part in `path` that starts with a prefix."""
    tree = ast.parse(path.read_text(), filename=str(path))
    skip = _docstrings(tree)
    found = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and id(node) not in skip
            and node.value.startswith(PREFIXES)
        ):
            found.append((node.lineno, node.value))
    return found


def offending_literals() -> list[str]:
    out = []
    for folder in SOURCES:
        for path in sorted(folder.rglob("*.py")):
            if path == NAMES_MODULE:
                continue
            rel = path.relative_to(ROOT).as_posix()
            out += [f"{rel}:{line}: {text!r}" for line, text in name_literals(path) if (rel, text) not in ALLOWED]
    return out


def test_metric_names_and_artifact_paths_come_from_names_py():
    offending = offending_literals()
    assert not offending, (
        "MLflow names written as literals; use (or add) a constant or builder in "
        "yolo_mlops/names.py:\n" + "\n".join(offending)
    )


def test_the_scan_sees_literals_and_f_string_parts_but_not_docstrings(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text(
        '"""perf/ in a module docstring is text."""\n'
        'A = "perf/step_time_ms_p50"\n'
        "def f(x):\n"
        '    """gpu/ in a docstring."""\n'
        '    return f"trace/host_{x}_pct", "see perf/x", f"{x}_pct"\n'
    )
    assert name_literals(sample) == [(2, "perf/step_time_ms_p50"), (5, "trace/host_")]


def test_every_allowed_literal_is_still_there():
    """An allowance whose literal is gone would hide a future one."""
    for rel, text in ALLOWED:
        assert text in [t for _, t in name_literals(ROOT / rel)], f"{rel} no longer holds {text!r}"
