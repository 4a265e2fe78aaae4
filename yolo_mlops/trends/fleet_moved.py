"""What moved on a slow machine: its phases and operators against its peers', from the runs' own tables.

The trends attribution that explains a change point explains a slow machine too: its peers' runs stand for
"before" and its own for "after" (`attribution.attribute`), and an entry *moved* when it is slower on the
machine, explains at least `MOVED_SHARE` of the step-time gap and at least `MOVED_CONSISTENCY` of the machine's
runs lie beyond its peers' median; the biggest `MOVED_NAMED` join the explanation. Only the newest
`RUNS_PER_MACHINE` runs a machine are read, each once (`cache`). Why those bounds: docs/trends.md ("Fleet view").
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from yolo_mlops.trends.attribution import Attribution, Contribution, RunProfile, attribute, profile_from_run
from yolo_mlops.trends.fleet_evidence import NOT_EXPLAINED
from yolo_mlops.trends.fleet_stats import FleetReport, MachineStats, SlowMachine, WorkloadFleet

if TYPE_CHECKING:
    from yolo_mlops.tracking.connection import MlflowClient

RUNS_PER_MACHINE = 5  # newest runs read per machine (the slow one and each peer)
MOVED_SHARE = 10.0  # % of the step-time gap an entry must explain to be named
MOVED_CONSISTENCY = 0.8  # share of the machine's runs beyond its peers' median
MOVED_NAMED = 3  # entries named in the explanation (the table has up to `top`)


def explain(
    mlflow: MlflowClient,
    report: FleetReport,
    runs_per_machine: int = RUNS_PER_MACHINE,
    top: int = 15,
    cache: dict[str, RunProfile | None] | None = None,
) -> FleetReport:
    """The report with every slow machine's phases and operators against its peers' (`SlowMachine.moved`)
    and its explanation extended by what moved. Reads the tables of at most `runs_per_machine` runs of
    each machine of a workload with a slow machine; workloads without one are not read at all."""
    if runs_per_machine < 1:
        raise ValueError(f"runs_per_machine {runs_per_machine}: must be >= 1")
    cache = {} if cache is None else cache
    workloads = []
    for w in report.workloads:
        slow = tuple(_explain_machine(mlflow, w, s, runs_per_machine, top, cache) for s in w.slow_machines)
        workloads.append(replace(w, slow_machines=slow))
    return replace(report, workloads=tuple(workloads))


def _explain_machine(
    mlflow: MlflowClient,
    workload: WorkloadFleet,
    slow: SlowMachine,
    runs_per_machine: int,
    top: int,
    cache: dict[str, RunProfile | None],
) -> SlowMachine:
    """One slow machine of a workload with what moved against its peers (`explain`)."""
    own = next(m for m in workload.machines if m.machine == slow.machine)
    others = [m for m in workload.machines if m.machine != slow.machine]
    peers = [m for m in others if not m.slow] or others  # the healthy ones: what this workload should look like
    after, missing = _profiles(mlflow, [own], runs_per_machine, cache)
    before, missing_peers = _profiles(mlflow, peers, runs_per_machine, cache) if after else ([], [])
    if not after or not before:
        whose = f"{slow.machine}'s" if not after else "its peers'"
        note = f"no attribution: none of {whose} newest {runs_per_machine} runs has key_averages tables"
        moved = Attribution((), (), None, None, (), tuple(missing + missing_peers), note)
        return replace(slow, moved=moved)
    found = attribute(before, after, top)
    moved = replace(found, runs_without_tables=tuple(missing_peers + missing))
    return replace(slow, moved=moved, explanation=_explanation(slow, moved_entries(moved)))


def moved_entries(a: Attribution) -> list[Contribution]:
    """The entries slower on the machine that explain the gap (see the module doc), biggest first."""
    return [
        c
        for c in a.contributions
        if c.delta_ms > 0
        and c.share_pct is not None
        and c.share_pct >= MOVED_SHARE
        and c.consistency is not None
        and c.consistency >= MOVED_CONSISTENCY
    ]


def moved_text(c: Contribution) -> str:
    return f"{c.kind} {c.name} {c.delta_ms:+.3g} ms/step ({c.share_pct:.0f}% of the gap)"


def _explanation(slow: SlowMachine, moved: list[Contribution]) -> str:
    parts = [] if slow.explanation == NOT_EXPLAINED else [slow.explanation]
    if moved:
        parts.append("moved against its peers: " + ", ".join(moved_text(c) for c in moved[:MOVED_NAMED]))
    return "; ".join(parts) or NOT_EXPLAINED


def _profiles(
    mlflow: MlflowClient, machines: list[MachineStats], runs_per_machine: int, cache: dict[str, RunProfile | None]
) -> tuple[list[RunProfile], list[str]]:
    """The profiles of the newest runs of each machine (its runs are oldest first), and the runs without tables."""
    found: list[RunProfile] = []
    missing: list[str] = []
    for m in machines:
        steps = m.profiled_steps or (None,) * len(m.run_ids)
        for run_id, step_ms, profiled in list(zip(m.run_ids, m.step_ms, steps, strict=True))[-runs_per_machine:]:
            if run_id not in cache:
                cache[run_id] = profile_from_run(mlflow, run_id, profiled, step_ms)
            profile = cache[run_id]
            (found.append(profile) if profile is not None else missing.append(run_id))
    return found, missing
