"""One profiled run of a bisection, in the code of the commit being measured.

Started by `commit_runs` as `python -P <this file> SPEC_YAML` with `PYTHONPATH=<that commit's installed copy>`:
this file is the bisecting installation's own (a commit from before it existed has none), while every
`yolo_mlops` module it imports is the commit's. `-P` keeps this file's folder off `sys.path`, so nothing in it
shadows a module. It runs the steps of `flows/profile_training.py` without Prefect (the bisection holds the
GPU's limit around the whole process): `pipeline.prepare`, then `train`, `analyze` (`analyse` in older code),
`track` inside `run_guard` with the pipeline's `RunSalvage`, and prints `RUN_ID_MARK<run id>` as soon as the
MLflow run exists. Code older than those steps exits with UNSUPPORTED_EXIT after printing UNSUPPORTED_MARK: the caller
then runs that commit's own command line.

Nothing here imports `yolo_mlops` at module level: the marks must be importable from the bisecting code
without loading a commit's package, and the commit's package must be loaded only inside `main`.
"""

from __future__ import annotations

import importlib
import signal
import sys
from typing import Any

RUN_ID_MARK = "BISECT_RUN_ID="
UNSUPPORTED_MARK = "BISECT_COMMIT_PROCESS_UNSUPPORTED"
UNSUPPORTED_EXIT = 3


def _stop(number: int, _frame: Any) -> None:
    raise KeyboardInterrupt(signal.Signals(number).name)  # run_guard ends the MLflow run KILLED


def _steps() -> tuple[Any, Any, Any, Any, Any]:
    """(pipeline module, its analysis step, load_run_spec, tracking client factory, run_guard) of the commit's
    code. The analysis step is `analyze`, or `analyse` in code from before the spelling was made one."""
    pipeline = importlib.import_module("yolo_mlops.run.pipeline")
    load_run_spec = importlib.import_module("yolo_mlops.config").load_run_spec
    try:
        client = importlib.import_module("yolo_mlops.tracking.connection").client
        run_guard = importlib.import_module("yolo_mlops.tracking.run_end").run_guard
    except ImportError:  # code from before tracking/ had these modules: the package itself forwarded both
        tracking = importlib.import_module("yolo_mlops.tracking")
        client, run_guard = tracking.client, tracking.run_guard
    for step in ("prepare", "train", "track", "RunSalvage"):
        getattr(pipeline, step)
    analyze = getattr(pipeline, "analyze", None) or pipeline.analyse
    return pipeline, analyze, load_run_spec, client, run_guard


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -P commit_process.py SPEC_YAML", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, _stop)
    try:
        pipeline, analyze, load_run_spec, client, run_guard = _steps()
    except (ImportError, AttributeError) as exc:
        print(UNSUPPORTED_MARK, exc, flush=True)
        return UNSUPPORTED_EXIT
    spec = load_run_spec(args[0])
    prepared = pipeline.prepare(spec)
    print(RUN_ID_MARK + prepared.run_id, flush=True)
    mlflow = client()
    with run_guard(mlflow, prepared.run_id, salvage=pipeline.RunSalvage(mlflow, prepared)):
        outcome = pipeline.train(prepared)
        analysis = analyze(prepared, outcome)
        pipeline.track(prepared, outcome, analysis)
    return 0


if __name__ == "__main__":
    sys.exit(main())
