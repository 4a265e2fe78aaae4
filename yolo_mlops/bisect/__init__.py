"""Automatic bisection of a slowdown: which commit between a good and a bad one made training slower.

- `git`: revisions, the commit range, one installed copy of the code per commit (worktrees, removed at once).
- `decide`: the statistics of each step (pure): the premise (bad slower than good beyond noise) and each
  candidate's verdict, good or bad or inconclusive, with the simulation of their error rates.
- `runner`: checks, profiled runs in the commits' code, the bisection, the report and its MLflow record.

`yolo-mlops bisect` and the Prefect flow `flows/bisection.py:bisect` run it (docs/trends.md, "Bisect").
"""

from __future__ import annotations

from yolo_mlops.bisect.runner import BisectPlan, BisectRequest, BisectResult, prepare, report, run

__all__ = ["BisectPlan", "BisectRequest", "BisectResult", "prepare", "report", "run"]
