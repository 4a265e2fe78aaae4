"""The streaming decoder: any valid JSON layout, one event dict at a time through ijson's C backend (several times
slower than the block decoder, which hands it the layouts it does not cut)."""

from __future__ import annotations

import ijson

from yolo_mlops.analysis.loading.columns import ColumnBuilder
from yolo_mlops.analysis.loading.events import TypedEvent, event_from_dict

# The C backend, far faster than ijson's pure-Python fallback (docs/benchmarks.md, "Figures behind code choices").
try:
    IJSON = ijson.get_backend("yajl2_c")
except ImportError:  # pragma: no cover - wheels ship the C backend; keep working without it
    IJSON = ijson

_BATCH_EVENTS = 4096  # events converted before they are appended to the columns together


def stream_events_ijson(fh, columns: ColumnBuilder, buf_size: int) -> None:
    """Append every event of the open file's traceEvents to `columns`, reading `buf_size` bytes at a time."""
    batch: list[TypedEvent] = []
    for event in IJSON.items(fh, "traceEvents.item", use_float=True, buf_size=buf_size):
        batch.append(event_from_dict(event))
        if len(batch) >= _BATCH_EVENTS:
            columns.add_events(batch)
            batch = []
    columns.add_events(batch)
