"""Which files are traces and how their text is read: plain or gzipped JSON (the gzip of one stream, or the indexed
members `profiling/trace_gzip.py` writes), streamed in blocks, and the top-level metadata found in the text's
head, ahead of the events (Kineto writes `distributedInfo` and `deviceProperties` before `traceEvents`)."""

from __future__ import annotations

import gzip
import io
import re
from collections.abc import Iterator
from pathlib import Path

import ijson
import msgspec

from yolo_mlops.analysis.loading.ijson_stream import IJSON
from yolo_mlops.analysis.loading.progress import Progress
from yolo_mlops.analysis.loading.rank_trace import TraceError
from yolo_mlops.profiling import trace_gzip as gzip_members

TRACE_SUFFIXES = (".json", ".json.gz")
# Reading this many decompressed bytes from the head is enough to find the metadata without a second full pass.
METADATA_HEAD_BYTES = 1 << 20
READ_BUFFER_BYTES = 1 << 18
_METADATA_KEYS = ("distributedInfo", "deviceProperties")  # the top-level keys the analyses read
TRACE_EVENTS_KEY_RE = re.compile(rb'"traceEvents"\s*:\s*\[')


def find_trace_files(directory: Path) -> list[Path]:
    return sorted(p for p in directory.iterdir() if p.is_file() and p.name.endswith(TRACE_SUFFIXES))


def is_gzipped(path: Path) -> bool:
    return path.name.endswith(".gz")


def open_binary(path: Path) -> io.BufferedIOBase:
    """The file's decompressed text as one binary stream."""
    if is_gzipped(path):
        return gzip.open(path, "rb")
    return open(path, "rb")


def read_blocks(fh) -> Iterator[bytes]:
    """The rest of fh, READ_BUFFER_BYTES at a time."""
    return iter(lambda: fh.read(READ_BUFFER_BYTES), b"")


def text_blocks(path: Path, raw, progress: Progress | None) -> Iterator[bytes]:
    """The decompressed text of the open file `raw`: gunzipped by a reader thread for .gz files."""
    if is_gzipped(path):
        return gzip_members.gzip_pieces(raw, progress)
    if progress is None:
        return read_blocks(raw)
    return _counted(read_blocks(raw), progress)


def _counted(blocks: Iterator[bytes], progress: Progress) -> Iterator[bytes]:
    for block in blocks:
        progress(len(block))
        yield block


def head_and_metadata(path: Path, blocks: Iterator[bytes]) -> tuple[bytes, dict]:
    """The text from the start up to at least METADATA_HEAD_BYTES (or all of it), blocks holding the rest, and
    the metadata found in its first METADATA_HEAD_BYTES."""
    parts, size = [], 0
    while size < METADATA_HEAD_BYTES:
        block = next(blocks, b"")
        if not block:
            break
        parts.append(block)
        size += len(block)
    text = b"".join(parts)
    return text, read_metadata(path, text[:METADATA_HEAD_BYTES])


def _metadata_before_events(head: bytes) -> dict | None:
    """Kineto's layout: every metadata key precedes traceEvents, so the text before the key plus
    `"traceEvents": []}` is a complete JSON object. None when that does not hold."""
    match = TRACE_EVENTS_KEY_RE.search(head)
    if match is None:
        return None
    try:
        meta = msgspec.json.decode(head[: match.start()] + b'"traceEvents": []}')
    except msgspec.DecodeError:
        return None
    if not isinstance(meta, dict):
        return None
    meta.pop("traceEvents", None)
    meta["_has_trace_events"] = True
    return meta


def read_metadata(path: Path, head: bytes) -> dict:
    """Top-level keys other than traceEvents found in the file's head (its first decompressed bytes)."""
    if not head.strip():
        raise TraceError(f"{path}: empty file")
    first = head.lstrip()[:1]
    if first != b"{":
        raise TraceError(f"{path}: not a Kineto trace (top level is not a JSON object)")
    fast = _metadata_before_events(head)
    if fast is not None and all(key in fast or f'"{key}"'.encode() not in head for key in _METADATA_KEYS):
        # every key we use is before the events or nowhere in the head: parsing the head's events
        # (tens of ms for a MiB of them) could find nothing more
        return fast
    # Otherwise read every complete top-level key in the head, including any after traceEvents.
    meta: dict = {}
    try:
        for key, value in IJSON.kvitems(io.BytesIO(head), "", use_float=True):
            if key == "traceEvents":  # built only within the bounded head; metadata may follow
                meta["_has_trace_events"] = True
                continue
            meta[key] = value
    except ijson.IncompleteJSONError:
        # The head ends inside traceEvents (or inside whatever comes first): expected for big files.
        pass
    except ijson.JSONError as exc:
        raise TraceError(f"{path}: invalid JSON ({exc})") from exc
    if b'"traceEvents"' in head:
        meta["_has_trace_events"] = True
    return meta


def rank_from_meta(meta: dict) -> int | None:
    info = meta.get("distributedInfo")
    if isinstance(info, dict) and isinstance(info.get("rank"), (int, float)):
        return int(info["rank"])
    return None
