"""A report as a list of blocks (heading, paragraph, table, image), rendered to Markdown and to a self-contained
HTML page from the same blocks, so the two never disagree."""

from __future__ import annotations

import base64
import html
from dataclasses import dataclass
from pathlib import Path

from yolo_mlops.render import markdown_table


@dataclass
class Heading:
    text: str
    level: int = 2


@dataclass
class Paragraph:
    text: str


@dataclass
class Table:
    headers: list[str]
    rows: list[list[str]]


@dataclass
class Image:
    file_name: str
    alt: str


Block = Heading | Paragraph | Table | Image


def render_markdown(blocks: list[Block]) -> str:
    out: list[str] = []
    for b in blocks:
        if isinstance(b, Heading):
            out.append("#" * b.level + " " + b.text)
        elif isinstance(b, Paragraph):
            out.append(b.text)
        elif isinstance(b, Table):
            out.append(markdown_table(b.headers, b.rows))
        elif isinstance(b, Image):
            out.append(f"![{b.alt}]({b.file_name})")
        out.append("")
    return "\n".join(out)


def render_html(blocks: list[Block], out_dir: Path) -> str:
    """Self-contained page: images are embedded, so it renders inside MLflow's artifact viewer."""
    body: list[str] = []
    for b in blocks:
        if isinstance(b, Heading):
            body.append(f"<h{b.level}>{html.escape(b.text)}</h{b.level}>")
        elif isinstance(b, Paragraph):
            body.append(f"<p>{html.escape(b.text)}</p>")
        elif isinstance(b, Table):
            head = "".join(f"<th>{html.escape(h)}</th>" for h in b.headers)
            rows = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in b.rows)
            body.append(f"<table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>")
        elif isinstance(b, Image):
            data = base64.b64encode((out_dir / b.file_name).read_bytes()).decode()
            body.append(
                f'<figure><img alt="{html.escape(b.alt)}" src="data:image/png;base64,{data}">'
                f"<figcaption>{html.escape(b.alt)}</figcaption></figure>"
            )
    style = (
        "body{font-family:sans-serif;margin:2em;max-width:80em}table{border-collapse:collapse;margin:1em 0}"
        "td,th{border:1px solid #ccc;padding:3px 8px;text-align:left;font-size:90%}"
        "th{background:#f3f3f3}img{max-width:100%}"
    )
    return (
        f'<!DOCTYPE html>\n<html><head><meta charset="utf-8"><title>Profiling report</title>'
        f"<style>{style}</style></head><body>\n" + "\n".join(body) + "\n</body></html>\n"
    )
