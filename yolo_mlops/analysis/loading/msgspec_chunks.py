"""The fast decoder: traceEvents decoded in blocks by msgspec into typed events (events.py), each block's
events appended to the columns and dropped, so no per-event Python object outlives its block. A layout it does not
cut (or a value of an unexpected type) raises FastPathUnavailable, and the events are read by another backend."""

from __future__ import annotations

import re
from collections.abc import Iterator

import msgspec

from yolo_mlops.analysis.loading.columns import ColumnBuilder
from yolo_mlops.analysis.loading.events import TypedEvent
from yolo_mlops.analysis.loading.formats import TRACE_EVENTS_KEY_RE

CHUNK_DECODER = msgspec.json.Decoder(list[TypedEvent])
_EVENT_BOUNDARY = b"},"
_NEXT_EVENT_RE = re.compile(rb"\s*\{")
# Give up on the fast path (and stream with ijson instead) when this much text has no decodable cut.
_MAX_PENDING_BYTES = 64 << 20
_CUT_ATTEMPTS = 8
_TAIL_ATTEMPTS = 256


class FastPathUnavailable(Exception):
    """The chunked decoder met a layout it does not handle; the caller reads the events with another backend."""


def decode_events_chunked(
    blocks: Iterator[bytes],
    columns: ColumnBuilder,
    pending: bytes = b"",
    in_events: bool = False,
    ends_at_event: bool = False,
) -> bool:
    """Decode traceEvents in blocks with msgspec, starting with `pending` (the bytes before `blocks`);
    False when the file has no traceEvents key.

    Blocks are cut after a `},` and validated by decoding `[` + block + `]`: a cut that falls
    inside an event leaves unbalanced JSON, which the decoder rejects, so we retry at an earlier
    `},`. Raises FastPathUnavailable for anything else (odd types, no cut in _MAX_PENDING_BYTES, bad tail).
    The text waits in one bytearray, `[` + what is not decoded yet, and is decoded in place (through
    a memoryview, with the `,` after the cut briefly made a `]`): each byte is copied once, on arrival.

    A part of the events array alone (the text of a group of gzip members, read in parallel): `in_events`,
    the text starts at an event, not at the file's start; `ends_at_event`, it ends right after an event's
    `},` rather than with the array's end.
    """
    if in_events:
        buffer = bytearray(b"[")
        buffer += pending
    else:
        while True:  # find the start of the traceEvents array
            match = TRACE_EVENTS_KEY_RE.search(pending)
            if match:
                break
            block = next(blocks, b"")
            if not block:
                return False
            pending = pending[-64:] + block  # keep enough to match a key split across blocks
        buffer = bytearray(b"[")
        buffer += memoryview(pending)[match.end() :]
    del pending
    for block in blocks:
        buffer += block
        _decode_complete_prefix(buffer, columns)
        if len(buffer) > _MAX_PENDING_BYTES:
            raise FastPathUnavailable
    _decode_complete_prefix(buffer, columns)
    if ends_at_event:
        _decode_rest_of_part(buffer, columns)
    else:
        _decode_tail(buffer, columns)
    return True


def _decode_rest_of_part(buffer: bytearray, columns: ColumnBuilder) -> None:
    """The events left at the end of a part that ends right after an event's `},`."""
    end = len(buffer.rstrip())
    if end <= 1 and not buffer[1:].strip():
        return
    if buffer[end - 1] != 0x2C:  # ","
        raise FastPathUnavailable
    events = _decode_array(buffer, end - 1)
    if events is None:
        raise FastPathUnavailable
    columns.add_events(events)


def _decode_complete_prefix(buffer: bytearray, columns: ColumnBuilder) -> None:
    """Decode the longest run of whole events at the start of buffer (`[` + text); leave `[` + the rest."""
    end = len(buffer)
    for _ in range(_CUT_ATTEMPTS):
        cut = buffer.rfind(_EVENT_BOUNDARY, 1, end)
        # a `},` inside a string (C++ kernel names hold `{lambda()#1}, ...`) is not followed by the next
        # event's `{`: skip it without the failed decode of a whole block
        while cut >= 0 and not _NEXT_EVENT_RE.match(buffer, cut + 2):
            cut = buffer.rfind(_EVENT_BOUNDARY, 1, cut)
        if cut < 0:
            return
        events = _decode_array(buffer, cut + 1)
        if events is None:
            end = cut  # the cut was inside an event: try an earlier one
            continue
        columns.add_events(events)
        del buffer[1 : cut + 2]
        return


def _decode_tail(buffer: bytearray, columns: ColumnBuilder) -> None:
    """The last event(s) and the array's closing `]`.

    Exactly one `]` closes a valid array; scan from the left, since after the last event can come
    top-level metadata with many `]` (Kineto's "INFO" log lines), while the events left here
    (after _decode_complete_prefix) hold few.
    """
    close = 0
    for _ in range(_TAIL_ATTEMPTS):
        close = buffer.find(b"]", close + 1)
        if close < 0:
            break
        events = _decode_array(buffer, close)
        if events is not None:
            columns.add_events(events)
            return
    raise FastPathUnavailable


def _decode_array(buffer: bytearray, close: int) -> list | None:
    """Decode buffer[: close + 1] with the byte at `close` read as `]`; None when that is not complete
    JSON (an earlier cut may be); FastPathUnavailable when an event has odd types."""
    original = buffer[close]
    buffer[close] = 0x5D  # "]"
    try:
        with memoryview(buffer) as whole, whole[: close + 1] as text:
            return CHUNK_DECODER.decode(text)
    except msgspec.ValidationError as exc:
        raise FastPathUnavailable from exc
    except msgspec.DecodeError:
        return None
    finally:
        buffer[close] = original
