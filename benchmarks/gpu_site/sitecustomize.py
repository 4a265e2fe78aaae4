"""Start-up hook of the GPU checks (on PYTHONPATH only while `benchmarks/run_gpu_checks.sh` runs).

polars (a 52 MiB wheel) is not carried to the GPU machine. The project's trainer reads results.csv with
pandas, but the plain (uninstrumented) arm of the overhead benchmark uses ultralytics' own trainer, which
imports polars in exactly one place: `BaseTrainer.read_results_csv`, which copies results.csv into the last checkpoint
when training ends. When polars is missing, this hook replaces that one method, as soon as
`ultralytics.engine.trainer` is imported, by the same read done with pandas (column -> list of values,
`{}` when the file cannot be read, as the original returns). Nothing else changes; with polars installed
the hook does nothing. Any other `sitecustomize` on sys.path (the interpreter's own) still runs.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys

_TARGET = "ultralytics.engine.trainer"


def _read_results_csv(self) -> dict:
    import pandas as pd

    try:
        return pd.read_csv(self.csv).to_dict(orient="list")
    except Exception:  # noqa: BLE001 - mirrors ultralytics: no results.csv (or an unreadable one) -> {}
        return {}


class _PatchTrainer(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds nothing itself; wraps the loader of ultralytics.engine.trainer to patch the module once run."""

    def find_spec(self, fullname, path, target=None):
        if fullname != _TARGET:
            return None
        sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None:
            return spec
        self._loader = spec.loader
        spec.loader = self
        return spec

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        self._loader.exec_module(module)
        module.BaseTrainer.read_results_csv = _read_results_csv
        module.BaseTrainer._results_csv_reader = "pandas (gpu checks: polars not carried)"


def _chain_next_sitecustomize() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or ".") != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is not None and spec.loader is not None:
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)


if importlib.util.find_spec("polars") is None:
    sys.meta_path.insert(0, _PatchTrainer())
_chain_next_sitecustomize()
