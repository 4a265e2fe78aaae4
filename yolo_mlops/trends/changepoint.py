"""Change-point detection over a metric's whole history (E-divisive means with a Student's t significance
test in sliding windows, the method of Apache Otava / Daly et al., ICPE 2020).

Pure functions over numpy arrays; no MLflow, no I/O. Deterministic: the same history gives the same answer.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

DEFAULT_WINDOW = 50  # Otava's default sliding window
DEFAULT_MAX_PVALUE = 0.001  # Otava's default significance
DEFAULT_MIN_MAGNITUDE = 0.0  # relative change below which a change point is dropped (0 = keep all)


@dataclass(frozen=True)
class ChangePoint:
    index: int  # first index of the new segment (values[index] is the first point after the change)
    pvalue: float  # Student's t test of the segments on each side
    mean_before: float
    mean_after: float
    std_before: float
    std_after: float

    @property
    def change_pct(self) -> float:
        """Relative change of the segment mean, in percent of the mean before (+ = value went up)."""
        return 100.0 * (self.mean_after - self.mean_before) / abs(self.mean_before) if self.mean_before else float("nan")


@dataclass(frozen=True)
class Segment:
    start: int  # inclusive
    end: int  # exclusive
    mean: float
    std: float
    median: float

    @property
    def size(self) -> int:
        return self.end - self.start


def detect(values: np.ndarray, *, window: int = DEFAULT_WINDOW, max_pvalue: float = DEFAULT_MAX_PVALUE,
           min_magnitude: float = DEFAULT_MIN_MAGNITUDE) -> list[ChangePoint]:
    """Change points of a series, in index order. NaNs are not allowed (drop missing points first)."""
    raise NotImplementedError


def segments(values: np.ndarray, change_points: list[ChangePoint]) -> list[Segment]:
    """The segments between change points, with their statistics."""
    raise NotImplementedError
