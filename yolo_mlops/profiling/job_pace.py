"""A data-parallel job's step times: its pace, the slowest rank in each step.

DDP's collectives hold every rank to the slowest one, so a job's step takes as long as its slowest rank's: the
job's step i is the row of the rank whose step i took longest, with every rank's images of step i (the job's
throughput is all its images at that pace). The ranks run the same steps; a rank that ended with fewer rows (a
job cut short) bounds the job's steps. Sweeps, the nightly and `compare` read a job through these step times
(`analysis/step_times.csv` of the job's run, beside each rank's `analysis/rank<r>/step_times.csv`).
"""

from __future__ import annotations

import numpy as np

from yolo_mlops.profiling.step_timer import StepTimes


def job_pace(ranks: list[StepTimes]) -> StepTimes:
    """Each step's slowest rank's row, with the images of every rank; profiled when any rank's step was."""
    if not ranks:
        raise ValueError("a job's pace needs the step times of at least one rank")
    steps = min(len(r) for r in ranks)
    durations = np.vstack([r.step_ms[:steps] for r in ranks])  # rank x step
    slowest = np.argmax(durations, axis=0) if steps else np.zeros(0, dtype=int)
    picked = np.arange(steps)

    def column(name: str) -> np.ndarray:
        table = np.vstack([getattr(r, name)[:steps] for r in ranks])
        return table[slowest, picked]

    return StepTimes(
        start_ns=column("start_ns").astype(np.int64),
        batch_ns=column("batch_ns").astype(np.int64),
        end_ns=column("end_ns").astype(np.int64),
        profiled=np.asarray(np.vstack([r.profiled[:steps].astype(bool) for r in ranks]).any(axis=0)),
        images=np.vstack([r.images[:steps] for r in ranks]).sum(axis=0).astype(np.int64),
    )
