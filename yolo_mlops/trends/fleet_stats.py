"""The fleet test: per workload, the machines slower than their peers beyond noise.

A series is one workload on one machine (the machine is in the series key), so the runs of one *workload*
(`HistoryRun.workload`) on different machines are the fleet's health check: "identical" hosts that differ
in clocks, power caps, cooling, PCIe or CPU show up as one machine slower than its peers.

The test, per workload with runs on >= 2 machines (each with >= `min_runs` runs): for every machine, a
one-sided t test of the mean log step time (`perf/step_time_ms_p50`) of its runs against that of all its
peers' runs together ("this machine is slower"), with the run-to-run noise pooled within machines (N - k
degrees of freedom: exact under normal noise when no machine differs, and a slow machine's level does not
inflate the noise its peers are judged with), Holm's step-down correction over the machines of the
workload at family-wise rate `max_pvalue` (default 0.01), and a practical floor: the machine's median must
be at least `min_effect` (default 3%) above its peers' median (the median of their medians). Both the
false-alarm rate and the power are measured by simulation (tests/trends/test_fleet.py,
benchmarks/bench_fleet.py, docs/trends.md).

Pure functions over `HistoryRun`s and numpy arrays; the evidence beside a slow machine is `fleet_evidence`'s.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np

from yolo_mlops.stats import bootstrap_medians, holm_adjusted, pooled_noise, shift_t
from yolo_mlops.trends.attribution import Attribution
from yolo_mlops.trends.fleet_evidence import NOT_EXPLAINED, Evidence, evidence
from yolo_mlops.trends.history import HistoryRun

ALPHA = 0.01  # default family-wise false-alarm rate per workload
MIN_EFFECT = 0.03
MIN_RUNS = 2
RESAMPLES = 2000
SEED = 20240601


@dataclass(frozen=True)
class FleetSettings:
    max_pvalue: float = ALPHA  # family-wise false-alarm rate over a workload's machines
    min_effect: float = MIN_EFFECT  # a slow machine's median is at least this fraction above its peers'
    min_runs: int = MIN_RUNS  # runs a machine needs to be compared (fewer: left out and counted)
    resamples: int = RESAMPLES  # bootstrap resamples of each machine's median
    seed: int = SEED

    def __post_init__(self) -> None:
        if not 0 < self.max_pvalue < 1:
            raise ValueError(f"max_pvalue {self.max_pvalue}: must be in (0, 1)")
        if self.min_effect < 0 or self.min_runs < 2:
            raise ValueError("min_effect must be >= 0 and min_runs >= 2")


@dataclass(frozen=True)
class MachineStats:
    machine: str
    runs: int
    median_step_ms: float
    ci_low: float  # 95% bootstrap CI of the median over the machine's runs (seeded)
    ci_high: float
    run_ids: tuple[str, ...]
    step_ms: tuple[float, ...]  # its runs' perf/step_time_ms_p50, oldest first
    ratio: float  # its median / its peers' median
    pvalue: float  # one-sided t (slower than its peers), before Holm's correction
    adjusted_pvalue: float  # Holm-adjusted over the machines of the workload
    slow: bool
    profiled_steps: tuple[int | None, ...] = ()  # its runs' profiled steps (what attribution divides by)


@dataclass(frozen=True)
class SlowMachine:
    machine: str
    ratio: float  # machine median / peers' median step time
    median_step_ms: float
    peers_median_ms: float
    pvalue: float
    adjusted_pvalue: float
    evidence: tuple[Evidence, ...]  # every figure, the ones that stand out first; absent ones say so
    explanation: str  # the figures that stand out (and, once explained, what moved), or NOT_EXPLAINED
    moved: Attribution | None = None  # its phases and operators against its peers' (`fleet_moved.explain`)

    @property
    def slower_pct(self) -> float:
        return 100.0 * (self.ratio - 1.0)


@dataclass(frozen=True)
class WorkloadFleet:
    workload: str
    label: str
    machines: tuple[MachineStats, ...]
    slow_machines: tuple[SlowMachine, ...]
    noise_pct: float  # run-to-run noise pooled within machines (sd of log step time, in percent)
    degrees_of_freedom: int
    left_out: tuple[str, ...] = ()  # machines with fewer than min_runs runs


@dataclass(frozen=True)
class FleetReport:
    workloads: tuple[WorkloadFleet, ...]
    test: str
    settings: FleetSettings = field(default_factory=FleetSettings)
    single_machine_workloads: int = 0  # workloads seen on one machine only (no fleet to compare)
    experiment: str | None = None


# ---------------------------------------------------------------------------------------------------------------
# The test
# ---------------------------------------------------------------------------------------------------------------


def machine_tests(logs: dict[str, np.ndarray]) -> dict[str, tuple[float, float, float]]:
    """Machine -> (ratio of its median to its peers' median, one-sided p, Holm-adjusted p)."""
    noise = pooled_noise(list(logs.values()))
    medians = {machine: float(np.median(v)) for machine, v in logs.items()}
    tests = {}
    for machine, own in logs.items():
        peers = np.concatenate([v for k, v in logs.items() if k != machine])
        ratio = math.exp(medians[machine] - float(np.median([medians[k] for k in logs if k != machine])))
        tests[machine] = (ratio, shift_t(peers, own, noise, "greater"))
    adjusted = holm_adjusted([p for _, p in tests.values()])
    return {machine: (ratio, p, adj) for (machine, (ratio, p)), adj in zip(tests.items(), adjusted, strict=True)}


def slow_machines(
    logs: dict[str, np.ndarray], max_pvalue: float = ALPHA, min_effect: float = MIN_EFFECT
) -> list[tuple[str, float, float, float]]:
    """(machine, ratio to peers, p, Holm-adjusted p) of the machines slower than their peers beyond noise;
    `logs`: each machine's log step times."""
    return [
        (machine, ratio, p, adj)
        for machine, (ratio, p, adj) in machine_tests(logs).items()
        if adj <= max_pvalue and ratio >= 1.0 + min_effect
    ]


def describe_test(settings: FleetSettings) -> str:
    return (
        f"one-sided t test of each machine's mean log step time against its peers' runs, noise pooled within "
        f"machines (runs - machines degrees of freedom), Holm's correction over a workload's machines at "
        f"family-wise {settings.max_pvalue:g}; slower by at least {100 * settings.min_effect:g}% "
        f"(median vs the peers' median); >= {settings.min_runs} runs per machine"
    )


# ---------------------------------------------------------------------------------------------------------------
# The report
# ---------------------------------------------------------------------------------------------------------------


def fleet_report(
    records: list[HistoryRun], settings: FleetSettings | None = None, experiment: str | None = None
) -> FleetReport:
    """Every workload run on >= 2 machines (with >= min_runs runs each that logged a step time)."""
    settings = settings or FleetSettings()
    by_workload: dict[str, list[HistoryRun]] = defaultdict(list)
    for r in records:
        if r.workload and r.machine and r.step_time_ms and math.isfinite(r.step_time_ms) and r.step_time_ms > 0:
            by_workload[r.workload].append(r)
    workloads, single = [], 0
    for key, runs in sorted(by_workload.items()):
        per_machine: dict[str, list[HistoryRun]] = defaultdict(list)
        for r in runs:
            per_machine[r.machine].append(r)  # type: ignore[index]
        kept = {machine: rs for machine, rs in sorted(per_machine.items()) if len(rs) >= settings.min_runs}
        if len(kept) >= 2:
            left_out = tuple(sorted(set(per_machine) - set(kept)))
            workloads.append(judge_workload(key, runs[0].workload_label or key, kept, settings, left_out))
        else:
            single += 1
    return FleetReport(tuple(workloads), describe_test(settings), settings, single, experiment)


def judge_workload(
    key: str,
    label: str,
    per_machine: dict[str, list[HistoryRun]],
    settings: FleetSettings | None = None,
    left_out: tuple[str, ...] = (),
) -> WorkloadFleet:
    settings = settings or FleetSettings()
    rng = np.random.default_rng(settings.seed)
    step = {machine: np.array([r.step_time_ms for r in rs], dtype=float) for machine, rs in sorted(per_machine.items())}
    logs = {machine: np.log(v) for machine, v in step.items()}
    tests = machine_tests(logs)
    noise = pooled_noise(list(logs.values()))
    machines, slow = [], []
    for machine, values in step.items():
        ratio, p, adj = tests[machine]
        boot = bootstrap_medians(values, rng, settings.resamples)
        low, high = np.quantile(boot, [0.025, 0.975])
        is_slow = adj <= settings.max_pvalue and ratio >= 1.0 + settings.min_effect
        machines.append(
            MachineStats(
                machine,
                len(values),
                float(np.median(values)),
                float(low),
                float(high),
                tuple(r.run_id for r in per_machine[machine]),
                tuple(float(v) for v in values),
                ratio,
                p,
                adj,
                is_slow,
                tuple(r.profiled_steps for r in per_machine[machine]),
            )
        )
        if is_slow:
            peers_median = float(np.median([np.median(v) for k, v in step.items() if k != machine]))
            found = evidence(per_machine, machine)
            standing = [e.text for e in found if e.stands_out]
            slow.append(
                SlowMachine(
                    machine,
                    ratio,
                    float(np.median(values)),
                    peers_median,
                    p,
                    adj,
                    found,
                    "; ".join(standing) if standing else NOT_EXPLAINED,
                )
            )
    return WorkloadFleet(key, label, tuple(machines), tuple(slow), 100.0 * noise.sd, noise.df, left_out)
