"""The training code's `record_function` phase labels: written by profiling/, read back by analysis/.

Both sides import the names from here, so the profiler (which imports torch) and the trace analysis
(which must not) agree on them without importing each other. A module of its own rather than part of
`yolo_mlops.config`, whose package imports pydantic: `yolo-mlops analyze` imports the analysis without it.
"""

from __future__ import annotations

# Prefix of every phase label; a label is PHASE_LABEL_PREFIX + phase.
PHASE_LABEL_PREFIX = "yolo_mlops/"
# The phases in the order they happen within a training step.
PHASE_ORDER = ("data_wait", "preprocess", "forward_loss", "backward", "optimizer_step")
# The work between two epochs (ultralytics' epoch end, in the step of the next epoch's first batch): all of it
# under EPOCH_END_LABEL, and inside it BOUNDARY_LABELS around validation and the checkpoint.
EPOCH_END_LABEL = "epoch_end"
VALIDATION_LABEL = "validation"
CHECKPOINT_LABEL = "checkpoint"
BOUNDARY_LABELS = (VALIDATION_LABEL, CHECKPOINT_LABEL)
