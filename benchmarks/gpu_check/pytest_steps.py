"""The pytest steps: the tests only a GPU can run, of the installed tree (benchmarks/gpu_pytest.py)."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from . import BENCH, ROOT
from .output import last_line

if TYPE_CHECKING:
    from .runner import Checks, StepRun


def _pytest(ch: Checks, *args: str) -> list[str]:
    """pytest of the installed tree (benchmarks/gpu_pytest.py), tests named by absolute path."""
    return [ch.py, str(BENCH / "gpu_pytest.py"), *args]


def cmd_nvml_tests(ch: Checks) -> list[str]:
    return _pytest(ch, str(ROOT / "tests" / "nvml"), "-q")


# The diagnosis tests that only a GPU can run: a planted `.item()` every step must be the sync finding, and
# the CUDA allocator snapshot must cover the profiled window (their CPU siblings in the files run too).
DIAGNOSIS_GPU_TESTS = (
    "tests/analysis/test_planted_bottlenecks.py::test_sync_every_step_is_the_sync_finding",
    "tests/analysis/test_cuda_memory_snapshot.py",
)


def cmd_diagnosis_tests(ch: Checks) -> list[str]:
    return _pytest(ch, *(str(ROOT / t) for t in DIAGNOSIS_GPU_TESTS), "-q", "-s")


_TESTED_TREE = re.compile(r"^gpu_pytest: yolo_mlops from (\S+), yolo_mlops\.flows from (\S+)$", re.MULTILINE)


def judge_pytest(ch: Checks, run: StepRun, output: str) -> None:
    counts = {kind: int(n) for n, kind in re.findall(r"(\d+) (passed|failed|errors?|skipped)", last_line(output, 3))}
    tree = _TESTED_TREE.search(output)
    run.result = {
        "counts": counts,
        "yolo_mlops_from": tree.group(1) if tree else None,
        "tail": output.strip().splitlines()[-15:],
    }
    run.status = "passed" if run.rc == 0 and counts.get("passed") else "failed"
    run.note = ", ".join(f"{n} {k}" for k, n in counts.items()) or last_line(output)
