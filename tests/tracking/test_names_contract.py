"""docs/mlflow.md and yolo_mlops/names.py describe the same names.

Both directions: every name constant appears (in backticks) in the doc, and every `yolo_mlops.*` /
`mlflow.*` tag and every artifact path the doc lists is a constant, a documented prefix constant plus a
suffix, or a folder constant plus a file constant (artifact paths with `*` or `<...>` are families inside
a folder constant).
"""

from __future__ import annotations

import itertools
import json
import re
from pathlib import Path

import metric_groups
import pytest

from yolo_mlops import names

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
        s for s in code_spans(text) if _PATH.match(s) and not (ROOT / s).exists()
    }
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
    assert any(mentions(token, value) for token in doc_tokens(TEXT)), (
        f"names.{attr} = {value!r} is not in docs/mlflow.md"
    )


@pytest.mark.parametrize("tag", documented_tags(TEXT))
def test_every_documented_tag_is_a_constant(tag):
    assert tag_is_named(tag), f"docs/mlflow.md documents tag {tag!r}, which names.py does not define"


@pytest.mark.parametrize("path", documented_artifacts(TEXT))
def test_every_documented_artifact_is_a_constant(path):
    assert artifact_is_named(path), f"docs/mlflow.md documents artifact {path!r}, which names.py does not define"


def test_the_doc_lists_the_run_layout():
    # the parsers above must find the tables they check, or the parametrized tests check nothing
    assert {names.RUN_KIND, names.SERIES_KEY, names.GIT_COMMIT_TAG} <= set(documented_tags(TEXT))
    assert {names.ENV_JSON, names.STEP_TIMES_CSV, names.NVML_TIMELINE_CSV} <= set(documented_artifacts(TEXT))


def test_the_checks_reject_unknown_names():
    assert not tag_is_named("yolo_mlops.no_such_tag")
    assert tag_is_named(names.APPLIED_PREFIX + "amp")
    assert not artifact_is_named("analysis/no_such_file.json")
    assert not artifact_is_named("elsewhere/report.md")
    assert artifact_is_named(f"{names.PROFILER_DIR}/{names.KEY_AVERAGES_MEMORY}.txt")
    assert expand_braces("p/k_{a,b}.txt") == ["p/k_a.txt", "p/k_b.txt"]
    assert not mentions("yolo_mlops.errorz", names.ERROR) and not mentions("yolo_mlops.analysis_error", names.ERROR)
    assert mentions("train.torch.*", names.TORCH_PARAM) and mentions("nvml/nvml_meta.json", names.NVML_META_JSON)


# metrics ------------------------------------------------------------------------------------------------------
# The Metrics section (and the sweep list below it) names each metric or a pattern of them: `<x>` stands for
# one name part, `*` for any, `{a,b}` for either. A bare `group/*` only points at a full list elsewhere, so it
# documents nothing here. `rank<r>/...` is a rank's own copy of a metric.
METRIC_GROUPS = (*metric_groups.METRIC_GROUPS, "rank")
_ARTIFACT = re.compile(r"\.(" + "|".join(ARTIFACT_SUFFIXES) + r")$")
RECORDED = json.loads((ROOT / "tests" / "tracking" / "demo_run_names.json").read_text())


def documented_metric_patterns(text: str) -> list[re.Pattern]:
    spans = code_spans(section(text, "Metrics")) + code_spans(section(text, "Sweeps and optimize"))
    tokens = {t.strip() for span in spans for part in span.split(", ") for t in expand_braces(part.strip())}
    out = []
    for token in sorted(tokens):
        if not token.startswith(METRIC_GROUPS) or _ARTIFACT.search(token) or re.fullmatch(r"\w+/\*", token):
            continue
        parts = re.split(r"(<[^>]+>|\*)", token)
        regex = "".join(r"[\w.+-]+" if p.startswith("<") else r"[\w.+-]*" if p == "*" else re.escape(p) for p in parts)
        out.append(re.compile(regex))
    return out


def metric_is_documented(metric: str) -> bool:
    return any(p.fullmatch(metric) for p in documented_metric_patterns(TEXT))


