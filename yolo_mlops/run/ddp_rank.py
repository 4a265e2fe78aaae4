"""One rank of a data-parallel job: `python -m yolo_mlops.run.ddp_rank JOB_DIR`, started by torchrun.

torchrun sets RANK, LOCAL_RANK and WORLD_SIZE; the job's TrainingPlan waits in JOB_DIR (written by `run.ddp`).
The rank trains with its own profiler window, step timer, phase labels and NVML sampler (its own GPU), writes
its traces, tables and step times under its rank folders of the run, and leaves its TrainingOutcome for the
launcher. A failure leaves a one-line reason beside the traceback, so the job fails naming the rank and why.

YOLO_MLOPS_RANK_SETUP=module:function names a function called with the rank before its trainer is built: how
an integration adds ultralytics callbacks (or anything else) to every rank, since the launching process's
state does not cross into the ranks.
"""

from __future__ import annotations

import importlib
import os
import sys
import traceback
from dataclasses import replace
from pathlib import Path

from yolo_mlops.run import ddp
from yolo_mlops.run.offline import configure_ultralytics

RANK_SETUP_ENV = "YOLO_MLOPS_RANK_SETUP"


def main(job_dir: Path) -> int:
    rank = int(os.environ["RANK"])
    try:
        plan = replace(ddp.read_plan(job_dir), rank=rank)
        from yolo_mlops.config import data_home

        configure_ultralytics(data_home())
        _rank_setup(rank)
        from yolo_mlops.run import training

        outcome = training.train(plan)
        ddp.write_outcome(job_dir, rank, outcome)
        return 0
    except BaseException as exc:
        ddp.write_failure(job_dir, rank, exc, "".join(traceback.format_exception(exc)))
        raise


def _rank_setup(rank: int) -> None:
    target = os.environ.get(RANK_SETUP_ENV)
    if not target:
        return
    module, _, function = target.partition(":")
    getattr(importlib.import_module(module), function)(rank)


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
