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