def _every_gpu_metric() -> list[str]:
    """gpu/* names of a summary in which every column of the NVML catalogue and every clocks-event reason
    was measured."""
    import numpy as np

    from yolo_mlops.nvml import METRIC_NAMES, Timeline, align, step_history, summarise
    from yolo_mlops.nvml.backend import CLOCKS_EVENT_REASONS

    s = 1_000_000_000
    columns = {
        m: np.full(3, float(sum(CLOCKS_EVENT_REASONS.values())) if m == "clocks_event_mask" else 1.0 + i)
        for i, m in enumerate(METRIC_NAMES)
    }
    timeline = Timeline(
        "fake", 0, np.array([1, 2, 3], np.int64) * s, np.zeros(3, np.int16), np.full(3, s, np.int64), columns
    )
    aligned = align(timeline, [0, 2 * s], [2 * s, 4 * s], [False, True])
    return sorted(summarise(aligned, 8).as_metrics()) + sorted({n for _, n, _ in step_history(aligned)})


def written_metrics() -> list[str]:
    """Every metric name names.py holds or builds: the constants (prefixes and artifact paths aside), each
    builder for representative arguments, every name of the typed summaries, and the demo run's names."""
    from yolo_mlops.analysis.idle_attribution import IDLE_CAUSES
    from yolo_mlops.nvml.backend import CLOCKS_EVENT_REASONS
    from yolo_mlops.profiling.memory_holders import HOLDERS
    from yolo_mlops.profiling.step_timer import PerfSummary

    out = {
        v
        for v in constants().values()
        if v.startswith(METRIC_GROUPS) and not v.endswith("/") and not _ARTIFACT.search(v)
    }
    out |= {names.gpu_idle_cause_metric(c) for c in IDLE_CAUSES}
    out |= {names.clocks_event_metric(r) for r in CLOCKS_EVENT_REASONS}
    out |= {names.memory_peak_metric(h) for h in HOLDERS}
    out |= {names.min_detectable_shift_metric(m) for m in (names.STEP_TIME_P50, names.GPU_SM_UTIL_MEAN)}
    out |= set(names.optimize_saving_metrics("amp_bf16").values())
    out |= set(names.sweep_variant_metrics("amp_bf16__channels_last").values())
    out |= {names.trace_host_metric(c) for c in ("data_loader", "cuda_sync", "optimizer", "forward_loss")}
    out |= {
        names.trace_memory_metric(d, s)
        for d in ("gpu", "cpu")
        for s in ("peak_allocated_gib", "peak_reserved_gib", "growth_mib_per_step")
    }
    out |= {names.train_metric("box_loss"), names.val_metric("precision"), names.val_metric("box_loss")}
    out |= set(PerfSummary(1.0, 2.0, 1.5, 10.0, 5.0, 0.1, 3, 4, step_time_ms_p50_profiled=2.0).as_metrics())
    out |= set(_every_gpu_metric())
    out |= {names.rank_metric(1, m) for m in (names.STEP_TIME_P50, names.STEP_TIME_MS, names.COMM_EXPOSED_PCT)}
    out |= set(RECORDED["metrics"])
    return sorted(out)


@pytest.mark.parametrize("metric", written_metrics())
def test_every_metric_name_is_documented(metric):
    assert metric_is_documented(metric), f"metric {metric!r} (names.py) is not in docs/mlflow.md's Metrics section"


def test_the_metric_check_sees_the_doc_and_rejects_unknown_names():
    assert len(documented_metric_patterns(TEXT)) > 40 and len(written_metrics()) > 100
    assert metric_is_documented(names.STEP_TIME_P90) and metric_is_documented(names.clocks_event_metric("x_y"))
    assert metric_is_documented(names.sweep_variant_metrics("amp")["ci_low"])
    assert not metric_is_documented("perf/no_such_metric") and not metric_is_documented("gpu/no_such_thing")
    assert not metric_is_documented("trace/host_data_loader_ms")


def test_every_name_is_bound_once():
    """A second assignment of a constant silently replaces the first (a tag and an artifact path that share a
    name would log the tag under the path): every module-level name of names.py is assigned once."""
    import ast
    import inspect

    tree = ast.parse(inspect.getsource(names))
    bound = [
        target.id
        for node in tree.body
        if isinstance(node, ast.Assign | ast.AnnAssign)
        for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
        if isinstance(target, ast.Name)
    ]
    twice = sorted({n for n in bound if bound.count(n) > 1})
    assert not twice, f"names.py assigns {', '.join(twice)} more than once"
