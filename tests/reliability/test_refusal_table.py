"""docs/reliability.md's table of every bad input the suite tries is the tests' own cases (tests/refusals.py)."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import refusals  # noqa: E402


def test_the_docs_table_is_the_suites_cases():
    assert refusals.documented() == refusals.table(), (
        "docs/reliability.md's bad-input table differs from the tests' cases: run .venv/bin/python tests/refusals.py"
    )


def test_every_list_of_cases_is_in_the_table():
    """A test module's module-level `...REFUSALS` list is a source of the table, and each source's test exists."""
    listed = {(path, variable) for path, variable, _ in refusals.SOURCES}
    found = set()
    for path in sorted((refusals.REPO / "tests").rglob("test_*.py")):
        for node in ast.parse(path.read_text()).body:
            targets = node.targets if isinstance(node, ast.Assign) else []
            for target in targets:
                if isinstance(target, ast.Name) and target.id.endswith("REFUSALS"):
                    found.add((path.relative_to(refusals.REPO).as_posix(), target.id))
    assert found == listed
    for path, test, cases in refusals.refusal_lists():
        module = ast.parse((refusals.REPO / path).read_text())
        assert test in {n.name for n in module.body if isinstance(n, ast.FunctionDef)}, (path, test)
        names = [case.case for case in cases]
        assert len(names) == len(set(names)), f"{path}: two cases of one name"
