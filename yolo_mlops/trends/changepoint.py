"""Change-point detection over a metric's whole history: E-divisive means with a Student's t significance
test in sliding windows, the method of Apache Otava (Hunter: Fleming et al., ICPE 2023; Daly et al.,
ICPE 2020; E-divisive: Matteson & James, JASA 2014).

Pure functions over numpy arrays; no MLflow, no I/O, no randomness: the same history gives the same answer.
Two steps, as Otava's `compute_change_points`: split (E-divisive in sliding windows, each candidate screened by a
t test) and merge (every candidate re-tested against the whole segments beside it). Two departures from Otava:
the merge p-value is corrected for the choice of the split, and the t test uses the sample variance with at
least `min_segment` points a segment; `otava_compatible=True` drops both (benchmarks/otava_compare.py checks it
against Otava point for point). The method, the departures and what they buy: docs/trends.md
("Change-point detection").
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import pairwise

import numpy as np

from yolo_mlops.stats import student_t_of

DEFAULT_WINDOW = 50  # Otava's default sliding window
DEFAULT_MAX_PVALUE = 0.001  # Otava's default significance
DEFAULT_MIN_MAGNITUDE = 0.0  # relative change below which a change point is dropped (0 = keep all)
DEFAULT_MIN_SEGMENT = 2  # fewest points of a segment: one point on its own is an outlier, not a level


@dataclass(frozen=True)
class ChangePoint:
    index: int  # first index of the new segment (values[index] is the first point after the change)
    # Student's t test of the segments on each side; by default corrected for the choice of the split
    # (raw p x the number of split positions of the two segments together), the figure max_pvalue bounds
    pvalue: float
    mean_before: float
    mean_after: float
    std_before: float
    std_after: float
    size_before: int = 0  # points of the segment before / after (the ones the t test compared)
    size_after: int = 0

    @property
    def change_pct(self) -> float:
        """Relative change of the segment mean, in percent of the mean before (+ = value went up)."""
        if not self.mean_before:
            return float("nan")
        return 100.0 * (self.mean_after - self.mean_before) / abs(self.mean_before)


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


@dataclass(frozen=True)
class _Test:
    pvalue: float
    mean_before: float
    mean_after: float
    std_before: float
    std_after: float
    size_before: int
    size_after: int

    def magnitude(self, symmetric: bool) -> float:
        """|relative change of the mean|, a fraction of the mean before (symmetric: the larger of the
        change relative to either side, Otava's definition); inf from a zero mean."""
        m1, m2 = self.mean_before, self.mean_after
        if symmetric:
            return max(abs(m2 / m1 - 1.0) if m1 else 0.0, abs(m1 / m2 - 1.0) if m2 else 0.0)
        if m1:
            return abs(m2 - m1) / abs(m1)
        return float("inf") if m2 != m1 else 0.0


def _split_test(left: np.ndarray, right: np.ndarray, ddof: int) -> _Test:
    """Two-sided Student's t test (pooled variance) of two non-empty samples; std with `ddof`."""
    n1, n2 = len(left), len(right)
    m1, m2 = float(left.mean()), float(right.mean())
    v1 = float(left.var(ddof=ddof)) if n1 > ddof else 0.0
    v2 = float(right.var(ddof=ddof)) if n2 > ddof else 0.0
    return _Test(student_t_of(m1, v1, n1, m2, v2, n2), m1, m2, float(np.sqrt(v1)), float(np.sqrt(v2)), n1, n2)


class _Window:
    """E-divisive over one window: the divergence of every split of every sub-interval from one prefix sum."""

    def __init__(self, z: np.ndarray):
        self.z = z
        n = len(z)
        s = np.zeros((n + 1, n + 1))
        s[1:, 1:] = np.abs(z[:, None] - z[None, :]).cumsum(axis=0).cumsum(axis=1)
        self.s = s  # s[i, j] = sum of |z_a - z_b| over a < i, b < j

    def _block(self, r0, r1, c0, c1):
        s = self.s
        return s[r1, c1] - s[r0, c1] - s[r1, c0] + s[r0, c0]

    def candidate(self, a: int, b: int) -> tuple[int, float]:
        """(tau, qhat): the split of z[a:b] (b - a >= 2) whose X = z[a:tau], Y = z[tau:kappa] diverge most.

        Ties go to the smallest tau, then the smallest kappa (row-major order, as numpy's argmax)."""
        tau = np.arange(a + 1, b)[:, None]
        kappa = np.arange(a + 2, b + 1)[None, :]
        valid = kappa > tau
        kappa = np.where(valid, kappa, tau + 1)  # the lower-left cells are not splits; keep them finite
        n = (tau - a).astype(float)
        m = (kappa - tau).astype(float)
        cross = self._block(a, tau, tau, kappa)
        within_x = self._block(a, tau, a, tau) / 2.0
        within_y = self._block(tau, kappa, tau, kappa) / 2.0
        coef_x = 2.0 * m / ((n + m) * np.maximum(n - 1.0, 1.0)) * (n > 1)
        coef_y = 2.0 * n / ((n + m) * np.maximum(m - 1.0, 1.0)) * (m > 1)
        q = np.where(valid, 2.0 / (n + m) * cross - coef_x * within_x - coef_y * within_y, -np.inf)
        flat = int(np.argmax(q))
        return a + 1 + flat // q.shape[1], float(q.flat[flat])

    def change_points(self, max_pvalue: float, ddof: int) -> list[int]:
        """Recursive E-divisive: split the most divergent interval while its t test is significant."""
        n = len(self.z)
        cps: list[int] = []
        cache: dict[tuple[int, int], tuple[int, float]] = {}  # a candidate depends on its interval only
        while True:
            bounds = [0, *cps, n]
            best: tuple[int, float, int, int] | None = None
            for a, b in pairwise(bounds):
                if b - a < 2:
                    continue
                if (a, b) not in cache:
                    cache[(a, b)] = self.candidate(a, b)
                tau, q = cache[(a, b)]
                if best is None or q > best[1]:
                    best = (tau, q, a, b)
            if best is None:
                return cps
            tau, _, a, b = best
            if not _split_test(self.z[a:tau], self.z[tau:b], ddof).pvalue <= max_pvalue:
                return cps
            cps = sorted([*cps, tau])


def _weak_change_points(z: np.ndarray, window: int, max_pvalue: float, ddof: int) -> list[int]:
    """Split step: the union of the change points of every sliding window."""
    n = len(z)
    step = max(window // 2, 1)
    found: set[int] = set()
    start = 0
    while start < n:
        end = min(start + window, n)
        local = _Window(z[start:end]).change_points(max_pvalue, ddof) if end - start >= 2 else []
        found.update(start + i for i in local)
        last = start + local[-1] if local else 0
        start = max(last, start + step)
    return sorted(found)


@dataclass(frozen=True)
class _Rules:
    max_pvalue: float
    min_magnitude: float
    min_segment: int
    ddof: int  # 1: sample variance; 0: Otava's population variance
    correct_split: bool  # Bonferroni over the split positions of the merged interval
    otava: bool  # Otava's comparisons: drop at p >= max_pvalue and magnitude <= min_magnitude (symmetric)


def _merge(z: np.ndarray, cps: list[int], rules: _Rules) -> list[tuple[int, _Test]]:
    """Merge step: drop the weakest change point, re-test its neighbours, until every one passes."""
    n = len(z)
    cps = list(cps)

    def test(k: int) -> _Test:
        lo = cps[k - 1] if k > 0 else 0
        hi = cps[k + 1] if k + 1 < len(cps) else n
        t = _split_test(z[lo : cps[k]], z[cps[k] : hi], rules.ddof)
        if rules.correct_split:
            t = _Test(
                min(1.0, t.pvalue * (hi - lo - 1)),
                t.mean_before,
                t.mean_after,
                t.std_before,
                t.std_after,
                t.size_before,
                t.size_after,
            )
        return t

    def passes(p: float) -> bool:
        return p < rules.max_pvalue if rules.otava else p <= rules.max_pvalue

    stats = [test(k) for k in range(len(cps))]
    while cps:
        bounds = [0, *cps, n]  # change point k ends segment k and starts segment k + 1
        short = [
            k
            for k in range(len(cps))
            if min(bounds[k + 1] - bounds[k], bounds[k + 2] - bounds[k + 1]) < rules.min_segment
        ]
        if short:
            # segments too short come first, whatever the p-values: next to a one-point segment the t test
            # has no degrees of freedom (p = 1), which says nothing about the change; the mean still does,
            # so of the points bounding a short segment the one that moves it least goes
            drop = min(short, key=lambda k: (abs(stats[k].mean_after - stats[k].mean_before), -k))
        else:
            pvals = [s.pvalue if s.pvalue == s.pvalue else 1.0 for s in stats]  # NaN: not significant
            drop = int(np.argmax(pvals))
            if passes(pvals[drop]):
                mags = [s.magnitude(symmetric=rules.otava) for s in stats]
                drop = int(np.argmin(mags))
                small = mags[drop] <= rules.min_magnitude if rules.otava else mags[drop] < rules.min_magnitude
                if not small:
                    break
        del cps[drop], stats[drop]
        # the neighbours of the dropped point now face a longer segment; Otava 0.8.0 re-tests the one after
        # it and the one after that, leaving the one before with its old figures
        for k in (drop, drop + 1) if rules.otava else (drop - 1, drop):
            if 0 <= k < len(cps):
                stats[k] = test(k)
    return list(zip(cps, stats, strict=True))


def _as_series(values) -> np.ndarray:
    z = np.asarray(values, dtype=float)
    if z.ndim != 1:
        raise ValueError(f"a series must be one-dimensional, got shape {z.shape}")
    bad = np.flatnonzero(~np.isfinite(z))
    if bad.size:
        raise ValueError(
            f"series has {bad.size} missing or infinite value(s) (first at index {int(bad[0])}); "
            "drop missing points before change-point detection"
        )
    return z


def detect(
    values: np.ndarray,
    *,
    window: int = DEFAULT_WINDOW,
    max_pvalue: float = DEFAULT_MAX_PVALUE,
    min_magnitude: float = DEFAULT_MIN_MAGNITUDE,
    min_segment: int = DEFAULT_MIN_SEGMENT,
    otava_compatible: bool = False,
) -> list[ChangePoint]:
    """Change points of a series, in index order. NaNs are not allowed (drop missing points first).

    window: points per sliding window (>= 2); max_pvalue: the significance a change point must reach in
    the final re-test, in (0, 1]; min_magnitude: smallest |relative change of the mean| kept, a fraction
    (0.05 = 5%); min_segment: fewest points of any segment (>= 1; 1 lets a lone outlier be a change point);
    otava_compatible: Otava 0.8.0's arithmetic (population variance, no split correction, min_segment 1).
    A series shorter than 2 x min_segment has no change point. Raises ValueError on bad input.
    """
    z = _as_series(values)
    if isinstance(window, bool) or int(window) != window or window < 2:
        raise ValueError(f"window must be an integer >= 2, got {window!r}")
    if not 0.0 < max_pvalue <= 1.0:
        raise ValueError(f"max_pvalue must be in (0, 1], got {max_pvalue!r}")
    if not min_magnitude >= 0.0:
        raise ValueError(f"min_magnitude must be >= 0, got {min_magnitude!r}")
    if isinstance(min_segment, bool) or int(min_segment) != min_segment or min_segment < 1:
        raise ValueError(f"min_segment must be an integer >= 1, got {min_segment!r}")
    rules = _Rules(
        max_pvalue=max_pvalue,
        min_magnitude=min_magnitude,
        min_segment=1 if otava_compatible else int(min_segment),
        ddof=0 if otava_compatible else 1,
        correct_split=not otava_compatible,
        otava=otava_compatible,
    )
    if len(z) < 2 * rules.min_segment:
        return []
    # the split step screens at a looser level and the merge step's re-test decides (Otava's rule)
    first_pass = max_pvalue * 10 if max_pvalue < 0.05 else (max_pvalue * 2 if max_pvalue < 0.5 else max_pvalue)
    weak = _weak_change_points(z, int(window), first_pass, rules.ddof)
    return [
        ChangePoint(
            index=i,
            pvalue=s.pvalue,
            mean_before=s.mean_before,
            mean_after=s.mean_after,
            std_before=s.std_before,
            std_after=s.std_after,
            size_before=s.size_before,
            size_after=s.size_after,
        )
        for i, s in _merge(z, weak, rules)
    ]


def segments(values: np.ndarray, change_points: list[ChangePoint]) -> list[Segment]:
    """The segments between change points, with their statistics (std: the sample standard deviation,
    0 for a one-point segment). An empty series has no segments. Raises ValueError on bad input."""
    z = _as_series(values)
    if len(z) == 0:
        if change_points:
            raise ValueError("change points given for an empty series")
        return []
    bounds = [0, *(cp.index for cp in change_points), len(z)]
    if any(hi <= lo for lo, hi in pairwise(bounds)):
        raise ValueError(
            f"change point indices must be increasing and inside (0, {len(z)}): {[cp.index for cp in change_points]}"
        )
    out = []
    for lo, hi in pairwise(bounds):
        part = z[lo:hi]
        out.append(
            Segment(
                start=lo,
                end=hi,
                mean=float(part.mean()),
                std=float(part.std(ddof=1)) if len(part) > 1 else 0.0,
                median=float(np.median(part)),
            )
        )
    return out
