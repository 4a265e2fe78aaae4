"""Shared output helpers: one Markdown table renderer, one number formatter, one figure factory.

Figures come from `matplotlib.figure.Figure` with an Agg canvas, never from `pyplot`: no global backend
switch (`matplotlib.use`) and no pyplot state, so plotting is safe from any thread of any process.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from matplotlib.figure import Figure

MISSING = "-"


def is_missing(value: Any) -> bool:
    """None or NaN: a value that was not measured."""
    return value is None or (isinstance(value, float) and math.isnan(value))


def fmt(value: Any, spec: str = ".4g") -> str:
    """A number for a table cell: `spec` for numbers, "-" for a missing value, str() for anything else."""
    if is_missing(value):
        return MISSING
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    return format(value, spec)


def _md_cell(value: Any) -> str:
    return str(value).replace("|", "\\|").replace("\n", " ")


def markdown_table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """A GitHub-flavoured Markdown table; cells are used as given (format numbers with `fmt` first)."""
    lines = ["| " + " | ".join(_md_cell(h) for h in headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def new_figure(width: float, height: float) -> Figure:
    """A figure on its own Agg canvas (no pyplot, no global backend)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height))
    FigureCanvasAgg(fig)
    return fig


def figure_path_problem(path: Path) -> str | None:
    """Why a figure cannot be written to `path`, or None: its folder is missing, or its suffix names no format
    the Agg canvas writes (matplotlib picks the format from the suffix and would refuse it only when saving,
    at the end of the command's work)."""
    if not path.parent.is_dir():
        return f"folder {path.parent} does not exist"
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    formats = FigureCanvasAgg.get_supported_filetypes()
    suffix = path.suffix.lower().removeprefix(".")
    if suffix not in formats:
        said = f"format {suffix!r}" if suffix else "no suffix"
        return f"{said} is not a figure format; use .png (or {', '.join(sorted(formats))})"
    return None


def save_figure(fig: Figure, path: Path, dpi: int = 100) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=dpi)
    return path
