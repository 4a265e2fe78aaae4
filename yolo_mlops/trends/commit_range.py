"""The commit range a regression names: what `yolo-mlops bisect` and the `bisect` flow take.

A change point's "what changed" holds the commit of the last run before it and of the first run after it
(`trend.what_changed`); a version boundary that moved a metric (`candidates`) holds the commits on each side
of it. Between them lies the commit that made the metric worse.
"""

from __future__ import annotations

from dataclasses import dataclass

from yolo_mlops import names
from yolo_mlops.trends.trend import CandidateEvent, ChangeEvent

UNKNOWN_COMMITS = ("", "none", "?")


@dataclass(frozen=True)
class BisectRange:
    good: str  # the commit of the last run before the change point
    bad: str  # the commit of its first run after
    run_id: str  # the first run after: its RunSpec is the workload to re-run
    metric: str

    def command(self) -> str:
        """The `yolo-mlops bisect` command line for this range."""
        metric = f" --metric {self.metric}" if self.metric != names.STEP_TIME_P50 else ""
        return f"yolo-mlops bisect --good {self.good[:12]} --bad {self.bad[:12]} --run {self.run_id}{metric}"

    def parameters(self) -> dict[str, str]:
        """The `bisect` flow's parameters for this range."""
        return {"good": self.good, "bad": self.bad, "run_id": self.run_id, "metric": self.metric}


def bisect_range(change: ChangeEvent) -> BisectRange | None:
    """The range to bisect for a regression whose runs before and after were made by different known commits;
    None for an improvement or when no commit changed."""
    commit = next((v for v in change.what_changed if v.name == "commit"), None)
    if change.direction != "regression" or commit is None:
        return None
    return _known_range(commit.before[-1], commit.after[0], change.run_id, change.metric)


def candidate_range(candidate: CandidateEvent) -> BisectRange | None:
    """The range to bisect for a version boundary that moved a metric the bad way and whose sides ran different
    known commits; None otherwise (an improvement, a boundary within noise, no commit change)."""
    if candidate.direction != "regression" or not candidate.test.moved:
        return None
    commit = next(((b, a) for name, b, a in candidate.test.changed if name == "commit"), None)
    return None if commit is None else _known_range(commit[0], commit[1], candidate.run_id, candidate.metric)


def _known_range(good: str, bad: str, run_id: str, metric: str) -> BisectRange | None:
    """A range between two known, different commits. The same commit on both sides (a change point whose first
    run after it still ran the last good commit) leaves nothing to bisect."""
    if good in UNKNOWN_COMMITS or bad in UNKNOWN_COMMITS or good == bad:
        return None
    return BisectRange(good=good, bad=bad, run_id=run_id, metric=metric)
