"""docs/mlflow.md and yolo_mlops/tracking/names.py describe the same names.

Both directions: every name constant appears (in backticks) in the doc, and every `yolo_mlops.*` /
`mlflow.*` tag and every artifact path the doc lists is a constant, a documented prefix constant plus a
suffix, or a folder constant plus a file constant (artifact paths with `*` or `<...>` are families inside
a folder constant).
"""

from __future__ import annotations

import itertools
import re
from pathlib import Path

import pytest

from yolo_mlops.tracking import names

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "mlflow.md"
ARTIFACT_SUFFIXES = ("json", "gz", "txt", "csv", "png", "md", "html", "yaml")
_PATH = re.compile(r"^[\w<>{},*.-]+/[\w<>{},*./-]+\.(" + "|".join(ARTIFACT_SUFFIXES) + r")$")


def constants() -> dict[str, str]:
    """Every string constant of names.py (tuples flattened), by constant name."""
    out: dict[str, str] = {}
    for attr, value in vars(names).items():
        if not attr.isupper():
            continue
        if isinstance(value, str):
            out[attr] = value
        elif isinstance(value, tuple):
            out.update({f"{attr}[{i}]": v for i, v in enumerate(value) if isinstance(v, str)})
    return out


def code_spans(text: str) -> list[str]:
    return re.findall(r"`([^`\n]+)`", text)


def section(text: str, title: str) -> str:
    match = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", text, re.S | re.M)
    assert match, f"docs/mlflow.md has no '## {title}' section"
    return match.group(1)


def first_column_spans(table_text: str) -> list[str]:
    rows = [line for line in table_text.splitlines() if line.startswith("|") and not line.startswith("|---")]
    return [span for row in rows[1:] for span in code_spans(row.split("|")[1])]


def expand_braces(token: str) -> list[str]:
    """`a_{x,y}.txt` -> [`a_x.txt`, `a_y.txt`]."""
    parts = re.split(r"\{([^}]*)\}", token)
    choices = [[p] if i % 2 == 0 else p.split(",") for i, p in enumerate(parts)]
    return ["".join(combo) for combo in itertools.product(*choices)]


def prefixes() -> set[str]:
    """Constants that name a group (`train.`, `yolo_mlops.applied.`, `gpu/`), not the bare tag namespace."""
    return {v for v in constants().values() if v.endswith((".", "/")) and v != names.TAG_PREFIX}


def tag_is_named(tag: str) -> bool:
    values = set(constants().values())
    return tag in values or any(tag.startswith(p) and len(tag) > len(p) for p in prefixes())


def artifact_is_named(path: str) -> bool:
    values = set(constants().values())
    folders = {names.PROFILER_DIR, names.NVML_DIR, names.ANALYSIS_DIR, names.ULTRALYTICS_DIR, names.SWEEP_DIR}
    files = {v for v in values if "/" not in v and "." in v.strip(".")}
    files |= {f"{t}.{ext}" for t in names.KEY_AVERAGES_TABLES for ext in ("txt", "json")}
    if path in values:
        return True
    folder, _, file = path.partition("/")
    return folder in folders and (file in files or "*" in file or "<" in file)


def documented_tags(text: str) -> list[str]:
    spans = first_column_spans(section(text, "Tags")) + code_spans(text)
    tags = {t.strip() for span in spans for t in span.split(",")}
    return sorted(t for t in tags if re.match(r"^(yolo_mlops|mlflow)\.[\w.<>*]+$", t) and "/" not in t)


def documented_artifacts(text: str) -> list[str]:
    # outside the Artifacts table, a path-like span is an artifact unless it is a file of this repository
    spans = set(first_column_spans(section(text, "Artifacts"))) | {
        s for s in code_spans(text) if _PATH.match(s) and not (ROOT / s).exists()}
    return sorted(p for span in spans for p in expand_braces(span))


def doc_tokens(text: str) -> set[str]:
    """Backticked names of the doc, comma lists split and `{a,b}` expanded."""
    return {t.strip() for span in code_spans(text) for part in span.split(", ") for t in expand_braces(part)}


def mentions(token: str, value: str) -> bool:
    """`token` documents the constant `value`: the name itself, a name in a documented group, a file in a
    folder, the folder of a file, or a key_averages stem with its file suffix."""
    if token == value:
        return True
    if value.endswith((".", "/")):
        return token.startswith(value)
    file = token.rsplit("/", 1)[-1]
    return token.endswith("/" + value) or token.startswith(value + "/") or file.startswith(value + ".")


TEXT = DOC.read_text()


@pytest.mark.parametrize("attr", sorted(constants()))
def test_every_name_constant_is_documented(attr):
    value = constants()[attr]
    assert any(mentions(token, value) for token in doc_tokens(TEXT)), \
        f"names.{attr} = {value!r} is not in docs/mlflow.md"


@pytest.mark.parametrize("tag", documented_tags(TEXT))
def test_every_documented_tag_is_a_constant(tag):
    assert tag_is_named(tag), f"docs/mlflow.md documents tag {tag!r}, which names.py does not define"


@pytest.mark.parametrize("path", documented_artifacts(TEXT))
def test_every_documented_artifact_is_a_constant(path):
    assert artifact_is_named(path), f"docs/mlflow.md documents artifact {path!r}, which names.py does not define"


def test_the_doc_lists_the_run_layout():
    # the parsers above must find the tables they check, or the parametrized tests check nothing
    assert {names.RUN_KIND, names.SERIES_KEY, names.GIT_COMMIT_TAG} <= set(documented_tags(TEXT))
    assert {names.ENV_JSON, names.STEP_TIMES_CSV, f"{names.NVML_DIR}/{names.NVML_TIMELINE_CSV}"} <= set(
        documented_artifacts(TEXT))


def test_the_checks_reject_unknown_names():
    assert not tag_is_named("yolo_mlops.no_such_tag")
    assert tag_is_named(names.APPLIED_PREFIX + "amp")
    assert not artifact_is_named("analysis/no_such_file.json")
    assert not artifact_is_named("elsewhere/report.md")
    assert artifact_is_named(f"{names.PROFILER_DIR}/{names.KEY_AVERAGES_MEMORY}.txt")
    assert expand_braces("p/k_{a,b}.txt") == ["p/k_a.txt", "p/k_b.txt"]
    assert not mentions("yolo_mlops.errorz", names.ERROR) and not mentions("yolo_mlops.analysis_error", names.ERROR)
    assert mentions("train.torch.*", names.TORCH_PARAM) and mentions("nvml/nvml_meta.json", names.NVML_META_JSON)
