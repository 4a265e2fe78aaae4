"""The nvml package has no import cycle: backend.py knows no backend, the fake needs only backend.py.

Checked twice: statically (every `yolo_mlops.nvml.*` import of every module, also those inside
functions, forms an acyclic graph) and by importing each module first in a fresh interpreter.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import yolo_mlops.nvml

PACKAGE = "yolo_mlops.nvml"
FOLDER = Path(yolo_mlops.nvml.__file__).parent
MODULES = sorted(p.stem for p in FOLDER.glob("*.py") if p.stem != "__init__")


def nvml_imports(path: Path) -> set[str]:
    """Submodules of yolo_mlops.nvml that `path` imports, anywhere in the file."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            module = node.module if node.level == 0 else f"{PACKAGE}.{node.module}"
            if module == PACKAGE:
                found |= {f"{PACKAGE}.{alias.name}" for alias in node.names}
            elif module.startswith(PACKAGE + "."):
                found.add(module)
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith(PACKAGE + ".")}
    return {m.removeprefix(PACKAGE + ".").split(".")[0] for m in found} & set(MODULES)


def graph() -> dict[str, set[str]]:
    return {m: nvml_imports(FOLDER / f"{m}.py") for m in MODULES}


def test_backend_imports_no_backend_and_the_fake_only_the_backend():
    g = graph()
    assert g["backend"] == set()
    assert g["fake"] == {"backend"}
    assert g["null"] == {"backend"}
    assert "fake" not in g["real"] and "real" not in g["devices"]


def test_import_graph_has_no_cycle():
    g = graph()
    state: dict[str, str] = {}

    def visit(module: str, path: list[str]) -> None:
        state[module] = "open"
        for dep in sorted(g[module]):
            assert state.get(dep) != "open", f"import cycle: {' -> '.join([*path, module, dep])}"
            if dep not in state:
                visit(dep, [*path, module])
        state[module] = "done"

    for module in MODULES:
        if module not in state:
            visit(module, [])


def test_cycle_detection_sees_a_function_level_import(tmp_path):
    # the check must catch the import style that hid the cycle: an implementation imported inside a function
    module = tmp_path / "backend.py"
    module.write_text("def make():\n    from yolo_mlops.nvml.fake import FakeNvmlBackend\n    return FakeNvmlBackend\n")
    assert nvml_imports(module) == {"fake"}
    module.write_text("from yolo_mlops.nvml import real, sampler\n")
    assert nvml_imports(module) == {"real", "sampler"}


@pytest.mark.parametrize("module", MODULES)
def test_each_module_imports_first_in_a_fresh_interpreter(module):
    done = subprocess.run(
        [sys.executable, "-c", f"import {PACKAGE}.{module}"], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
