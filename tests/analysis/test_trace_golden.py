"""The analysis JSON of the fixtures and of generated traces equals the stored golden JSON (produced by the loader
before its threaded, parallel and multi-member reading existed): however a trace is stored and read (one gzip
stream, or indexed gzip members read by one process or by several), the results are the same.

Regenerate (only when an analysis deliberately changes): `.venv/bin/python tests/analysis/test_trace_golden.py`.
"""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from parallel_reading import as_members, force_parallel_reading  # noqa: E402
from trace_golden_gen import trace_text  # noqa: E402

from yolo_mlops.analysis.loading import parallel as parallel_reader  # noqa: E402
from yolo_mlops.cli.analyze import analyze_command  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
GPU_TRACES = ROOT / "tests" / "fixtures" / "gpu_traces"
GOLDEN = ROOT / "tests" / "fixtures" / "trace_golden"
FIXTURES = ["v100_compute_rank0.json.gz", "a100_nccl_rank0.json.gz", "small_comm_rank0.json.gz"]
GENERATED = {"generated_kineto": ("kineto", 30_000), "generated_compact": ("compact", 30_000)}


def analysis_json(path: Path) -> dict:
    """`yolo-mlops analyze PATH --format json`, with the file's location reduced to its name."""
    doc = json.loads(analyze_command(str(path), "json"))
    doc["source"] = Path(doc["source"]).name
    for rank in doc["ranks"]:
        rank["path"] = Path(rank["path"]).name
    return doc


def write_generated(folder: Path, name: str) -> Path:
    layout, events = GENERATED[name]
    path = folder / f"{name}.json.gz"
    with gzip.open(path, "wt", compresslevel=1) as out:
        out.write(trace_text(events, layout=layout))
    return path


@pytest.fixture
def parts(monkeypatch) -> list[int]:
    return force_parallel_reading(monkeypatch)


def golden(name: str) -> dict:
    return json.loads((GOLDEN / f"{name}.json").read_text())


@pytest.mark.parametrize("fixture", FIXTURES)
def test_fixture_analysis_equals_golden(fixture):
    assert analysis_json(GPU_TRACES / fixture) == golden(fixture.split(".")[0])


@pytest.mark.parametrize("name", sorted(GENERATED))
def test_generated_trace_analysis_equals_golden(tmp_path, name):
    expected = golden(name)
    got = analysis_json(write_generated(tmp_path, name))
    got["source"] = expected["source"]
    for rank, want in zip(got["ranks"], expected["ranks"], strict=True):
        rank["path"] = want["path"]
    assert got == expected


def _same_but_for_location(got: dict, expected: dict) -> bool:
    got["source"] = expected["source"]
    for rank, want in zip(got["ranks"], expected["ranks"], strict=True):
        rank["path"] = want["path"]
    return got == expected


@pytest.mark.parametrize("fixture", FIXTURES)
def test_fixture_as_members_read_in_parallel_equals_golden(tmp_path, fixture, parts):
    path = as_members(GPU_TRACES / fixture, tmp_path / fixture)
    assert _same_but_for_location(analysis_json(path), golden(fixture.split(".")[0]))
    assert len(parts) == 2


@pytest.mark.parametrize("name", sorted(GENERATED))
@pytest.mark.parametrize("parallel", [True, False])
def test_generated_trace_as_members_equals_golden(tmp_path, name, parallel, parts, monkeypatch):
    if not parallel:
        monkeypatch.setattr(parallel_reader, "parallel_processes", lambda: 1)
    (tmp_path / "members").mkdir()  # same file name: the warnings name the file
    path = as_members(write_generated(tmp_path, name), tmp_path / "members" / f"{name}.json.gz")
    assert _same_but_for_location(analysis_json(path), golden(name))
    assert len(parts) == (2 if parallel else 0)


def _regenerate() -> None:
    import tempfile

    GOLDEN.mkdir(parents=True, exist_ok=True)
    for fixture in FIXTURES:
        doc = analysis_json(GPU_TRACES / fixture)
        (GOLDEN / f"{fixture.split('.')[0]}.json").write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    with tempfile.TemporaryDirectory() as tmp:
        for name in GENERATED:
            doc = analysis_json(write_generated(Path(tmp), name))
            (GOLDEN / f"{name}.json").write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    _regenerate()
