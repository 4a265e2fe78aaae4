"""Indexed multi-member gzip for Chrome traces: the writer the profiler exports with, and the readers the trace
loader uses (a decompressing reader thread for any gzip file; the index and member reader for ours). It imports
nothing beyond the standard library, so the analysis reads it without loading torch.

Any gzip file is a series of members (RFC 1952); `gzip -d`, Python's gzip module, zlib-based readers (HTA,
TensorBoard, Chrome's and Perfetto's loaders) read every member in turn as one stream. The traces yolo-mlops writes
are cut into members of a few MiB, and each member's header carries an extra-field subfield `YM` (the way BGZF's
`BC` subfield carries a block size) holding:

    uint32 LE  the member's compressed size, header and trailer included (the next member starts there)
    uint32 LE  its decompressed size
    uint8      flags: bit 0 set when the member's text ends right after an event's `},` (the next member
               starts at the next event), so the text of consecutive members can be parsed apart

A reader that knows the subfield finds every member from the headers alone (one seek per member, no scan of
the compressed data) and can decompress and parse groups of members in parallel; every other reader ignores
it. Files without the subfield (other tools' traces: one member) are read as one stream.
"""

from __future__ import annotations

import gzip
import os
import queue
import struct
import sys
import threading
import zlib
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import BinaryIO

GZIP_MAGIC = b"\x1f\x8b"
SUBFIELD_ID = b"YM"
_PAYLOAD = struct.Struct("<IIB")  # compressed member size, decompressed size, flags
FLAG_EVENT_BOUNDARY = 1
# ID1 ID2 CM FLG(FEXTRA) MTIME XFL OS XLEN, then the subfield: SI1 SI2 LEN payload
_HEADER = struct.Struct("<2sBBIBBH2sH")
HEADER_BYTES = _HEADER.size + _PAYLOAD.size
_TRAILER = struct.Struct("<II")  # CRC-32, decompressed size mod 2**32
MEMBER_TEXT_BYTES = 4 << 20  # decompressed bytes per member the writer aims at

# The reader thread hands over decompressed text in pieces of at most this size, at most this many queued.
PIECE_BYTES = 2 << 20
QUEUED_PIECES = 4
_COMPRESSED_READ = 256 << 10
# While a reader thread runs, the interpreter switches threads this often (s): the thread needs the GIL
# only between two zlib calls, and should not wait out Python's default switch interval for it.
_SWITCH_INTERVAL_S = 0.0005


@dataclass(frozen=True)
class Member:
    offset: int  # in the file
    size: int  # compressed, header and trailer included
    text_size: int  # decompressed
    flags: int

    @property
    def ends_at_event(self) -> bool:
        return bool(self.flags & FLAG_EVENT_BOUNDARY)


def compress_member(text: bytes, level: int = 6, flags: int = 0) -> bytes:
    """One gzip member holding `text`, its sizes in the YM subfield."""
    compressor = zlib.compressobj(level, zlib.DEFLATED, -15)
    body = compressor.compress(text) + compressor.flush()
    size = HEADER_BYTES + len(body) + _TRAILER.size
    header = _HEADER.pack(GZIP_MAGIC, 8, 4, 0, 0, 255, 4 + _PAYLOAD.size, SUBFIELD_ID, _PAYLOAD.size)
    return (
        header + _PAYLOAD.pack(size, len(text), flags) + body + _TRAILER.pack(zlib.crc32(text), len(text) & 0xFFFFFFFF)
    )


def _event_cut(text: bytes | bytearray, limit: int) -> int:
    """Position just after the last `},` before `limit` that the next event's `{` follows (only whitespace
    between), or -1. A `},` inside a string (C++ names hold `{lambda()#1}, `) has no `{` right after it."""
    end = limit
    while True:
        cut = text.rfind(b"},", 0, end)
        if cut < 0:
            return -1
        after = cut + 2
        while after < len(text) and text[after] in b" \t\r\n":
            after += 1
        if after < len(text) and text[after] == 0x7B:  # "{"
            return cut + 2
        end = cut + 1


def write_members(
    source: BinaryIO,
    target: BinaryIO,
    level: int = 6,
    member_bytes: int = MEMBER_TEXT_BYTES,
    threads: int | None = None,
) -> None:
    """Copy a Chrome trace from `source` into `target` as indexed gzip members cut at event boundaries.

    Members are compressed by a pool of threads (zlib releases the GIL), written in order, a bounded number in
    flight. A stretch of `member_bytes` without an event boundary is cut anywhere (flag clear)."""
    workers = threads or max(1, min(4, len(os.sched_getaffinity(0))))
    limit = member_bytes + (member_bytes >> 2)  # a member may run a quarter over, to end at an event
    pending = bytearray()
    in_flight: list[Future[bytes]] = []
    with ThreadPoolExecutor(max_workers=workers) as pool:

        def submit(text: bytes, flags: int) -> None:
            in_flight.append(pool.submit(compress_member, text, level, flags))
            while len(in_flight) > 2 * workers:
                target.write(in_flight.pop(0).result())

        at_end = False
        while True:
            while not at_end and len(pending) <= limit:
                data = source.read(member_bytes)
                at_end = not data
                pending += data
            if len(pending) <= limit:  # the end of the file: the rest is the last member
                if pending or not in_flight:  # an empty file is still one (empty) member
                    submit(bytes(pending), 0)
                break
            cut = _event_cut(pending, limit)
            if cut >= member_bytes >> 2:
                submit(bytes(pending[:cut]), FLAG_EVENT_BOUNDARY)
            else:  # no event boundary in reach: cut anywhere, flag clear
                cut = member_bytes
                submit(bytes(pending[:cut]), 0)
            del pending[:cut]
        for future in in_flight:
            target.write(future.result())


