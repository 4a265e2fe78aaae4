"""Driver of `benchmarks/run_gpu_checks.sh`: every GPU check, in priority order, within one time budget.

Each step runs as a child process with its own time limit: what is left of the budget, less what the later
priority steps reserve, but never less than the step's own need (later steps give way to earlier ones, not the
other way round), capped on a GPU by the step's own maximum (a CPU rehearsal has only the budget; a dry run,
which measures nothing, only a hang guard per child, since a busy machine is slower, not broken). A step starts
only with its need left. After every step OUT/summary.json and OUT/summary.md are rewritten, so a run cut short
still leaves every finished step's results.

Every child runs in a scratch folder outside the repository: `python -m ...` puts its working directory first
on sys.path, and in the repository root that is the source tree's `yolo_mlops` (no `yolo_mlops.flows`), not the
installed one. pytest runs through benchmarks/gpu_pytest.py, which says which tree it imports and refuses any
other than the install.

Files under OUT (five; the GPU machine returns at most eight, two folders deep):
  summary.json       every measured value and check, per step, with the host's versions
  summary.md         the same, short, for a person (printed at the end too)
  checks.log         every step's output (progress bars dropped), in step order
  key_averages.txt   the smoke run's key_averages tables
  trace/<name>.pt.trace.json.gz   the smoke run's Chrome trace (opens in Perfetto, TensorBoard and HTA)

Modes:
  (default)          a run on the GPU `--device` (default 0)
  --dry-run          the environment step, then each later step's command checked without running it
                     (argument parsing, imports, run config, sweep plan); stops before the first CUDA step
  --rehearse-on-cpu  every step on the CPU at tiny sizes: proves the plumbing, measures nothing about GPUs
                     (CUDA checks are recorded as not applicable, never as passed)

    python3 benchmarks/gpu_checks.py --out OUT [--budget-s 410] [--dry-run | --rehearse-on-cpu] [--only a,b]

The steps live in benchmarks/gpu_check/ (runner.py, one module per step or group, plan.py, report.py).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path

# the steps' package sits beside this file: on sys.path when it runs as a script (as run_gpu_checks.sh runs it),
# put there when it is loaded from its path
HERE = str(Path(__file__).resolve().parent)
if HERE not in sys.path:
    sys.path.insert(0, HERE)

from gpu_check.env_step import env_report  # noqa: E402
from gpu_check.plan import STEPS  # noqa: E402
from gpu_check.runner import Checks  # noqa: E402


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT") or "gpu-check-output"))
    parser.add_argument("--budget-s", type=float, default=410.0, help="wall-clock budget of all steps together")
    parser.add_argument("--device", default="0", help="CUDA device index")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--dry-run", action="store_true", help="stop before the first CUDA step; check the others")
    mode.add_argument("--rehearse-on-cpu", action="store_true", help="every step on the CPU at tiny sizes")
    parser.add_argument("--only", default="", help="comma-separated step names to run (environment always runs)")
    parser.add_argument("--env-report", type=Path, help=argparse.SUPPRESS)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.env_report:
        return env_report(args.env_report)
    only = {s.strip() for s in args.only.split(",") if s.strip()}
    unknown = only - {s.name for s in STEPS}
    if unknown:
        print(f"gpu_checks: unknown step(s) {sorted(unknown)}; steps are {[s.name for s in STEPS]}")
        return 2
    ch = Checks(args, STEPS)
    print(f"gpu_checks: {ch.mode}, budget {args.budget_s:.0f} s, output {ch.out}, work {ch.work}", flush=True)
    stopped = False
    for i, step in enumerate(STEPS):
        if only and step.name not in only and step.name != "environment":
            continue
        if ch.mode == "dry-run" and step.cuda and not stopped:
            stopped = True
            print(
                f"gpu_checks: dry run stops before the first CUDA step ({step.name}); "
                "checking the remaining steps' commands without running them",
                flush=True,
            )
        if stopped:
            run = ch.validate_step(step)
        else:
            # a dry run only checks the later steps' commands, so they reserve none of the budget
            later = [s for s in STEPS[i + 1 :] if not only or s.name in only]
            reserve = 0 if ch.mode == "dry-run" else sum(s.reserve_s for s in later)
            run = ch.run_step(step, reserve)
        ch.write()
        print(
            f"[{run.name}] {run.status}"
            + (f" in {run.seconds} s" if run.seconds is not None else "")
            + (f": {run.note}" if run.note else ""),
            flush=True,
        )
    ch.write()
    print()
    print((ch.out / "summary.md").read_text())
    if ch.mode == "dry-run":
        shutil.rmtree(ch.work, ignore_errors=True)
    bad = [r for r in ch.runs if r.status in ("failed", "error", "timeout")]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
