"""The import graph of yolo_mlops/ and flows/: no cycles, and no import from a lower layer into a higher one.

Every module is parsed with `ast`; module-level and function-level imports both count (a deferred import is
still a dependency), imports under `if TYPE_CHECKING:` do not (they never run). flows/ is installed as
`yolo_mlops.flows`, so its modules are named that way. docs/architecture.md ("Layers") describes the same
order and why. Importing a module also runs its packages' `__init__.py`, an edge the graph does not draw;
`test_light_modules_stay_light` imports the light entry points for real and checks what they loaded.
"""

from __future__ import annotations

import ast
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
ROOT_PACKAGE = "yolo_mlops"
ROOTS = {ROOT_PACKAGE: REPO / "yolo_mlops", "yolo_mlops.flows": REPO / "flows"}

# Lowest first. A module belongs to the layer of its longest matching prefix; it may import its own layer
# (when that adds no cycle) and any layer below, never one above.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    (
        "contracts",
        (
            "yolo_mlops.errors",
            "yolo_mlops.config",
            "yolo_mlops.labels",
            "yolo_mlops.names",
            "yolo_mlops.remedies",
            "yolo_mlops.render",
            "yolo_mlops.stats",
        ),
    ),
    ("seams", ("yolo_mlops.compat",)),
    ("measurement", ("yolo_mlops.nvml", "yolo_mlops.profiling")),
    ("analysis", ("yolo_mlops.analysis",)),
    ("tracking", ("yolo_mlops.tracking",)),
    ("run", ("yolo_mlops.run",)),
    ("experiments", ("yolo_mlops.sweeps", "yolo_mlops.trends", "yolo_mlops.bisect")),
    ("entry points", ("yolo_mlops.cli", "yolo_mlops.flows")),
]

# (importer, imported) pairs allowed to cross the order upwards, each with its reason. Keep this empty
# unless moving the imported thing down is a large change.
EXCEPTIONS: dict[tuple[str, str], str] = {}

# Inside a layer, the packages (or top-level modules) listed in LAYERS import each other only in these directions,
# each with its reason: a layer's parts are peers, and a peer used the other way round would make them one
# package. Anything else sideways fails the test below.
SIDEWAYS: dict[tuple[str, str], str] = {
    ("yolo_mlops.config", "yolo_mlops.errors"): "a bad spec raises the user-fixable error",
    ("yolo_mlops.config", "yolo_mlops.names"): "the params codec and applied settings write MLflow names",
    ("yolo_mlops.bisect", "yolo_mlops.trends"): "a bisection starts from a trend's change point and its history",
    ("yolo_mlops.cli", "yolo_mlops.flows"): "commands start the flows (flows never import the command line)",
}