def read_index(fh: BinaryIO, file_size: int) -> list[Member] | None:
    """Every member of an indexed file, from the headers alone; None unless every member carries the YM
    subfield and the sizes add up to the file's (other gzip files, truncated or appended-to ones)."""
    members: list[Member] = []
    offset = 0
    while offset < file_size:
        fh.seek(offset)
        raw = fh.read(HEADER_BYTES)
        if len(raw) < HEADER_BYTES:
            return None
        magic, method, flags, _mtime, _xfl, _os, xlen, subfield, length = _HEADER.unpack_from(raw)
        if (
            magic != GZIP_MAGIC
            or method != 8
            or flags != 4
            or xlen != 4 + _PAYLOAD.size
            or subfield != SUBFIELD_ID
            or length != _PAYLOAD.size
        ):
            return None
        size, text_size, member_flags = _PAYLOAD.unpack_from(raw, _HEADER.size)
        if size < HEADER_BYTES + _TRAILER.size or offset + size > file_size:
            return None
        members.append(Member(offset, size, text_size, member_flags))
        offset += size
    return members or None


def member_text(fh: BinaryIO, member: Member) -> bytes:
    """The decompressed text of one indexed member, its CRC and size checked."""
    fh.seek(member.offset)
    data = fh.read(member.size)
    if len(data) != member.size:
        raise EOFError("Compressed file ended before the end-of-stream marker was reached")
    decompressor = zlib.decompressobj(-15)
    text = decompressor.decompress(memoryview(data)[HEADER_BYTES:])
    if not decompressor.eof:
        raise EOFError("Compressed file ended before the end-of-stream marker was reached")
    crc, size = _TRAILER.unpack_from(decompressor.unused_data)
    if crc != zlib.crc32(text) or size != len(text) & 0xFFFFFFFF or len(text) != member.text_size:
        raise zlib.error("member CRC or size check failed")
    return text


def gzip_pieces(fh: BinaryIO, progress: Callable[[int], None] | None = None) -> Iterator[bytes]:
    """The decompressed text of a gzip file (any number of members, as Python's gzip module reads it), in pieces
    of at most PIECE_BYTES, decompressed by a reader thread while the caller parses the previous pieces.

    Errors are the gzip module's: BadGzipFile (an OSError) for what is not gzip, EOFError for a truncated file,
    zlib.error for corrupt data (zlib checks each member's CRC and size). `progress(n)`: n more compressed
    bytes read. Stopping early (closing the generator) stops the thread."""
    pieces: queue.Queue = queue.Queue(QUEUED_PIECES)
    stop = threading.Event()

    def put(item) -> bool:
        while not stop.is_set():
            try:
                pieces.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def run() -> None:
        try:
            for piece in _decompress(fh, progress):
                if not put(piece):
                    return
            put(None)
        except BaseException as exc:  # handed to the consumer, raised there
            put(exc)

    previous = sys.getswitchinterval()
    sys.setswitchinterval(min(previous, _SWITCH_INTERVAL_S))
    thread = threading.Thread(target=run, name="trace-gunzip", daemon=True)
    thread.start()
    try:
        while True:
            item = pieces.get()
            if item is None:
                return
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop.set()
        thread.join()
        sys.setswitchinterval(previous)


def _decompress(fh: BinaryIO, progress: Callable[[int], None] | None) -> Iterator[bytes]:
    decompressor = None  # the current member's; None between members
    started = False
    while True:
        data = fh.read(_COMPRESSED_READ)
        if progress is not None and data:
            progress(len(data))
        if not data:
            if decompressor is not None:
                raise EOFError("Compressed file ended before the end-of-stream marker was reached")
            return
        while data:
            if decompressor is None:
                if started:
                    data = data.lstrip(b"\0")  # zero padding between members, as gzip allows
                    if not data:
                        break
                if len(data) < 2 and data == GZIP_MAGIC[: len(data)]:
                    more = fh.read(_COMPRESSED_READ)
                    if progress is not None and more:
                        progress(len(more))
                    if not more:
                        raise EOFError("Compressed file ended before the end-of-stream marker was reached")
                    data += more
                if data[:2] != GZIP_MAGIC:
                    raise gzip.BadGzipFile(f"Not a gzipped file ({data[:2]!r})")
                decompressor = zlib.decompressobj(31)
                started = True
            out = decompressor.decompress(data, PIECE_BYTES)
            while True:
                if out:
                    yield out
                # at a member's end the rest is unused_data (CPython may leave a copy in unconsumed_tail too);
                # a full piece may leave output inside zlib even when all input was taken
                if decompressor.eof or (not decompressor.unconsumed_tail and len(out) < PIECE_BYTES):
                    break
                out = decompressor.decompress(decompressor.unconsumed_tail, PIECE_BYTES)
            if decompressor.eof:
                data = decompressor.unused_data
                decompressor = None
            else:
                data = b""
