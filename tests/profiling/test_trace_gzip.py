"""Indexed multi-member gzip (yolo_mlops/profiling/trace_gzip.py): every gzip reader reads it as one stream, members
end at event boundaries, the index is found from the headers, and the threaded reader reads any gzip file as the
gzip module does (errors included)."""

from __future__ import annotations

import gzip
import io
import shutil
import subprocess
import sys
import threading
import types
import zlib
from pathlib import Path

import pytest

from yolo_mlops.profiling import trace_gzip

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "analysis"))
from trace_golden_gen import trace_text  # noqa: E402


def _members(text: bytes, member_bytes: int = 32 << 10) -> bytes:
    out = io.BytesIO()
    trace_gzip.write_members(io.BytesIO(text), out, member_bytes=member_bytes)
    return out.getvalue()


@pytest.fixture(scope="module")
def kineto_text() -> bytes:
    return trace_text(3_000, layout="kineto").encode()


def test_every_gzip_reader_reads_the_members_as_one_stream(tmp_path, kineto_text):
    data = _members(kineto_text)
    path = tmp_path / "t.json.gz"
    path.write_bytes(data)
    assert gzip.decompress(data) == kineto_text
    with gzip.open(path, "rb") as fh:
        assert fh.read() == kineto_text
    d = zlib.decompressobj(31)  # what zlib-based readers do: member after member
    text, rest = b"", data
    while rest:
        d = zlib.decompressobj(31)
        text += d.decompress(rest)
        rest = d.unused_data
    assert text == kineto_text
    if shutil.which("gzip") is None:
        pytest.skip("no gzip program")
    assert subprocess.run(["gzip", "-dc", str(path)], capture_output=True, check=True).stdout == kineto_text
    assert subprocess.run(["gzip", "-t", str(path)]).returncode == 0


@pytest.mark.parametrize("layout", ["kineto", "compact"])
def test_members_end_at_event_boundaries_and_the_index_finds_them(layout):
    text = trace_text(3_000, layout=layout).encode()
    data = _members(text)
    members = trace_gzip.read_index(io.BytesIO(data), len(data))
    assert members is not None and len(members) > 10
    assert sum(m.size for m in members) == len(data) and sum(m.text_size for m in members) == len(text)
    raw = io.BytesIO(data)
    texts = [trace_gzip.member_text(raw, m) for m in members]
    assert b"".join(texts) == text
    for member, part, following in zip(members[:-1], texts[:-1], texts[1:], strict=True):
        assert member.ends_at_event
        assert part.endswith(b"},") and following.lstrip().startswith(b"{")
    assert not members[-1].ends_at_event  # the end of the file, not of an event


def test_a_stretch_without_event_boundaries_is_cut_anyway():
    text = b'{"traceEvents": [{"name": "' + b"x" * 300_000 + b'"}]}'
    data = _members(text, member_bytes=64 << 10)
    members = trace_gzip.read_index(io.BytesIO(data), len(data))
    assert members is not None and len(members) > 3 and not any(m.ends_at_event for m in members)
    assert gzip.decompress(data) == text


def test_an_empty_file_is_one_valid_member():
    data = _members(b"")
    assert gzip.decompress(data) == b"" and trace_gzip.read_index(io.BytesIO(data), len(data)) is not None


def test_the_index_refuses_what_it_cannot_vouch_for(kineto_text):
    data = _members(kineto_text)
    for broken in (data[:-10], data + gzip.compress(b"more"), gzip.compress(kineto_text), data[:5]):
        assert trace_gzip.read_index(io.BytesIO(broken), len(broken)) is None


def test_a_corrupt_member_fails_its_check(kineto_text):
    data = bytearray(_members(kineto_text))
    members = trace_gzip.read_index(io.BytesIO(bytes(data)), len(data))
    assert members is not None
    data[members[1].offset + members[1].size - 6] ^= 0xFF  # the trailer's CRC
    with pytest.raises(zlib.error):
        trace_gzip.member_text(io.BytesIO(bytes(data)), members[1])


@pytest.mark.parametrize("shape", ["one member", "members", "zero padding", "tiny pieces", "small pieces, big reads"])
def test_the_reader_thread_reads_what_the_gzip_module_reads(kineto_text, shape, monkeypatch):
    if shape == "one member":
        data = gzip.compress(kineto_text)
    elif shape == "members":
        data = _members(kineto_text)
    elif shape == "zero padding":
        data = gzip.compress(kineto_text[:1000]) + b"\0" * 10 + gzip.compress(kineto_text[1000:])
    elif shape == "tiny pieces":
        monkeypatch.setattr(trace_gzip, "PIECE_BYTES", 1000)
        monkeypatch.setattr(trace_gzip, "_COMPRESSED_READ", 7)
        data = _members(kineto_text)
    else:  # members end inside output-limited calls, with input left over
        monkeypatch.setattr(trace_gzip, "PIECE_BYTES", 4096)
        data = _members(kineto_text, member_bytes=8 << 10)
    assert gzip.decompress(data) == kineto_text
    seen: list[int] = []
    pieces: list[bytes] = []
    # read in a thread of the test's own, so that a reader looping at a member's end fails the test, not hangs it
    reading = threading.Thread(
        target=lambda: pieces.extend(trace_gzip.gzip_pieces(io.BytesIO(data), seen.append)), daemon=True
    )
    reading.start()
    reading.join(timeout=60)
    assert not reading.is_alive(), "the reader did not finish"
    assert b"".join(pieces) == kineto_text
    assert max(map(len, pieces)) <= trace_gzip.PIECE_BYTES and sum(seen) == len(data)


@pytest.mark.parametrize(
    "damage, error",
    [
        (lambda d: d[: len(d) // 2], EOFError),
        (lambda d: b"not gzip at all", gzip.BadGzipFile),
        (lambda d: d + b"trailing garbage", gzip.BadGzipFile),
        (lambda d: d[:-8] + b"\0\0\0\0" + d[-4:], (zlib.error, gzip.BadGzipFile)),  # the CRC (zlib checks it itself)
    ],
)
def test_the_reader_thread_fails_as_the_gzip_module_does(kineto_text, damage, error):
    data = damage(_members(kineto_text))
    with pytest.raises(error):
        gzip.decompress(data)
    with pytest.raises(error):
        b"".join(trace_gzip.gzip_pieces(io.BytesIO(data)))


def test_stopping_early_stops_the_reader_thread(kineto_text):
    before = threading.active_count()
    pieces = trace_gzip.gzip_pieces(io.BytesIO(gzip.compress(kineto_text * 20)))
    assert isinstance(pieces, types.GeneratorType)  # a generator: closing it is stopping early
    next(pieces)
    pieces.close()
    assert threading.active_count() == before
