"""The fleet view: the same workload on several machines, each machine's step time, and the slow machine.

A series is one workload on one machine (the machine is in the series key), so the runs of one *workload*
(`RunRecord.workload`) on different machines are the fleet's health check: "identical" hosts that differ
in clocks, power caps, cooling, PCIe or CPU show up as one machine slower than its peers.

The test, per workload with runs on >= 2 machines (each with >= `MIN_RUNS` runs): for every machine, a
one-sided t test of the mean log step time (`perf/step_time_ms_p50`) of its runs against that of all its
peers' runs together ("this machine is slower"), with the run-to-run noise pooled within machines (N - k
degrees of freedom: exact under normal noise when no machine differs, and a slow machine's level does not
inflate the noise its peers are judged with), Holm's step-down correction over the machines of the
workload at family-wise rate `alpha` (default 0.01), and a practical floor: the machine's median must be at
least `min_effect` (default 3%) above the peers' median. Both the false-alarm rate and the power are
measured by simulation (tests/trends/test_fleet.py, docs/trends.md).

The evidence shown beside a slow machine is what its runs measured, against its peers' medians: from NVML
the SM clock (mean and lowest), power draw, temperature and the share of samples with a power or thermal
clocks event; on CPU machines the CPU model and core count. A figure a run did not record is said to be
absent, never shown as zero.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from scipy import stats as sps

from yolo_mlops.render import fmt, markdown_table, new_figure, save_figure
from yolo_mlops.trends.history import RunRecord

ALPHA = 0.01
MIN_EFFECT = 0.03
MIN_RUNS = 2
RESAMPLES = 2000
SEED = 20240601
# (label, metric, unit): what can explain a slow machine, compared with its peers
EVIDENCE_METRICS = (
    ("SM clock mean", "gpu/sm_clock_mhz_mean", "MHz"),
    ("SM clock lowest", "gpu/sm_clock_mhz_min", "MHz"),
    ("power draw mean", "gpu/power_w_mean", "W"),
    ("temperature max", "gpu/temp_c_max", "C"),
    ("power clocks events", "gpu/clocks_event_power_pct", "% of samples"),
    ("thermal clocks events", "gpu/clocks_event_thermal_pct", "% of samples"),
)


@dataclass(frozen=True)
class MachineStats:
    machine: str
    runs: int
    median_step_ms: float
    ci_low: float  # 95% bootstrap CI of the median over the machine's runs
    ci_high: float
    run_ids: tuple[str, ...]


@dataclass(frozen=True)
class SlowMachine:
    machine: str
    ratio: float  # machine median / peers' median step time
    pvalue: float  # one-sided Welch t, before Holm's correction
    adjusted_pvalue: float  # Holm-adjusted over the machines of the workload
    evidence: tuple[str, ...]  # one line per figure, machine vs peers


@dataclass(frozen=True)
class WorkloadFleet:
    workload: str
    label: str
    machines: tuple[MachineStats, ...]
    slow_machines: tuple[SlowMachine, ...]
    step_ms: dict[str, tuple[float, ...]] = field(default_factory=dict)  # machine -> its runs' step times


@dataclass(frozen=True)
class FleetReport:
    workloads: tuple[WorkloadFleet, ...]
    test: str


def fleet_report(records: list[RunRecord], alpha: float = ALPHA, min_effect: float = MIN_EFFECT) -> FleetReport:
    """Every workload run on >= 2 machines (with >= MIN_RUNS runs each that logged a step time)."""
    by_workload: dict[str, list[RunRecord]] = defaultdict(list)
    for r in records:
        if r.workload and r.machine and r.step_time_ms and math.isfinite(r.step_time_ms) and r.step_time_ms > 0:
            by_workload[r.workload].append(r)
    workloads = []
    for key, runs in sorted(by_workload.items()):
        per_machine: dict[str, list[RunRecord]] = defaultdict(list)
        for r in runs:
            per_machine[r.machine].append(r)  # type: ignore[index]
        per_machine = {m: rs for m, rs in per_machine.items() if len(rs) >= MIN_RUNS}
        if len(per_machine) >= 2:
            workloads.append(judge_workload(key, runs[0].workload_label or key, per_machine, alpha, min_effect))
    test = (f"one-sided t of log step time, machine vs its peers, noise pooled within machines, Holm over a workload's machines at "
            f"family-wise {alpha:g}; slower by at least {100 * min_effect:g}%; >= {MIN_RUNS} runs per machine")
    return FleetReport(tuple(workloads), test)


def judge_workload(key: str, label: str, per_machine: dict[str, list[RunRecord]], alpha: float = ALPHA,
                   min_effect: float = MIN_EFFECT) -> WorkloadFleet:
    rng = np.random.default_rng(SEED)
    logs = {m: np.log([r.step_time_ms for r in rs]) for m, rs in sorted(per_machine.items())}
    machines = []
    for m, rs in sorted(per_machine.items()):
        values = np.array([r.step_time_ms for r in rs], dtype=float)
        boot = np.median(values[rng.integers(0, len(values), size=(RESAMPLES, len(values)))], axis=1)
        low, high = np.quantile(boot, [0.025, 0.975])
        machines.append(MachineStats(m, len(rs), float(np.median(values)), float(low), float(high),
                                     tuple(r.run_id for r in rs)))
    found = slow_machines(logs, alpha, min_effect)
    slow = tuple(SlowMachine(m, ratio, p, adj, evidence(per_machine, m)) for m, ratio, p, adj in found)
    return WorkloadFleet(key, label, tuple(machines), slow,
                         {m: tuple(float(r.step_time_ms) for r in rs) for m, rs in sorted(per_machine.items())})


def slow_machines(logs: dict[str, np.ndarray], alpha: float = ALPHA, min_effect: float = MIN_EFFECT
                  ) -> list[tuple[str, float, float, float]]:
    """(machine, ratio to peers, p, Holm-adjusted p) of the machines slower than their peers beyond noise."""
    tests = []
    sizes = {m: len(v) for m, v in logs.items()}
    df = sum(sizes.values()) - len(logs)
    # run-to-run noise pooled within machines: what a machine's runs scatter by, whatever its level
    pooled = math.sqrt(sum(float(((v - v.mean()) ** 2).sum()) for v in logs.values()) / df) if df > 0 else 0.0
    for m, own in logs.items():
        peers = np.concatenate([v for k, v in logs.items() if k != m])
        ratio = float(np.exp(np.median(own) - np.median(peers)))
        if pooled > 0:
            t = (own.mean() - peers.mean()) / (pooled * math.sqrt(1 / len(own) + 1 / len(peers)))
            p = float(sps.t.sf(t, df))
        else:
            p = 0.0 if own.mean() > peers.mean() else 1.0
        tests.append((m, ratio, p))
    adjusted = holm([p for _, _, p in tests])
    return [(m, ratio, p, adj) for (m, ratio, p), adj in zip(tests, adjusted, strict=True)
            if adj <= alpha and ratio >= 1.0 + min_effect]


def holm(pvalues: list[float]) -> list[float]:
    """Holm's step-down adjusted p-values (family-wise error control, any dependence)."""
    order = np.argsort(pvalues)
    n = len(pvalues)
    adjusted = [1.0] * n
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (n - rank) * pvalues[i]))
        adjusted[i] = running
    return adjusted


