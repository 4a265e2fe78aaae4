"""Known changes are candidates: every run where a recorded version (or the machine) changed is tested directly.

The change-point detector searches every split position blind, so its p-value pays for the search (a
Bonferroni factor of the segment's length) and a 12-run history needs an enormous shift to pass. A version
change is a split position known in advance: testing it needs no search and no correction. Each boundary
is tested on its own: the runs before it against the runs after it, each side bounded by the neighbouring
level changes and boundaries, with Welch's t test (unequal variances; two-sided). Under no change the
chance that one boundary is reported is `candidate_pvalue` (the per-boundary false-alarm rate), whatever
the history's length.

Pure functions over numpy arrays; no I/O, no randomness.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from yolo_mlops.stats import welch_t

DEFAULT_CANDIDATE_PVALUE = 0.01


@dataclass(frozen=True)
class Candidate:
    index: int  # first point after the boundary
    changed: tuple[tuple[str, str, str], ...]  # (dimension, value before, value after)
    size_before: int
    size_after: int
    mean_before: float
    mean_after: float
    pvalue: float  # Welch's t test, two-sided; nan when a side has fewer than 2 points
    moved: bool  # pvalue <= candidate_pvalue

    @property
    def change_pct(self) -> float:
        if not self.mean_before:
            return float("nan")
        return 100.0 * (self.mean_after - self.mean_before) / abs(self.mean_before)

    def what_changed_text(self) -> str:
        return ", ".join(
            f"commit {_short(b)}..{_short(a)}" if name == "commit" else f"{name} {b} -> {a}"
            for name, b, a in self.changed
        )


def boundaries(labels: list[dict[str, str]]) -> list[tuple[int, tuple[tuple[str, str, str], ...]]]:
    """(index, what changed) of every point whose recorded versions differ from the point before it."""
    out = []
    for k in range(1, len(labels)):
        before, after = labels[k - 1], labels[k]
        changed = tuple(
            (name, before.get(name, "?"), after.get(name, "?"))
            for name in dict.fromkeys([*before, *after])
            if before.get(name) != after.get(name)
        )
        if changed:
            out.append((k, changed))
    return out


def check_boundaries(
    values,
    labels: list[dict[str, str]],
    level_changes: Sequence[int] = (),
    candidate_pvalue: float = DEFAULT_CANDIDATE_PVALUE,
) -> list[Candidate]:
    """Every version boundary of a series, tested against its neighbours (see the module doc).

    values: the metric per point (detrended when a drift was fitted); labels: per point, the recorded
    versions (and machine); level_changes: change-point indices, which bound the segments too."""
    z = np.asarray(values, dtype=float)
    if len(labels) != len(z):
        raise ValueError(f"{len(labels)} labels for {len(z)} values")
    if not 0.0 < candidate_pvalue <= 1.0:
        raise ValueError(f"candidate_pvalue must be in (0, 1], got {candidate_pvalue!r}")
    found = boundaries(labels)
    bounds = sorted({0, len(z), *level_changes, *(k for k, _ in found)})
    out = []
    for k, changed in found:
        position = bounds.index(k)
        left, right = z[bounds[position - 1] : k], z[k : bounds[position + 1]]
        p = welch_t(left, right)
        out.append(
            Candidate(
                index=k,
                changed=changed,
                size_before=len(left),
                size_after=len(right),
                mean_before=float(left.mean()),
                mean_after=float(right.mean()),
                pvalue=p,
                moved=bool(p <= candidate_pvalue),
            )
        )
    return out


def _short(commit: str) -> str:
    return commit[:8] if len(commit) >= 16 else commit
