"""What the GPU checks write: step output cleaned of progress bars and capped, file writes that a cut-short
run never leaves half done, paths shortened to the repository."""

from __future__ import annotations

import re
from pathlib import Path

from . import ROOT

_PROGRESS = re.compile(r"━|\d+(\.\d+)?it/s|\x1b\[K")


def clean_output(text: str) -> str:
    """Drop progress-bar redraws: keep the last segment of a carriage-return line, skip bar lines."""
    lines = (line.rsplit("\r", 1)[-1] for line in text.splitlines())
    return "\n".join(line for line in lines if line.strip() and not _PROGRESS.search(line))


def capped(text: str, cap: int) -> str:
    if len(text) <= cap:
        return text
    head = text[: cap // 10]
    return f"{head}\n[... {len(text) - cap} characters left out ...]\n{text[-(cap - len(head)) :]}"


def last_line(text: str, n: int = 1) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return " / ".join(lines[-n:])[-400:] if lines else ""


def short(arg: str) -> str:
    return arg.replace(str(ROOT) + "/", "")


def write_atomic(path: Path, text: str) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(text)
    tmp.replace(path)
