"""ruff (pyflakes, pycodestyle, import order, bugbear, pyupgrade), ruff's formatter (one layout for the whole
tree: `ruff format .` writes it) and mypy (types), configured in pyproject.toml, run as tests."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
CONFIG = REPO / "pyproject.toml"


def tool(*args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    """`python -m ARGS` in the repository, with this interpreter; its output captured."""
    return subprocess.run([sys.executable, "-m", *args], capture_output=True, text=True, cwd=REPO, timeout=timeout)


def bad_file(tmp_path: Path, text: str) -> str:
    """The path of tmp_path/bad.py, holding `text`: code each tool must reject."""
    bad = tmp_path / "bad.py"
    bad.write_text(text)
    return str(bad)


def ruff(*args: str) -> subprocess.CompletedProcess:
    return tool("ruff", "check", "--no-cache", "--output-format", "concise", "--config", str(CONFIG), *args)


def test_repository_is_ruff_clean():
    proc = ruff(str(REPO))
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-2000:]


def test_ruff_fails_a_bad_file(tmp_path: Path):
    proc = ruff(bad_file(tmp_path, "import sys\nimport os\n\n\ndef f(items=[]):\n    return os.sep\n"))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    for rule in ("F401", "I001", "B006"):  # unused import, unsorted imports, mutable default
        assert rule in proc.stdout, proc.stdout


def ruff_format_check(*paths: str) -> subprocess.CompletedProcess:
    return tool("ruff", "format", "--check", "--no-cache", "--config", str(CONFIG), *paths)


def test_repository_is_formatted():
    proc = ruff_format_check(str(REPO))
    assert proc.returncode == 0, "run `ruff format .`:\n" + proc.stdout[-6000:] + proc.stderr[-2000:]


def test_format_check_fails_a_badly_laid_out_file(tmp_path: Path):
    proc = ruff_format_check(bad_file(tmp_path, "def f( x ):\n  return {'a':x}\n"))
    assert proc.returncode == 1 and "bad.py" in proc.stdout, proc.stdout + proc.stderr


def mypy(*args: str) -> subprocess.CompletedProcess:
    return tool("mypy", "--config-file", str(CONFIG), "--no-incremental", "--no-error-summary", *args, timeout=600)


def off_the_lock() -> list[str]:
    """The installed packages whose release is not the one requirements/lock.txt pins (those the lock names and this
    environment has)."""
    from importlib import metadata

    from packaging.utils import canonicalize_name

    installed = {canonicalize_name(d.metadata["Name"]): d.version for d in metadata.distributions()}
    differ = []
    for line in (REPO / "requirements" / "lock.txt").read_text().splitlines():
        name, _, version = line.split("#", 1)[0].strip().partition("==")
        have = installed.get(canonicalize_name(name)) if version else None
        if have is not None and have != version:
            differ.append(f"{name} {have} (lock {version})")
    return differ


def test_library_flows_tests_and_benchmarks_are_mypy_clean():
    differ = off_the_lock()
    if differ:  # mypy reads the installed libraries' types: the source is judged on one stack, the lock's
        pytest.skip(f"mypy judges the source on requirements/lock.txt; here {', '.join(differ[:3])} ...")
    proc = mypy()  # the files of [tool.mypy]
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-2000:]


def test_mypy_fails_a_bad_file(tmp_path: Path):
    text = "def half(x: int) -> int:\n    return x / 2\n\n\nhalf(None)\n\n\ndef untyped():\n    half('2')\n"
    proc = mypy(bad_file(tmp_path, text))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "[return-value]" in proc.stdout and "[arg-type]" in proc.stdout, proc.stdout
    assert "bad.py:9:" in proc.stdout, proc.stdout  # the body of an unannotated function is checked too
