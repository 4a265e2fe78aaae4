"""Automatic bisection of a slowdown: which commit between a good and a bad one made training slower.

- `models`: the request, the plan, the profiled runs, the steps and the result (plain data).
- `checks`: every check before a run is made (`prepare`): settings, repository and range, workload, and the
  series' history at the good commit.
- `workload`: the workload's run and series, and its RunSpec (rebuilt by the params codec when it logged none).
- `git`: revisions, the commit range, one installed copy of the code per commit (worktrees, removed at once).
- `commit_process`: one profiled run in a commit's code (the file a process of its own runs).
- `commit_runs`: the profiled runs, one bounded process each, children of the bisection's MLflow run.
- `decide`: the statistics of each step (pure): the premise (bad slower than good beyond noise) and each
  candidate's verdict, good or bad or inconclusive, with the simulation of their error rates.
- `search`: the premise, then the halving of the range, and the first bad commit's shift.
- `bisection_report`: the report and the exit code.
- `bisection`: a bisection end to end under one parent MLflow run (`run_bisection`).
- `trigger`: hands a regression's commit range to the `bisect` deployment.

`yolo-mlops bisect` and the Prefect flow `flows/bisection.py:bisect` run it (docs/trends.md, "Bisect").
"""

from __future__ import annotations

from yolo_mlops.bisect.bisection import run_bisection
from yolo_mlops.bisect.bisection_report import exit_code
from yolo_mlops.bisect.checks import prepare
from yolo_mlops.bisect.models import BisectPlan, BisectRequest, BisectResult

__all__ = ["BisectPlan", "BisectRequest", "BisectResult", "exit_code", "prepare", "run_bisection"]
