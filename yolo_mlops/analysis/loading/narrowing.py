"""Integer columns held in the narrowest signed type that holds their values: a big trace's few categories,
threads and streams then take a byte an event. Buffers (`array.array`) widen while they fill; finished columns
are numpy arrays of the same numbers."""

from __future__ import annotations

from array import array

import numpy as np

NARROW_TYPES = (np.int8, np.int16, np.int32, np.int64)
NARROW_TYPECODES = ("b", "h", "i", "q")  # array's signed C types, narrowest first: 1, 2, 4 and 8 bytes here
# the numpy type of each buffer's typecode (array typecodes name C types, whose sizes vary by platform)
BUFFER_DTYPE = {code: np.dtype(f"i{array(code).itemsize}") for code in NARROW_TYPECODES} | {"d": np.dtype("f8")}
_TYPECODE_INFO = {code: np.iinfo(BUFFER_DTYPE[code]) for code in NARROW_TYPECODES}


def narrowed_copy(values: np.ndarray) -> np.ndarray:
    """values in the narrowest signed integer type that holds them all (the same numbers); a copy, unless
    values already have that type (then values themselves)."""
    if values.size == 0:
        return values.astype(np.int8)
    low, high = int(values.min()), int(values.max())
    for dtype in NARROW_TYPES:
        info = np.iinfo(dtype)
        if info.min <= low and high <= info.max:
            return values.astype(dtype, copy=False)
    return values  # pragma: no cover - int64 holds every column's values


def column_view(buffer: array) -> np.ndarray:
    """A numpy view of a finished buffer (no copy: the array stays alive as the view's base)."""
    dtype = BUFFER_DTYPE[buffer.typecode]
    if len(buffer) == 0:
        return np.zeros(0, dtype=dtype)
    return np.frombuffer(buffer, dtype=dtype)


def widened(buffer: array, values: list[int], widest: str) -> array | None:
    """`buffer` with `values` appended, in the narrowest signed type up to `widest` (a typecode) that holds every
    value so far: what narrowed_copy would make of the whole column at the end, without a wider buffer before
    it. The caller has tried buffer.fromlist(values), which left buffer unchanged; None when a value is beyond
    `widest`."""
    low, high = min(values), max(values)
    codes = NARROW_TYPECODES[NARROW_TYPECODES.index(buffer.typecode) :]
    codes = codes[: codes.index(widest) + 1]
    fits = [c for c in codes if _TYPECODE_INFO[c].min <= low and high <= _TYPECODE_INFO[c].max]
    if not fits:
        return None
    wider = array(fits[0], column_view(buffer).astype(BUFFER_DTYPE[fits[0]]).tobytes())
    wider.fromlist(values)
    return wider