def module_files() -> dict[str, Path]:
    modules = {}
    for prefix, root in ROOTS.items():
        for path in sorted(root.rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            modules[".".join((prefix, *parts))] = path
    return modules


def _type_checking_only(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST):
    """Every Import / ImportFrom node, skipping the bodies of `if TYPE_CHECKING:` (their else branch runs)."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and _type_checking_only(node):
            stack.extend(node.orelse)
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        stack.extend(ast.iter_child_nodes(node))


def _known(name: str, modules: dict[str, Path]) -> str | None:
    """The module `name` loads: itself, else its longest prefix that is one of ours."""
    while name:
        if name in modules:
            return name
        name = name.rpartition(".")[0]
    return None


def imports_of(name: str, path: Path, modules: dict[str, Path]) -> dict[str, int]:
    """Our modules that `name` imports -> line of the first such import."""
    is_package = path.name == "__init__.py"
    found: dict[str, int] = {}
    for node in _imports(ast.parse(path.read_text(), str(path))):
        targets = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        else:
            base = node.module or ""
            if node.level:
                package = name if is_package else name.rpartition(".")[0]
                for _ in range(node.level - 1):
                    package = package.rpartition(".")[0]
                base = f"{package}.{base}" if base else package
            # `from package import module` loads that module; `from module import name` loads the module
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names]
        for target in targets:
            known = _known(target, modules)
            if known is not None and known != name:
                found.setdefault(known, node.lineno)
    return found


def layer_of(module: str) -> int:
    if module == ROOT_PACKAGE:
        return 0  # the top-level package itself: empty, so it imports nothing
    best, best_len = None, -1
    for index, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best_len:
                best, best_len = index, len(prefix)
    if best is None:
        raise AssertionError(f"{module} is in no layer: add its package to LAYERS (and to docs/architecture.md)")
    return best


def import_graph() -> dict[str, dict[str, int]]:
    modules = module_files()
    return {name: imports_of(name, path, modules) for name, path in modules.items()}


def find_cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """One cycle per strongly connected component of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    components: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        components.append(component)
    return [_cycle_in(sorted(c), graph) for c in components]


def _cycle_in(component: list[str], graph: dict[str, dict[str, int]]) -> list[str]:
    """A closed path a -> ... -> a inside one strongly connected component (shortest from its first module)."""
    members = set(component)
    start = component[0]
    previous: dict[str, str | None] = {start: None}
    queue = [start]
    while queue:
        node = queue.pop(0)
        for child in sorted(graph[node]):
            if child == start:
                path = [node]
                while (parent := previous[path[-1]]) is not None:
                    path.append(parent)
                return [*reversed(path), start]
            if child in members and child not in previous:
                previous[child] = node
                queue.append(child)
    raise AssertionError(f"no cycle through {start}")  # unreachable for a strongly connected component


def _describe(cycle: list[str], graph: dict[str, dict[str, int]]) -> str:
    return " -> ".join(f"{a} (line {graph[a][b]})" for a, b in zip(cycle, cycle[1:], strict=False)) + f" -> {cycle[-1]}"


def test_every_module_has_a_layer():
    for module in module_files():
        layer_of(module)


def test_no_import_cycles():
    graph = import_graph()
    cycles = find_cycles(graph)
    assert not cycles, "import cycles:\n" + "\n".join(_describe(c, graph) for c in cycles)


def upward_imports(graph: dict[str, dict[str, int]]) -> list[str]:
    """Every import of a module from a higher layer, unless listed in EXCEPTIONS."""
    upward = []
    for importer, imported in sorted(graph.items()):
        for target, line in sorted(imported.items()):
            low, high = layer_of(importer), layer_of(target)
            if high > low and (importer, target) not in EXCEPTIONS:
                upward.append(
                    f"{importer} (layer {LAYERS[low][0]}) imports {target} (layer {LAYERS[high][0]}) at line {line}"
                )
    return upward


def test_no_import_from_a_lower_layer_into_a_higher_one():
    upward = upward_imports(import_graph())
    assert not upward, "imports against the layer order:\n" + "\n".join(upward)


def unit_of(module: str) -> str:
    """The LAYERS prefix a module belongs to (its package, or a top-level module of the contracts)."""
    return max(
        (
            prefix
            for _, prefixes in LAYERS
            for prefix in prefixes
            if module == prefix or module.startswith(prefix + ".")
        ),
        key=len,
        default=ROOT_PACKAGE,
    )


def sideways_imports(graph: dict[str, dict[str, int]]) -> list[str]:
    """Every import between two parts of one layer in a direction SIDEWAYS does not list."""
    sideways = []
    for importer, imported in sorted(graph.items()):
        for target, line in sorted(imported.items()):
            pair = (unit_of(importer), unit_of(target))
            if layer_of(importer) == layer_of(target) and pair[0] != pair[1] and pair not in SIDEWAYS:
                sideways.append(
                    f"{importer} imports {target} at line {line}: {pair[0]} -> {pair[1]} is not a "
                    "direction SIDEWAYS allows"
                )
    return sideways


def test_no_import_against_the_direction_inside_a_layer():
    sideways = sideways_imports(import_graph())
    assert not sideways, "imports inside a layer against its direction:\n" + "\n".join(sideways)


# Prefect is imported by the flows and, for the library, by its seam alone: compat/prefect.py (the differences between
# its releases, its private parts) and compat/prefect_client.py (its public API as small typed functions over plain
# data). Every import counts, module-level, in a function or under `if TYPE_CHECKING:`, and so does
# `importlib.import_module("prefect...")`: the rest of the library takes and returns data.
PREFECT_SEAM = ("yolo_mlops.compat.prefect", "yolo_mlops.compat.prefect_client")


def _names_prefect(name: str | None) -> bool:
    return name is not None and (name == "prefect" or name.startswith("prefect."))


def prefect_imports(modules: dict[str, Path]) -> list[str]:
    """Every import of Prefect outside flows/ and PREFECT_SEAM: module, file and line, and the statement."""
    found = []
    for module, path in sorted(modules.items()):
        if module in PREFECT_SEAM or module == "yolo_mlops.flows" or module.startswith("yolo_mlops.flows."):
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                hit = any(_names_prefect(alias.name) for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                hit = node.level == 0 and _names_prefect(node.module)
            elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
                called = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
                hit = called in ("import_module", "__import__") and _names_prefect(str(node.args[0].value))
            else:
                continue
            if hit:
                found.append(
                    f"{module} ({path.relative_to(REPO) if path.is_relative_to(REPO) else path}) line "
                    f"{node.lineno}: {ast.unparse(node)}"
                )
    return found


def test_prefect_is_imported_only_by_the_flows_and_its_seam():
    found = prefect_imports(module_files())
    assert not found, (
        "Prefect imported outside flows/ and " + ", ".join(PREFECT_SEAM) + " (call the seam's functions, or move "
        "the orchestration into the flow):\n" + "\n".join(found)
    )


def test_the_prefect_seam_exists():
    modules = module_files()
    assert set(PREFECT_SEAM) <= set(modules), sorted(set(PREFECT_SEAM) - set(modules))


@pytest.mark.parametrize(
    "source, line",
    [
        ("import prefect\n", 1),
        ("import os, prefect.settings as s\n", 1),
        ("def f():\n    from prefect.client.orchestration import get_client\n", 2),
        ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from prefect import Flow\n", 3),
        ("import importlib\nimportlib.import_module('prefect.deployments')\n", 2),
        ("from prefectlike import x\nfrom . import prefect\nimport prefect_aws_free\n", None),
    ],
)
def test_a_planted_prefect_import_is_reported(tmp_path: Path, source: str, line: int | None):
    path = tmp_path / "m.py"
    path.write_text(source)
    found = prefect_imports({"yolo_mlops.trends.planted": path, "yolo_mlops.compat.prefect_client": path})
    if line is None:
        assert found == []
    else:
        assert len(found) == 1 and found[0].startswith(f"yolo_mlops.trends.planted ({path}) line {line}: "), found
    assert prefect_imports({"yolo_mlops.flows.planted": path}) == []


@pytest.mark.parametrize(
    "check, graph, expected",
    [
        (
            "upward",
            {
                "yolo_mlops.profiling.torch_profiler": {"yolo_mlops.analysis.host": 29, "yolo_mlops.labels": 30},
                "yolo_mlops.names": {"yolo_mlops.tracking.writes": 5},
                "yolo_mlops.run.pipeline": {},
            },
            [
                "yolo_mlops.names (layer contracts) imports yolo_mlops.tracking.writes (layer tracking) at line 5",
                "yolo_mlops.profiling.torch_profiler (layer measurement) imports yolo_mlops.analysis.host "
                "(layer analysis) at line 29",
            ],
        ),
        (
            "sideways",
            {
                "yolo_mlops.trends.nightly": {"yolo_mlops.bisect.bisection": 7, "yolo_mlops.trends.history": 8},
                "yolo_mlops.flows.sweep": {"yolo_mlops.cli.run": 3},
                "yolo_mlops.cli.run": {"yolo_mlops.flows.sweep": 4},
                "yolo_mlops.names": {"yolo_mlops.config.params": 9},
            },
            [
                "yolo_mlops.flows.sweep imports yolo_mlops.cli.run at line 3: yolo_mlops.flows -> yolo_mlops.cli "
                "is not a direction SIDEWAYS allows",
                "yolo_mlops.names imports yolo_mlops.config.params at line 9: yolo_mlops.names -> "
                "yolo_mlops.config is not a direction SIDEWAYS allows",
                "yolo_mlops.trends.nightly imports yolo_mlops.bisect.bisection at line 7: yolo_mlops.trends -> "
                "yolo_mlops.bisect is not a direction SIDEWAYS allows",
            ],
        ),
    ],
)
def test_a_planted_violation_is_reported(check: str, graph: dict[str, dict[str, int]], expected: list[str]):
    assert {"upward": upward_imports, "sideways": sideways_imports}[check](graph) == expected


def test_sideways_directions_are_still_used():
    graph = import_graph()
    used = {(unit_of(a), unit_of(b)) for a, targets in graph.items() for b in targets}
    assert not set(SIDEWAYS) - used, f"listed directions no longer imported, remove them: {set(SIDEWAYS) - used}"


def test_names_is_a_leaf():
    """The MLflow names import nothing at all, so every layer can use them and they pull in nothing with them."""
    tree = ast.parse((REPO / "yolo_mlops" / "names.py").read_text())
    imports = [
        node for node in _imports(tree) if not (isinstance(node, ast.ImportFrom) and node.module == "__future__")
    ]
    assert not imports, [ast.unparse(node) for node in imports]


def test_stats_imports_nothing_of_the_project():
    """The statistics import numpy and scipy only, so every layer can use them and they pull in nothing with them."""
    tree = ast.parse((REPO / "yolo_mlops" / "stats.py").read_text())
    roots = {
        alias.name.split(".")[0] if isinstance(node, ast.Import) else (node.module or "").split(".")[0]
        for node in _imports(tree)
        for alias in node.names
    }
    assert roots <= {"__future__", "collections", "dataclasses", "itertools", "math", "statistics", "typing"} | {
        "numpy",
        "scipy",
    }, sorted(roots)


# Statistical routines live in yolo_mlops/stats.py, one implementation each. A function elsewhere whose name
# holds one of these (as whole underscore-separated words, the last one as a prefix: `t_tests` counts, `night_tests`
# does not) is a second copy. Each pattern is a tuple of words.
STATS_ROUTINES: tuple[tuple[str, ...], ...] = (
    ("holm",),
    ("welch",),
    ("t", "test"),
    ("ttest",),
    ("pooled", "noise"),
    ("bootstrap",),
    ("mann", "kendall"),
    ("theil", "sen"),
    ("sen", "slope"),
)
# (module, function) allowed to carry such a name, each with its reason: a thin wrapper that unpacks a typed
# record into the shared routine, nothing more.
STATS_WRAPPERS: dict[tuple[str, str], str] = {
    ("yolo_mlops.sweeps.stats", "bootstrap_throughput"): "Repeats (images, step_ms) into two_level_bootstrap_medians",
}


def stats_routine(name: str) -> tuple[str, ...] | None:
    """The pattern of STATS_ROUTINES a function name matches, if any."""
    words = [w for w in name.lower().split("_") if w]
    for pattern in STATS_ROUTINES:
        for i in range(len(words) - len(pattern) + 1):
            window = words[i : i + len(pattern)]
            if window[:-1] == list(pattern[:-1]) and window[-1].startswith(pattern[-1]):
                return pattern
    return None


def stats_copies(modules: dict[str, Path]) -> list[str]:
    """Every function outside yolo_mlops.stats named like one of its routines, unless in STATS_WRAPPERS."""
    found = []
    for module, path in sorted(modules.items()):
        if module == "yolo_mlops.stats" or module.startswith("yolo_mlops.stats."):
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and stats_routine(node.name):
                if (module, node.name) not in STATS_WRAPPERS:
                    found.append(f"{module}.{node.name} (line {node.lineno})")
    return found


def test_statistics_are_written_once():
    copies = stats_copies(module_files())
    assert not copies, "statistics outside yolo_mlops/stats.py (use it, or list a thin wrapper):\n" + "\n".join(copies)


def test_stats_wrappers_still_exist():
    modules = module_files()
    defined = {
        (module, node.name)
        for module, path in modules.items()
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
    }
    assert not set(STATS_WRAPPERS) - defined, f"listed wrappers no longer defined: {set(STATS_WRAPPERS) - defined}"


@pytest.mark.parametrize(
    "name, caught",
    [
        ("holm_holds", True),
        ("welch", True),
        ("nights_t_test", True),
        ("_ttest", True),
        ("paired_t_tests", True),
        ("pooled_noise", True),
        ("_block_bootstrap_interval", True),
        ("mann_kendall", True),
        ("theil_sen_slope", True),
        ("sen_slope", True),
        ("night_tests", False),
        ("level_test", False),
        ("the_test", False),
        ("lane_tests", False),
    ],
)
def test_stats_routine_names(name: str, caught: bool, tmp_path: Path):
    assert (stats_routine(name) is not None) is caught
    path = tmp_path / "m.py"
    path.write_text(f"def {name}():\n    pass\n")
    assert bool(stats_copies({"yolo_mlops.trends.x": path})) is caught
    assert not stats_copies({"yolo_mlops.stats": path})


def test_exceptions_are_still_needed():
    graph = import_graph()
    stale = [pair for pair in EXCEPTIONS if pair[1] not in graph.get(pair[0], {})]
    assert not stale, f"listed exceptions no longer imported, remove them: {stale}"


def test_contracts_import_only_contracts():
    """The contracts layer is a leaf: it imports nothing of the project above it, directly or not."""
    graph = import_graph()
    for module, imported in graph.items():
        if layer_of(module) == 0:
            assert all(layer_of(target) == 0 for target in imported), (module, sorted(imported))


def test_every_package_is_installed():
    """pyproject.toml lists the packages one by one (flows/ installs under another name): none may be missing."""
    listed = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    packages = {name for name, path in module_files().items() if path.name == "__init__.py"}
    assert sorted(listed) == sorted(packages)


@pytest.mark.parametrize(
    "modules, absent",
    [
        # the contracts load neither torch nor MLflow (names imports nothing, so nothing else loads with it)
        (["yolo_mlops.config", "yolo_mlops.labels", "yolo_mlops.names"], ["torch", "mlflow"]),
        # the modules that check a spec or read settings back without training never load torch
        (["yolo_mlops.run.preflight", "yolo_mlops.sweeps.collect"], ["torch"]),
        # `yolo-mlops analyze`: the analysis alone, without torch, MLflow or pydantic
        (["yolo_mlops.analysis", "yolo_mlops.cli.analyze"], ["torch", "mlflow", "pydantic"]),
    ],
)
def test_light_modules_stay_light(modules: list[str], absent: list[str]):
    code = (
        f"import importlib, sys; [importlib.import_module(m) for m in {modules!r}]; "
        f"print(sorted(m for m in {absent!r} if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "[]", f"{modules} imported {done.stdout.strip()}"


@pytest.mark.parametrize(
    "cycle_graph, expected",
    [
        ({"a": {"b": 1}, "b": {"a": 2}}, [["a", "b", "a"]]),
        ({"a": {"b": 1}, "b": {"c": 1}, "c": {"a": 1}, "d": {"a": 1}}, [["a", "b", "c", "a"]]),
        ({"a": {"b": 1}, "b": {}}, []),
    ],
)
def test_cycle_finder(cycle_graph, expected):
    assert find_cycles(cycle_graph) == expected


def test_type_checking_imports_and_function_imports(tmp_path: Path):
    source = (
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from yolo_mlops.run import pipeline\n"
        "else:\n    from yolo_mlops import render\n"
        "def f():\n    from yolo_mlops.analysis import host\n"
    )
    path = tmp_path / "m.py"
    path.write_text(source)
    modules = {
        "yolo_mlops.run.pipeline": path,
        "yolo_mlops.render": path,
        "yolo_mlops.analysis.host": path,
        "yolo_mlops.x": path,
    }
    assert set(imports_of("yolo_mlops.x", path, modules)) == {"yolo_mlops.render", "yolo_mlops.analysis.host"}


def test_no_flow_module_shadows_the_standard_library():
    """Prefect puts a deployment's entrypoint folder (flows/) on sys.path, and a process pool's workers inherit
    it: a flows/bisect.py would be imported as the standard `bisect` (random imports it) and break them."""
    flows = Path(__file__).resolve().parents[1] / "flows"
    shadowing = sorted(p.name for p in flows.glob("*.py") if p.stem in sys.stdlib_module_names)
    assert not shadowing, shadowing