def evidence(per_machine: dict[str, list[RunRecord]], machine: str) -> tuple[str, ...]:
    """The machine's measured figures against its peers' medians; absent figures said to be absent."""
    own, peers = per_machine[machine], [r for m, rs in per_machine.items() if m != machine for r in rs]
    lines = []
    for label, metric, unit in EVIDENCE_METRICS:
        mine = [r.metrics[metric] for r in own if metric in r.metrics]
        theirs = [r.metrics[metric] for r in peers if metric in r.metrics]
        if mine and theirs:
            lines.append(f"{label}: {fmt(float(np.median(mine)), '.4g')} {unit} vs peers "
                         f"{fmt(float(np.median(theirs)), '.4g')} {unit}")
    for label, key in (("CPU", "cpu_model"), ("CPU cores", "cpu_count")):
        mine_facts = sorted({r.host.get(key, "") for r in own} - {""})
        peer_facts = sorted({r.host.get(key, "") for r in peers} - {""})
        if mine_facts and mine_facts != peer_facts:
            lines.append(f"{label}: {', '.join(mine_facts)} vs peers {', '.join(peer_facts) or 'not recorded'}")
    if not lines:
        lines.append("no NVML figure recorded by these runs (CPU runs, or a sampler without them), and the same "
                     "CPU model and core count as its peers: nothing recorded explains it")
    return tuple(lines)


def fleet_markdown(report: FleetReport) -> str:
    if not report.workloads:
        return "No workload ran on two or more machines (with 2 runs each): no fleet to compare."
    lines = []
    for w in report.workloads:
        slow = {s.machine: s for s in w.slow_machines}
        rows = [(f"`{m.machine}`", m.runs, fmt(m.median_step_ms, ".1f"),
                 f"{fmt(m.ci_low, '.1f')}-{fmt(m.ci_high, '.1f')}",
                 f"**slower** x{slow[m.machine].ratio:.2f} (p {slow[m.machine].adjusted_pvalue:.2g})"
                 if m.machine in slow else "-") for m in w.machines]
        lines += [f"### {w.label}", "", markdown_table(["machine", "runs", "median step ms", "95% CI", "slow"], rows)]
        for s in w.slow_machines:
            lines += ["", f"`{s.machine}` is slower than its peers: " + "; ".join(s.evidence)]
        lines.append("")
    lines.append(f"Test: {report.test}.")
    return "\n".join(lines)


def plot_fleet(report: FleetReport, path: Path) -> Path:
    """Per-machine step-time distributions side by side, one panel per workload."""
    n = max(len(report.workloads), 1)
    fig = new_figure(8, 3.2 * n)
    for i, w in enumerate(report.workloads):
        ax = fig.add_subplot(n, 1, i + 1)
        names = list(w.step_ms)
        ax.boxplot([w.step_ms[m] for m in names], tick_labels=names)
        for j, m in enumerate(names, start=1):
            ax.scatter([j] * len(w.step_ms[m]), w.step_ms[m], s=12, alpha=0.7,
                       color="tab:red" if any(s.machine == m for s in w.slow_machines) else "tab:blue")
        ax.set_title(w.label, fontsize=9)
        ax.set_ylabel("step time p50, ms")
    return save_figure(fig, path)


def to_json(report: FleetReport) -> dict:
    from dataclasses import asdict

    return {"test": report.test, "workloads": [asdict(w) for w in report.workloads]}
