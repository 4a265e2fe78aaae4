"""Comments and docstrings in yolo_mlops/ and flows/ say what the code is and why; measured figures live in docs/.

A figure a benchmark, a simulation or a run showed (a time, a share, a speed-up, "N of M", a coverage) is true of
one machine on one day and rots in a comment; docs/benchmarks.md and the topical docs hold it with the command
that produced it. Docstrings come from `ast`, comments from `tokenize`. A value that defines behaviour may stay:
a confidence level ("95% interval"), a conversion ("0.05 = 5%"), a value in parentheses right after the name of
the constant or parameter that holds it ("`MOVED_SHARE` (10%)"), and the few lines of `ALLOWED` below. A module
docstring says what the module is for in at most `MAX_MODULE_DOCSTRING_LINES` lines; the method is in docs/.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
ROOTS = (REPO / "yolo_mlops", REPO / "flows")
MAX_MODULE_DOCSTRING_LINES = 20

_NUMBER = r"(?<![\w.])\d[\d,]*(?:\.\d+)?"
# what a measurement looks like: a number with a unit of time, size, power or share, a speed-up factor, "N of M",
# a coverage figure
FIGURE = re.compile(
    rf"{_NUMBER}\s?(?:ms|µs|us|ns|s|sec|min|h|MiB|GiB|KiB|MB|GB|kB|W)(?![\w])"
    rf"|{_NUMBER}\s?%"
    rf"|{_NUMBER}[x×](?![\w])|(?<![\w])[x×]\d"
    rf"|(?:{_NUMBER}|\bnone|\ball) of (?:the )?\d[\d,]*\b"
    r"|\bcover(?:age|ed|s)\b:?\s+(?:of\s+)?(?:only\s+)?\d?\.\d",
    re.IGNORECASE,
)
# text that states a definition, not a result: removed before FIGURE is searched
DEFINITION = re.compile(
    r"\b(?:90|95|99)% (?:two-sided |one-sided |bootstrap |Student's t |confidence )*(?:CI|intervals?|confidence)\b"
    r"|\d(?:\.\d+)? = \d+(?:\.\d+)?%"
    r"|`?\b[A-Za-z]\w*_\w*`? \((?:default )?[^()]*\d[^()]*\)"
    r"|`?\b[A-Z][A-Z0-9_]+\b`? \((?:default )?[^()]*\d[^()]*\)",
)

# (path, text the line holds): each a behaviour-defining value that FIGURE matches and DEFINITION cannot tell
ALLOWED: dict[tuple[str, str], str] = {
    ("yolo_mlops/bisect/commit_runs.py", "TERM, 60 s for the run to end"): "the wait `_stop` passes to proc.wait",
}


def python_files() -> list[Path]:
    return sorted(path for root in ROOTS for path in root.rglob("*.py"))


def texts(path: Path) -> list[tuple[int, str]]:
    """(line, text) of every docstring line and every comment of the file."""
    source = path.read_text(encoding="utf-8")
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            doc = ast.get_docstring(node, clean=False)
            if doc is not None:
                first = node.body[0].lineno
                found.extend((first + i, line) for i, line in enumerate(doc.splitlines()))
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            found.append((token.start[0], token.string))
    return found


def figures(text: str) -> list[str]:
    """The measurement-like figures of one line of comment or docstring."""
    return [match.group(0) for match in FIGURE.finditer(DEFINITION.sub(" ", text))]


def relative(path: Path) -> str:
    return path.relative_to(REPO).as_posix()


def test_no_measured_figures_in_comments_or_docstrings():
    used: set[tuple[str, str]] = set()
    bad = []
    for path in python_files():
        for line, text in texts(path):
            if not figures(text):
                continue
            allowed = [key for key in ALLOWED if key[0] == relative(path) and key[1] in text]
            if allowed:
                used.update(allowed)
                continue
            bad.append(f"{relative(path)}:{line}: {text.strip()}")
    assert not bad, "measured figures belong in docs/ (benchmarks.md or the topical doc):\n" + "\n".join(bad)
    assert used == set(ALLOWED), f"allow-list entries that match nothing: {sorted(set(ALLOWED) - used)}"


def test_module_docstrings_are_short():
    long = []
    for path in python_files():
        doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8")), clean=False)
        if doc is not None and len(doc.splitlines()) > MAX_MODULE_DOCSTRING_LINES:
            long.append(f"{relative(path)}: {len(doc.splitlines())} lines")
    assert not long, f"module docstrings over {MAX_MODULE_DOCSTRING_LINES} lines (the detail goes to docs/):\n" + (
        "\n".join(long)
    )


@pytest.mark.parametrize(
    "text",
    [
        "# ~8x faster than re.IGNORECASE",
        "# measured: ~10 s on an idle 2-core box",
        "alerted 88.5% of 3-sd steps",
        "typing 60,000 runs: 2.2 s before, 1.7 s with it",
        "corrected, none of 500 do",
        "Measured coverage: 0.946-0.966",
        "gzipped: ~130 MiB of JSON",
        "self time x3.1 since night",
    ],
)
def test_a_measurement_is_found(text: str):
    assert figures(text), text


@pytest.mark.parametrize(
    "text",
    [
        "Student's t with a 95% interval",
        "a smallest effect is a fraction: 0.05 = 5%",
        "explains at least `MOVED_SHARE` (10%) of the gap",
        "at least `min_effect` (default 3%) above its peers' median",
        "3 x 50 correlated steps",
        "np.float64 and 0x1f",
    ],
)
def test_a_definition_is_not_a_measurement(text: str):
    assert not figures(text), figures(text)
