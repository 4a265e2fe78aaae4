"""Every private part of torch, ultralytics, MLflow, Prefect and NVML the code touches, and where: only in
`yolo_mlops/compat/`, one module per library.

Each module of yolo_mlops/, flows/ and benchmarks/ is parsed with `ast`. A use counts when it is one of:
- an import of a private module or name of one of those libraries (`from torch.profiler._memory_profiler import`);
- an attribute chain from a name bound to one of them whose part starts with `_` (`torch.cuda.memory._dump_snapshot`);
- a private attribute the project does not define itself, read from any object (`runner._resolver_executor`,
  `getattr(executor, "_processes")`);
- a method starting with `_` defined in a class whose base is one of their classes (an override of a private method);
- an assignment to an attribute of one of their modules or classes (a patch: `engine_trainer.check_amp = ...`).
`test_private_uses_are_the_listed_ones` keeps the list below exact, so a new reach into a library is a decision.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SCANNED = ("yolo_mlops", "flows", "benchmarks")
SEAM = REPO / "yolo_mlops" / "compat"
LIBRARIES = {"torch", "torchvision", "ultralytics", "mlflow", "prefect", "pynvml"}
# process-wide switches torch documents as set by assignment: settings, not patches
DOCUMENTED_SWITCHES = ("torch.backends.",)

# (module of compat/, what it touches) for every private use; the module docstring of each says why
EXPECTED = {
    ("mlflow.py", "client._tracking_client"),
    ("prefect.py", "prefect.server.api.server.SubprocessASGIServer._instances"),
    ("prefect.py", "override base._run_uvicorn_command"),
    ("prefect.py", "server._run_uvicorn_command"),
    ("prefect.py", "getattr(_, '_resolver_executor')"),
    ("prefect.py", "getattr(_, '_executor')"),
    ("prefect.py", "getattr(_, '_processes')"),
    ("torch.py", "import torch.profiler._memory_profiler._CATEGORY_TO_INDEX"),
    ("torch.py", "import torch.profiler._memory_profiler.Category"),
    ("torch.py", "torch.cuda.memory._record_memory_history"),
    ("torch.py", "torch.cuda.memory._dump_snapshot"),
    ("torch.py", "hasattr(_, '_record_memory_history')"),
    ("torch.py", "hasattr(_, '_dump_snapshot')"),
    ("torch.py", "hasattr(_, '_orig_mod')"),
    ("ultralytics.py", "override base._setup_ddp"),
    ("ultralytics.py", "override base._setup_train"),
    ("ultralytics.py", "patch ultralytics.engine.trainer.check_amp"),
    ("ultralytics.py", "patch ultralytics.models.yolo.detect.train.build_dataloader"),
    ("ultralytics.py", "patch torch.nn.parallel.DistributedDataParallel"),
}


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _python_files() -> Iterator[Path]:
    for folder in SCANNED:
        yield from sorted((REPO / folder).rglob("*.py"))


def _project_classes() -> set[str]:
    return {
        node.name
        for path in _python_files()
        for node in ast.walk(ast.parse(path.read_text(), str(path)))
        if isinstance(node, ast.ClassDef)
    }


def _imports(tree: ast.AST) -> tuple[dict[str, str], set[str]]:
    """Names bound to one of LIBRARIES (-> the path they hold), and every other imported name."""
    bound: dict[str, str] = {}
    other: set[str] = set()
    for node in ast.walk(tree):  # wherever they are: a deferred import binds as well
        if isinstance(node, ast.Import):
            for alias in node.names:
                top = alias.name.split(".")[0]
                target = bound if top in LIBRARIES else None
                if target is None:
                    other.add(alias.asname or top)
                else:
                    target[alias.asname or top] = alias.name if alias.asname else top
        elif isinstance(node, ast.ImportFrom) and node.module:
            for alias in node.names:
                if node.level == 0 and node.module.split(".")[0] in LIBRARIES:
                    bound[alias.asname or alias.name] = f"{node.module}.{alias.name}"
                else:
                    other.add(alias.asname or alias.name)
    return bound, other


def _foreign_based(node: ast.ClassDef, bound: dict[str, str], other: set[str], classes: set[str]) -> bool:
    """A class built on a library's class, or on a class only known at run time (a parameter, a call's result)."""
    for base in node.bases:
        chain = _chain(base)
        if isinstance(base, ast.Call) or (chain and chain[0] in bound):
            return True
        if isinstance(base, ast.Name) and base.id not in other and base.id not in classes:
            return True
    return False


def _own_names(classes: set[str]) -> set[str]:
    """Every private name the project defines itself (functions, classes, attributes and names it assigns,
    parameters), less the methods of classes built on a library's (those are overrides of its names)."""
    names: set[str] = set()
    overrides: set[str] = set()
    for path in _python_files():
        tree = ast.parse(path.read_text(), str(path))
        bound, other = _imports(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef) and _foreign_based(node, bound, other, classes):
                overrides.update(item.name for item in node.body if isinstance(item, ast.FunctionDef))
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                names.add(node.attr)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names.add(node.id)
            elif isinstance(node, ast.arg):
                names.add(node.arg)
            elif isinstance(node, ast.alias):
                names.add(node.asname or node.name.split(".")[0])
    return {n for n in names - overrides if _private(n)}


