"""What a rank's training thread did in each profiled step, read from the phase labels: the time of each phase,
and whether the step held an epoch boundary and what the boundary's work was.

The profiler's steps run from one `profiler.step()` to the next, so the work between an epoch's last batch and
the next epoch's first (ultralytics' epoch end: EMA update, validation, the checkpoint, the stop broadcast; then
the next epoch's start: its sampler and loader) falls inside the step of the next epoch's first batch. The
trainer labels that work `epoch_end`, with `validation` and `checkpoint` inside it. A trace written before those
labels still shows the boundary: the step holds two `data_wait` spans (the one opened after the epoch's last
batch, closed when the epoch ended, and the new epoch's), and the time between them is the epoch's end.

Activities, in ms of the step (each instant of the training thread to one of them, labels nested inside
`epoch_end` taken out of it):
- `checkpoint`, `validation`: the labelled work of an epoch's end;
- `epoch_end`: the rest of the epoch's end;
- `epoch_start`: the data wait of a new epoch's first batch (its loader starting);
- `data_wait`, `preprocess`, `forward_loss`, `backward`, `optimizer_step`: the step's own phases.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from yolo_mlops.analysis.host import Steps
from yolo_mlops.analysis.trace_loader import RankTrace
from yolo_mlops.labels import BOUNDARY_LABELS, CHECKPOINT_LABEL, EPOCH_END_LABEL, PHASE_LABEL_PREFIX, VALIDATION_LABEL

DATA_WAIT = "data_wait"
EPOCH_END = EPOCH_END_LABEL
EPOCH_START = "epoch_start"
VALIDATION = VALIDATION_LABEL
CHECKPOINT = CHECKPOINT_LABEL
# what each activity is called where a finding or report names what a rank was doing
ACTIVITY_TEXT = {
    CHECKPOINT: "saving a checkpoint",
    VALIDATION: "validation",
    EPOCH_END: "the epoch's end",
    EPOCH_START: "starting the next epoch (its data loader)",
    DATA_WAIT: "data loading",
    "preprocess": "preprocessing",
    "forward_loss": "its forward pass and loss",
    "backward": "its backward pass",
    "optimizer_step": "its optimizer step",
}


@dataclass
class StepActivity:
    """One profiled step of one rank."""

    step: int  # N of ProfilerStep#N
    boundary: bool  # the step held an epoch boundary
    ms: dict[str, float] = field(default_factory=dict)  # activity -> ms of the step (see the module docstring)


def step_activities(trace: RankTrace, host: np.ndarray, steps: Steps) -> list[StepActivity]:
    """Each profiled step's activities from the phase labels; empty activities for a trace without labels."""
    wanted = [i for i, name in enumerate(trace.names) if name.startswith(PHASE_LABEL_PREFIX)]
    events = np.flatnonzero(host & trace.name_mask(wanted)) if wanted else np.zeros(0, dtype=np.int64)
    events = events[np.argsort(trace.ts[events], kind="stable")]
    step_of = steps.index_of(trace.ts[events])
    result = []
    for i in range(steps.count):
        lo, hi = float(steps.start[i]), float(steps.end[i])
        spans = [
            (trace.names[int(trace.name_id[e])][len(PHASE_LABEL_PREFIX) :], float(trace.ts[e]), float(trace.dur[e]))
            for e in events[step_of == i]
        ]
        result.append(_activity(int(steps.number[i]), spans, lo, hi))
    return result


def _activity(step: int, spans: list[tuple[str, float, float]], lo: float, hi: float) -> StepActivity:
    ms: dict[str, float] = {}

    def add(name: str, us: float) -> None:
        if us > 0:
            ms[name] = ms.get(name, 0.0) + us / 1000

    data_waits = [(ts, min(ts + dur, hi)) for name, ts, dur in spans if name == DATA_WAIT]
    labelled_end = [(ts, min(ts + dur, hi)) for name, ts, dur in spans if name == EPOCH_END]
    boundary = bool(labelled_end) or len(data_waits) >= 2
    inside = 0.0  # validation and checkpoint time: inside the epoch's end
    for name, ts, dur in spans:
        if name in (DATA_WAIT, EPOCH_END):
            continue
        add(name, min(ts + dur, hi) - max(ts, lo))
        if name in BOUNDARY_LABELS:
            inside += min(ts + dur, hi) - max(ts, lo)
    if boundary:
        if labelled_end:
            end_us = sum(e - s for s, e in labelled_end)
        else:  # from the first data wait's end to the last one's start
            end_us = data_waits[-1][0] - data_waits[0][1]
        add(EPOCH_END, max(end_us - inside, 0.0))
        if data_waits:
            start, end = data_waits[-1]
            add(EPOCH_START, end - start)
            for s, e in data_waits[:-1]:
                add(DATA_WAIT, e - max(s, lo))
    else:
        for s, e in data_waits:
            add(DATA_WAIT, e - max(s, lo))
    return StepActivity(step=step, boundary=boundary, ms=ms)


def boundary_steps(activities: list[StepActivity]) -> list[int]:
    """The step numbers that held an epoch boundary."""
    return [a.step for a in activities if a.boundary]


def boundary_text(steps: list[int]) -> str:
    """What a report says when profiled steps held an epoch boundary."""
    named = ", ".join(f"ProfilerStep#{n}" for n in steps)
    return (
        f"{named} held an epoch boundary: the work between two epochs (validation, the checkpoint, the next "
        "epoch's start, and on a data-parallel job the collectives that close the epoch) is inside that step, so "
        "its time is not a training step's. The profiler window is placed inside one epoch where the run allows "
        "it; this run's epochs are too short for its window (a longer run, or fewer active steps, avoids it)."
    )
