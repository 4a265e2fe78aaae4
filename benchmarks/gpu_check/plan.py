"""The GPU checks' steps in priority order, with the command that checks each one in a dry run."""

from __future__ import annotations

from collections.abc import Callable

from .env_step import cmd_env, judge_env
from .memory import cmd_memory_by_holder, judge_memory_by_holder
from .overhead import cmd_overhead, judge_overhead
from .pytest_steps import cmd_diagnosis_tests, cmd_nvml_tests, judge_pytest
from .runner import Checks, Step
from .smoke import (
    cmd_ddp,
    cmd_smoke,
    cmd_trace_analysis,
    dry_trace_analysis,
    judge_ddp,
    judge_smoke,
    judge_trace_analysis,
)
from .sweeps import cmd_sweep, cmd_sweep_devices, cmd_sweep_fixes, judge_sweep


def dry_script(script: str, *extra: str) -> Callable[[Checks], list[str]]:
    """Dry-run check: the step's own command with --dry-run (imports, config, plan; no CUDA call)."""

    def build(ch: Checks) -> list[str]:
        command = next(s for s in STEPS if s.name == script).command(ch)
        assert isinstance(command, list)
        return [*command, "--dry-run", *extra]

    return build


def dry_help(step_name: str) -> Callable[[Checks], list[str]]:
    """Dry-run check for a script without a dry-run mode: --help must offer every option the step passes."""

    def build(ch: Checks) -> list[str]:
        command = next(s for s in STEPS if s.name == step_name).command(ch)
        assert isinstance(command, list)
        return [*command[:2], "--help"]

    return build


# Priority order. The H100 run of 2026-12-06 (docs/gpu.md) measured: install 6 s, environment 19-21 s,
# gpu_smoke 47 s, trace_analysis 0.7 s, gpu_ddp 54 s, nvml_tests 14 s, diagnosis_tests 34 s, and 4 overhead
# children in 118 s, not 5 (at most 59 s a pair); the fixes' sweep is not yet measured (its compile child
# compiles YOLO11n first). The steps with a reserve are the ones that must finish within the 420 s of
# run_gpu_checks.sh; the others run as time allows (`--only` runs them on their own).
STEPS: list[Step] = [
    Step("environment", False, 60, 30, 30, cmd_env, judge_env),
    Step("gpu_smoke", True, 100, 55, 55, cmd_smoke, judge_smoke, dry_script("gpu_smoke")),
    Step("trace_analysis", False, 30, 5, 5, cmd_trace_analysis, judge_trace_analysis, dry_trace_analysis),
    Step("gpu_ddp", True, 100, 60, 60, cmd_ddp, judge_ddp, dry_script("gpu_ddp")),
    Step(
        "instrumentation_overhead",
        True,
        220,
        140,
        140,
        cmd_overhead,
        judge_overhead,
        dry_help("instrumentation_overhead"),
    ),
    Step(
        "gpu_sweep_fixes",
        True,
        200,
        110,
        110,
        cmd_sweep_fixes,
        judge_sweep("gpu_sweep_fixes"),
        dry_script("gpu_sweep_fixes"),
    ),
    # as time allows
    Step(
        "nvml_tests", True, 60, 20, 0, cmd_nvml_tests, judge_pytest, lambda ch: [*cmd_nvml_tests(ch), "--collect-only"]
    ),
    Step(
        "diagnosis_tests",
        True,
        90,
        40,
        0,
        cmd_diagnosis_tests,
        judge_pytest,
        lambda ch: [*cmd_diagnosis_tests(ch), "--collect-only"],
    ),
    Step(
        "memory_by_holder", True, 60, 25, 0, cmd_memory_by_holder, judge_memory_by_holder, dry_help("memory_by_holder")
    ),
    Step("gpu_sweep", True, 200, 150, 0, cmd_sweep, judge_sweep("gpu_sweep"), dry_script("gpu_sweep")),
    Step(
        "gpu_sweep_devices",
        True,
        150,
        90,
        0,
        cmd_sweep_devices,
        judge_sweep("gpu_sweep_devices"),
        dry_script("gpu_sweep_devices"),
    ),
]
