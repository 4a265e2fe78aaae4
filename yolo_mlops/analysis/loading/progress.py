"""The progress hook: within `reporting_progress`, every trace file loaded reports the bytes it has read."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

Progress = Callable[[int], None]  # called with the number of file bytes just read
# (path, file size) -> a progress callback with a close() method, or None; set by reporting_progress()
_progress_factory: Callable[[Path, int], ProgressReporter | None] | None = None


class ProgressReporter:
    """What reporting_progress's factory returns: called with the bytes just read, closed when the file is done."""

    def __call__(self, nbytes: int) -> None:  # pragma: no cover - interface
        raise NotImplementedError

    def close(self) -> None:  # pragma: no cover - interface
        raise NotImplementedError


@contextmanager
def reporting_progress(factory: Callable[[Path, int], ProgressReporter | None]) -> Iterator[None]:
    """Within the block, every trace file loaded reports its bytes read to `factory(path, file size)`'s reporter."""
    global _progress_factory
    previous, _progress_factory = _progress_factory, factory
    try:
        yield
    finally:
        _progress_factory = previous


def reporter_for(path: Path) -> ProgressReporter | None:
    """The reporter of the file about to be loaded, or None outside `reporting_progress`."""
    return _progress_factory(path, path.stat().st_size) if _progress_factory is not None else None
