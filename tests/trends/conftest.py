"""Fixtures of the trends tests.

`detector`: the real `yolo_mlops.trends.changepoint.detect/segments` when implemented, else a tiny stand-in used
by these tests only while the real detector's bodies raise NotImplementedError. The stand-in is binary
segmentation with Welch's t-test: enough to exercise the trend code around it; the real method and its tests
live in changepoint.py and test_changepoint.py."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from yolo_mlops.trends import changepoint
from yolo_mlops.trends.changepoint import ChangePoint, Segment


def real_detector_available() -> bool:
    try:
        changepoint.detect(np.arange(8, dtype=float))
    except NotImplementedError:
        return False
    return True


def _split(values, lo, hi, max_pvalue, found):
    best = None
    for i in range(lo + 2, hi - 1):
        a, b = values[lo:i], values[i:hi]
        if np.std(a) == 0 and np.std(b) == 0:
            p = 0.0 if a[0] != b[0] else 1.0
        else:
            p = stats.ttest_ind(a, b, equal_var=False).pvalue
        if best is None or p < best[1]:
            best = (i, p)
    if best is not None and best[1] <= max_pvalue:
        found.append(best[0])
        _split(values, lo, best[0], max_pvalue, found)
        _split(values, best[0], hi, max_pvalue, found)


def detect(values, *, window=50, max_pvalue=0.001, min_magnitude=0.0):
    values = np.asarray(values, dtype=float)
    found: list[int] = []
    _split(values, 0, len(values), max_pvalue, found)
    bounds = [0, *sorted(found), len(values)]
    cps = []
    for k, i in enumerate(sorted(found)):
        a, b = values[bounds[k]:i], values[i:bounds[k + 2]]
        p = stats.ttest_ind(a, b, equal_var=False).pvalue if (np.std(a) or np.std(b)) else 0.0
        cps.append(ChangePoint(i, float(p), float(a.mean()), float(b.mean()), float(a.std()), float(b.std())))
    return cps


def segments(values, change_points):
    values = np.asarray(values, dtype=float)
    bounds = [0, *[c.index for c in change_points], len(values)]
    return [Segment(s, e, float(values[s:e].mean()), float(values[s:e].std()), float(np.median(values[s:e])))
            for s, e in zip(bounds, bounds[1:], strict=False)]


def _use_standin_if_needed(mp: pytest.MonkeyPatch) -> None:
    if not real_detector_available():
        mp.setattr(changepoint, "detect", detect)
        mp.setattr(changepoint, "segments", segments)


@pytest.fixture
def detector(monkeypatch):
    """The real detector when it exists, else this stand-in (patched in for the test's duration)."""
    _use_standin_if_needed(monkeypatch)
    return changepoint


@pytest.fixture(scope="module")
def module_detector():
    """`detector` for module-scoped fixtures (a flow that detects while the fixture builds the history)."""
    mp = pytest.MonkeyPatch()
    _use_standin_if_needed(mp)
    yield changepoint
    mp.undo()
