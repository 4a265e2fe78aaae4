"""Memory release: the heap's free pages given back to the system after the parallel reader's merge."""

from __future__ import annotations

import ctypes


def release_free_heap() -> None:
    """Give the heap's free pages back to the system (glibc's malloc_trim; nothing elsewhere). Merging the readers'
    columns frees as much as it keeps, and glibc's adaptive mmap threshold leaves those frees in the heap, where the
    analyses' own arrays would not reuse all of them."""
    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (AttributeError, OSError):
        return
    trim(0)
