"""Fixtures of the reliability tests; the CLI helpers live in reliability_cli.py."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

import reliability_cli  # noqa: E402


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "home"


@pytest.fixture
def cli_env(tmp_path: Path, home: Path) -> dict[str, str]:
    return reliability_cli.cli_env(tmp_path, home)
