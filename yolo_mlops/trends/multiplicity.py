"""Holm's step-down over a family of tests (family-wise error control under any dependence between them).

scipy has no Holm (`scipy.stats.false_discovery_control` controls the false discovery rate, a weaker promise:
a night's alerts are judged one by one, so the chance of any false one is what must be bounded).
"""

from __future__ import annotations


def holm_adjusted(pvalues: list[float]) -> list[float]:
    """Holm's step-down adjusted p-values: the k-th smallest p times (m - k + 1), made monotone; a test holds at
    family-wise rate alpha when its adjusted p is at most alpha. nan counts as 1."""
    clean = [p if p == p else 1.0 for p in pvalues]
    order = sorted(range(len(clean)), key=lambda i: (clean[i], i))
    adjusted = [1.0] * len(clean)
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (len(clean) - rank) * clean[i]))
        adjusted[i] = running
    return adjusted