def _chain(node: ast.AST) -> list[str] | None:
    """`a.b.c` as ['a', 'b', 'c']; None when the chain does not start at a plain name."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return [node.id, *reversed(parts)]


def private_uses(path: Path, own: set[str], classes: set[str]) -> set[str]:
    tree = ast.parse(path.read_text(), str(path))
    bound, other = _imports(tree)
    uses: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            uses.update(
                f"import {a.name}" for a in node.names if a.name.split(".")[0] in LIBRARIES and _is_private_path(a.name)
            )
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module.split(".")[0] in LIBRARIES:
                full = [f"{node.module}.{a.name}" for a in node.names]
                uses.update(f"import {f}" for f in full if _is_private_path(f))
    for node in ast.walk(tree):  # names assigned from a library path (`base = server.SubprocessASGIServer`)
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            chain = _chain(node.value)
            if chain and chain[0] in bound:
                bound.setdefault(node.targets[0].id, ".".join([bound[chain[0]], *chain[1:]]))
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            chain = _chain(node)
            if chain and chain[0] in bound:
                resolved = [*bound[chain[0]].split("."), *chain[1:]]
                private = [i for i, part in enumerate(resolved) if _private(part)]
                if private and len(resolved) - private[0] <= len(chain):  # up to its first private part
                    uses.add(".".join(resolved[: private[0] + 1]))
                if isinstance(node.ctx, ast.Store) and not ".".join(resolved).startswith(DOCUMENTED_SWITCHES):
                    uses.add("patch " + ".".join(resolved))
            elif _private(node.attr) and node.attr not in own and not _from_other_import(chain, other):
                uses.add(f"{chain[0] if chain else '_'}.{node.attr}")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            args = node.args
            if node.func.id in ("getattr", "hasattr", "setattr") and len(args) >= 2:
                name = args[1]
                if isinstance(name, ast.Constant) and isinstance(name.value, str) and _private(name.value):
                    if name.value not in own:
                        uses.add(f"{node.func.id}(_, '{name.value}')")
                elif isinstance(name, ast.Constant) and node.func.id == "setattr":
                    target = _chain(args[0])
                    if target and target[0] in bound:
                        uses.add("patch " + ".".join([bound[target[0]], *target[1:], str(name.value)]))
        elif isinstance(node, ast.ClassDef) and _foreign_based(node, bound, other, classes):
            base = _base_name(node.bases[0])
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and _private(item.name):
                    uses.add(f"override {base}.{item.name}")
    return uses


def _is_private_path(path: str) -> bool:
    return any(_private(part) for part in path.split("."))


def _from_other_import(chain: list[str] | None, other: set[str]) -> bool:
    """`os._exit`: a name of a module outside LIBRARIES. `super()._x` (an override's call) has no chain."""
    return chain is None or chain[0] in other


def _base_name(base: ast.expr) -> str:
    chain = _chain(base.func if isinstance(base, ast.Call) else base)
    return chain[-1] if chain else "?"


def all_private_uses() -> dict[str, set[str]]:
    classes = _project_classes()
    own = _own_names(classes)
    return {str(path.relative_to(REPO)): uses for path in _python_files() if (uses := private_uses(path, own, classes))}


def test_private_uses_live_in_the_seam():
    outside = {path: uses for path, uses in all_private_uses().items() if not (REPO / path).is_relative_to(SEAM)}
    assert not outside, (
        "private parts of torch, ultralytics, MLflow, Prefect or NVML touched outside yolo_mlops/compat/ "
        f"(move the use into its library's compat module): {outside}"
    )


def test_private_uses_are_the_listed_ones():
    found = {(Path(path).name, use) for path, uses in all_private_uses().items() for use in uses}
    assert found == EXPECTED, f"new: {sorted(found - EXPECTED)}; gone: {sorted(EXPECTED - found)}"


def test_the_scan_finds_each_kind_of_use(tmp_path):
    """The scanner itself, on a module that does each thing once."""
    module = tmp_path / "module.py"
    module.write_text(
        "import torch\n"
        "import ultralytics.engine.trainer as engine_trainer\n"
        "from prefect.server.api import server\n"
        "from torch.profiler._memory_profiler import Category\n"
        "from ultralytics.models.yolo.detect import DetectionTrainer\n"
        "torch.cuda.memory._record_memory_history()\n"
        "engine_trainer.check_amp = None\n"
        "base = server.SubprocessASGIServer\n"
        "base._instances.clear()\n"
        "getattr(object(), '_resolver_executor', None)\n"
        "class Trainer(DetectionTrainer):\n"
        "    def _setup_train(self):\n"
        "        return self._own\n"
    )
    assert private_uses(module, own={"_own"}, classes=set()) == {
        "import torch.profiler._memory_profiler.Category",
        "torch.cuda.memory._record_memory_history",
        "patch ultralytics.engine.trainer.check_amp",
        "prefect.server.api.server.SubprocessASGIServer._instances",
        "getattr(_, '_resolver_executor')",
        "override DetectionTrainer._setup_train",
    }
