"""Savings: the upper bound of the step time a finding's fix could save, from the measured time the finding
accounts for, in ms per step and % of step, with the assumption under which the whole bound is saved.
"""

from __future__ import annotations

from dataclasses import dataclass

from yolo_mlops.analysis.diagnosis_input import DiagnosisInput, ranks
from yolo_mlops.analysis.model import RankAnalysis


@dataclass
class Saving:
    """Upper bound of the step time a finding's fix could save, from the measured time it accounts for."""

    ms_per_step: float
    pct_of_step: float
    assumption: str  # the condition under which the whole bound is saved

    def text(self) -> str:
        return f"saves up to {self.ms_per_step:.1f} ms/step ({self.pct_of_step:.0f}% of step) {self.assumption}"


def step_ms(diagnosis_input: DiagnosisInput, rank: RankAnalysis | None = None) -> float | None:
    """Mean step time from the same source as the share it multiplies: the rank's trace steps for a share
    measured on that rank, else the step timer's, else the slowest rank's."""
    if rank is not None and rank.step_time is not None:
        return rank.step_time.mean_us / 1000
    if diagnosis_input.step_time_ms:
        return diagnosis_input.step_time_ms
    timed = [r.step_time.mean_us / 1000 for r in ranks(diagnosis_input) if r.step_time is not None]
    return max(timed) if timed else None


def idle_saving(rank: RankAnalysis, cause: str, assumption: str) -> Saving | None:
    """The rank's GPU idle attributed to `cause`, per step."""
    row = rank.idle_cause(cause)
    if row is None or row.ms_per_step is None or row.step_pct is None:  # no steps: no per-step saving
        return None
    return Saving(row.ms_per_step, row.step_pct, assumption)


def per_step_saving(rank: RankAnalysis, window_us: float, assumption: str) -> Saving | None:
    """A time measured over the rank's GPU window as a saving per step of that window."""
    if rank.window_steps <= 0 or rank.window_step_us <= 0:
        return None
    return Saving(window_us / 1000 / rank.window_steps, 100.0 * window_us / rank.window_step_us, assumption)
