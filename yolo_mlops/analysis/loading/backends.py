"""The decoders of a trace's events as named choices (`DecodeBackend`, as HTA's `ParserBackend` names its parsers),
and the reading of one file from its start by the chosen one: the automatic choice is the msgspec block decoder,
handing the layouts it does not cut to ijson streaming."""

from __future__ import annotations

import enum
import json
from pathlib import Path

from yolo_mlops.analysis.loading import formats
from yolo_mlops.analysis.loading.columns import ColumnBuilder
from yolo_mlops.analysis.loading.events import event_from_dict
from yolo_mlops.analysis.loading.formats import head_and_metadata, open_binary, text_blocks
from yolo_mlops.analysis.loading.ijson_stream import stream_events_ijson
from yolo_mlops.analysis.loading.msgspec_chunks import FastPathUnavailable, decode_events_chunked
from yolo_mlops.analysis.loading.progress import Progress
from yolo_mlops.analysis.loading.rank_trace import TraceError

_JSON_BATCH_EVENTS = 4096  # parsed events converted before they are appended to the columns together


class DecodeBackend(enum.Enum):
    """How a trace's events are decoded. `load_trace_file(backend=None)` takes MSGSPEC_CHUNKED, and IJSON_STREAMING
    for a file it does not read; naming one uses that one alone."""

    # the text in blocks, each decoded by msgspec into typed events and dropped: the fastest, memory growing with
    # the events rather than the text; the one the parallel reader runs. Some layouts it does not cut.
    MSGSPEC_CHUNKED = "msgspec-chunked"
    # any JSON layout, one event dict at a time (ijson's C backend): bounded memory, several times slower
    IJSON_STREAMING = "ijson-streaming"
    # the stdlib's json of the whole document at once: memory grows with the text; the reference the others match
    JSON = "json"


def read_sequential(path: Path, progress: Progress | None, backend: DecodeBackend | None) -> tuple[dict, ColumnBuilder]:
    """Metadata and events, the file read from the start by `backend` (None: the automatic choice)."""
    if backend is DecodeBackend.JSON:
        return _read_json(path, progress)
    with open(path, "rb") as raw:
        blocks = text_blocks(path, raw, progress)
        try:
            text, meta = head_and_metadata(path, blocks)
            if backend is not DecodeBackend.IJSON_STREAMING:
                columns = ColumnBuilder()
                try:
                    decode_events_chunked(blocks, columns, text)
                    return meta, columns
                except FastPathUnavailable:
                    if backend is DecodeBackend.MSGSPEC_CHUNKED:
                        raise TraceError(
                            f"{path}: cannot read it with the {backend.value} decoder alone (invalid JSON, or a "
                            f"layout or value it does not handle; {DecodeBackend.IJSON_STREAMING.value} reads any)"
                        ) from None
        finally:
            close = getattr(blocks, "close", None)
            if close is not None:
                close()  # stops the reader thread when the parse ended early
    columns = ColumnBuilder()
    with open_binary(path) as fh:
        stream_events_ijson(fh, columns, formats.READ_BUFFER_BYTES)
    return meta, columns


def _read_json(path: Path, progress: Progress | None) -> tuple[dict, ColumnBuilder]:
    with open_binary(path) as fh:
        text = fh.read()
    if progress is not None:
        progress(path.stat().st_size)
    if not text.strip():
        raise TraceError(f"{path}: empty file")
    try:
        document = json.loads(text)
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError
        raise TraceError(f"{path}: invalid or truncated JSON ({str(exc).splitlines()[0][:120]})") from exc
    del text
    if not isinstance(document, dict):
        raise TraceError(f"{path}: not a Kineto trace (top level is not a JSON object)")
    events = document.pop("traceEvents", None)
    meta = document | ({"_has_trace_events": True} if events is not None else {})
    columns = ColumnBuilder()
    if isinstance(events, list):
        for start in range(0, len(events), _JSON_BATCH_EVENTS):
            columns.add_events([event_from_dict(e) for e in events[start : start + _JSON_BATCH_EVENTS]])
    return meta, columns
