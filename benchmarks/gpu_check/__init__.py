"""The GPU checks run by benchmarks/run_gpu_checks.sh (entry point: benchmarks/gpu_checks.py): the step runner,
one module per step or group of steps, the steps' plan and the report."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "benchmarks"
