"""The fleet view: the same workload on several machines, each machine's step time, and the slow machine.

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
false-alarm rate and the power are measured by simulation (tests/trends/test_fleet.py, docs/trends.md).

The evidence shown beside a slow machine is what its runs measured, against its peers' medians: from NVML
the SM clock (mean, lowest, and the GPU's maximum), the enforced power limit and the power drawn, the
clock-event (throttle) reasons seen, the hottest temperature and the PCIe link generation and width; on
every machine the CPU model (CPU runs), clock and core count. A figure a run did not record is said to be
not recorded, never shown as zero.

Pure functions over `HistoryRun`s; `load_fleet` / `fleet_section` read MLflow through `history`.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
from scipy import stats as sps

from yolo_mlops.errors import ConfigError
from yolo_mlops.render import fmt, markdown_table, new_figure, save_figure
from yolo_mlops.tracking import names
from yolo_mlops.trends.history import HistoryRun

ALPHA = 0.01  # default family-wise false-alarm rate per workload
MIN_EFFECT = 0.03
MIN_RUNS = 2
RESAMPLES = 2000
SEED = 20240601
STANDS_OUT = 0.05  # a figure 5% (or, for shares of time, 5 points) away from its peers' stands out
NOT_EXPLAINED = "nothing recorded explains it"


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


# (name, metric, unit, kind): NVML figures that can explain a slow GPU machine. kind "share": a % of the
# training time, compared in points; "level": compared as a ratio.
GPU_EVIDENCE = (
    ("SM clock mean", names.GPU_SM_CLOCK_MEAN, "MHz", "level"),
    ("SM clock max", names.GPU_SM_CLOCK_MAX, "MHz", "level"),
    ("SM clock lowest", names.GPU_SM_CLOCK_MIN, "MHz", "level"),
    ("power limit", names.GPU_POWER_LIMIT, "W", "level"),
    ("power draw mean", names.GPU_POWER_MEAN, "W", "level"),
    ("temperature max", names.GPU_TEMP_MAX, "C", "level"),
    ("power-capped clocks", names.GPU_CLOCKS_EVENT_POWER, "% of time", "share"),
    ("thermal-slowed clocks", names.GPU_CLOCKS_EVENT_THERMAL, "% of time", "share"),
    ("PCIe generation", names.GPU_PCIE_GEN, "", "level"),
    ("PCIe width", names.GPU_PCIE_WIDTH, "lanes", "level"),
)
CPU_EVIDENCE = (("CPU clock", "cpu_mhz", "MHz"), ("CPU cores", "cpu_count", ""))
CLOCKS_EVENT_REASONS = ("gpu_idle", "applications_clocks_setting", "sw_power_cap", "hw_slowdown", "sync_boost",
                        "sw_thermal_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown",
                        "display_clock_setting")  # nvml.backend.CLOCKS_EVENT_REASONS, without importing nvml


@dataclass(frozen=True)
class Evidence:
    name: str
    unit: str
    machine: float | str | None  # the machine's median over its runs; None: not recorded on its runs
    peers: float | str | None  # the median of its peers' medians; None: not recorded on theirs
    stands_out: bool  # differs from the peers by more than STANDS_OUT
    text: str


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


@dataclass(frozen=True)
class SlowMachine:
    machine: str
    ratio: float  # machine median / peers' median step time
    median_step_ms: float
    peers_median_ms: float
    pvalue: float
    adjusted_pvalue: float
    evidence: tuple[Evidence, ...]  # every figure, the ones that stand out first; absent ones say so
    explanation: str  # the figures that stand out, or NOT_EXPLAINED

    @property
    def slower_pct(self) -> float:
        return 100.0 * (self.ratio - 1.0)


@dataclass(frozen=True)
class WorkloadFleet:
    workload: str
    label: str
    machines: tuple[MachineStats, ...]
    slow_machines: tuple[SlowMachine, ...]
    noise_pct: float  # run-to-run noise pooled within machines (sd of log step time, x100)
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


def holm(pvalues: list[float]) -> list[float]:
    """Holm's step-down adjusted p-values (family-wise error control, any dependence)."""
    order = np.argsort(pvalues, kind="stable")
    n = len(pvalues)
    adjusted = [1.0] * n
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (n - rank) * pvalues[i]))
        adjusted[i] = running
    return adjusted


def pooled_noise(logs: dict[str, np.ndarray]) -> tuple[float, int]:
    """The sd of log step time within machines, pooled, and its degrees of freedom (runs - machines)."""
    df = sum(len(v) for v in logs.values()) - len(logs)
    if df <= 0:
        return 0.0, 0
    return math.sqrt(sum(float(((v - v.mean()) ** 2).sum()) for v in logs.values()) / df), df


def machine_tests(logs: dict[str, np.ndarray]) -> dict[str, tuple[float, float, float]]:
    """Machine -> (ratio of its median to its peers' median, one-sided p, Holm-adjusted p)."""
    pooled, df = pooled_noise(logs)
    medians = {machine: float(np.median(v)) for machine, v in logs.items()}
    tests = {}
    for machine, own in logs.items():
        peers = np.concatenate([v for k, v in logs.items() if k != machine])
        ratio = math.exp(medians[machine] - float(np.median([medians[k] for k in logs if k != machine])))
        if pooled > 0:
            t = (own.mean() - peers.mean()) / (pooled * math.sqrt(1 / len(own) + 1 / len(peers)))
            p = float(sps.t.sf(t, df))
        else:  # noise-free runs: any difference is beyond noise
            p = 0.0 if own.mean() > peers.mean() else 1.0
        tests[machine] = (ratio, p)
    adjusted = holm([p for _, p in tests.values()])
    return {machine: (ratio, p, adj) for (machine, (ratio, p)), adj in zip(tests.items(), adjusted, strict=True)}


def slow_machines(logs: dict[str, np.ndarray], max_pvalue: float = ALPHA, min_effect: float = MIN_EFFECT
                  ) -> list[tuple[str, float, float, float]]:
    """(machine, ratio to peers, p, Holm-adjusted p) of the machines slower than their peers beyond noise;
    `logs`: each machine's log step times."""
    return [(machine, ratio, p, adj) for machine, (ratio, p, adj) in machine_tests(logs).items()
            if adj <= max_pvalue and ratio >= 1.0 + min_effect]


def describe_test(settings: FleetSettings) -> str:
    return (f"one-sided t test of each machine's mean log step time against its peers' runs, noise pooled within "
            f"machines (runs - machines degrees of freedom), Holm's correction over a workload's machines at "
            f"family-wise {settings.max_pvalue:g}; slower by at least {100 * settings.min_effect:g}% "
            f"(median vs the peers' median); >= {settings.min_runs} runs per machine")


# ---------------------------------------------------------------------------------------------------------------
# The report
# ---------------------------------------------------------------------------------------------------------------


def fleet_report(records: list[HistoryRun], settings: FleetSettings | None = None,
                 experiment: str | None = None) -> FleetReport:
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


def judge_workload(key: str, label: str, per_machine: dict[str, list[HistoryRun]],
                   settings: FleetSettings | None = None, left_out: tuple[str, ...] = ()) -> WorkloadFleet:
    settings = settings or FleetSettings()
    rng = np.random.default_rng(settings.seed)
    step = {machine: np.array([r.step_time_ms for r in rs], dtype=float) for machine, rs in sorted(per_machine.items())}
    logs = {machine: np.log(v) for machine, v in step.items()}
    tests = machine_tests(logs)
    noise, df = pooled_noise(logs)
    machines, slow = [], []
    for machine, values in step.items():
        ratio, p, adj = tests[machine]
        boot = np.median(values[rng.integers(0, len(values), size=(settings.resamples, len(values)))], axis=1)
        low, high = np.quantile(boot, [0.025, 0.975])
        is_slow = adj <= settings.max_pvalue and ratio >= 1.0 + settings.min_effect
        machines.append(MachineStats(machine, len(values), float(np.median(values)), float(low), float(high),
                                     tuple(r.run_id for r in per_machine[machine]), tuple(float(v) for v in values),
                                     ratio, p, adj, is_slow))
        if is_slow:
            peers_median = float(np.median([np.median(v) for k, v in step.items() if k != machine]))
            found = evidence(per_machine, machine)
            standing = [e.text for e in found if e.stands_out]
            slow.append(SlowMachine(machine, ratio, float(np.median(values)), peers_median, p, adj, found,
                                    "; ".join(standing) if standing else NOT_EXPLAINED))
    return WorkloadFleet(key, label, tuple(machines), tuple(slow), 100.0 * noise, df, left_out)


# ---------------------------------------------------------------------------------------------------------------
# Evidence
# ---------------------------------------------------------------------------------------------------------------


def _median(values: list[float]) -> float | None:
    return float(np.median(values)) if values else None


def _machine_value(runs: list[HistoryRun], read) -> float | None:
    return _median([v for v in (read(r) for r in runs) if v is not None and math.isfinite(v)])


def _peers_value(per_machine: dict[str, list[HistoryRun]], machine: str, read) -> float | None:
    """The median of the peers' medians (only peers whose runs recorded the figure)."""
    return _median([v for other, rs in per_machine.items() if other != machine
                    for v in [_machine_value(rs, read)] if v is not None])


def _float(text: str | None) -> float | None:
    try:
        return float(text) if text not in (None, "", "none") else None
    except ValueError:
        return None


def _reason_share(reason: str):
    """A run's share of time with a clock-event reason: 0 when it measured reasons and did not see this one."""
    def read(r: HistoryRun) -> float | None:
        if names.GPU_CLOCKS_EVENT_POWER not in r.metrics:
            return None  # reasons not measured on this run
        return r.metrics.get(names.clocks_event_metric(reason), 0.0)
    return read


def _item(name: str, unit: str, machine_median: float | None, peers: float | None, kind: str,
          machine: str) -> Evidence:
    u = f" {unit}" if unit else ""
    if machine_median is None:
        text = f"{name}: not recorded on {machine}'s runs" + (f" (peers {fmt(peers)}{u})" if peers is not None else "")
        return Evidence(name, unit, None, peers, False, text)
    if peers is None:
        return Evidence(name, unit, machine_median, None, False,
                        f"{name}: {fmt(machine_median)}{u}; not recorded on its peers' runs")
    if kind == "share":
        out = abs(machine_median - peers) >= 100 * STANDS_OUT
    else:
        out = peers != 0 and abs(machine_median / peers - 1) >= STANDS_OUT
    return Evidence(name, unit, machine_median, peers, out,
                    f"{name}: {fmt(machine_median)}{u} vs peers {fmt(peers)}{u}")


def evidence(per_machine: dict[str, list[HistoryRun]], machine: str) -> tuple[Evidence, ...]:
    """The machine's recorded figures against its peers' medians, the ones that stand out first; a figure
    its runs did not record is said to be not recorded (never zero)."""
    own = per_machine[machine]
    everyone = [r for rs in per_machine.values() for r in rs]
    items: list[Evidence] = []
    if any(k.startswith(names.GPU) for r in everyone for k in r.metrics):
        for name, metric, unit, kind in GPU_EVIDENCE:
            def read(r: HistoryRun, metric=metric) -> float | None:
                return r.metrics.get(metric)
            items.append(_item(name, unit, _machine_value(own, read), _peers_value(per_machine, machine, read),
                               kind, machine))
        clock_share = _machine_value(own, lambda r: _share_of_max(r))
        peers_share = _peers_value(per_machine, machine, _share_of_max)
        items.append(_item("SM clock mean / max", "%", clock_share, peers_share, "share", machine))
        seen = {}
        for reason in CLOCKS_EVENT_REASONS:
            machine_share = _machine_value(own, _reason_share(reason))
            peers = _peers_value(per_machine, machine, _reason_share(reason))
            if (machine_share or 0) > 0 or (peers or 0) > 0:
                seen[reason] = _item(f"clocks event {reason}", "% of time", machine_share, peers, "share", machine)
        if not seen and _machine_value(own, _reason_share("sw_power_cap")) is not None:
            items.append(Evidence("clocks events", "", "none", "none", False,
                                  "clocks events: none seen on this machine or its peers"))
        items += seen.values()
    else:
        items.append(Evidence("NVML", "", None, None, False,
                              "NVML figures: not recorded (CPU runs, or runs without a GPU sampler)"))
    models = sorted({r.host["cpu_model"] for r in own if r.host.get("cpu_model")})
    peer_models = sorted({r.host["cpu_model"] for other, rs in per_machine.items() if other != machine for r in rs
                          if r.host.get("cpu_model")})
    if models or peer_models:
        mine_text, peers_text = ", ".join(models) or None, ", ".join(peer_models) or None
        items.append(Evidence("CPU model", "", mine_text, peers_text, bool(models and models != peer_models),
                              f"CPU model: {mine_text or 'not recorded'} vs peers {peers_text or 'not recorded'}"))
    for name, key, unit in CPU_EVIDENCE:
        def read_host(r: HistoryRun, key=key) -> float | None:
            return _float(r.host.get(key))
        items.append(_item(name, unit, _machine_value(own, read_host), _peers_value(per_machine, machine, read_host),
                           "level", machine))
    return tuple(sorted(items, key=lambda e: not e.stands_out))


def _share_of_max(r: HistoryRun) -> float | None:
    mean, top = r.metrics.get(names.GPU_SM_CLOCK_MEAN), r.metrics.get(names.GPU_SM_CLOCK_MAX)
    return 100.0 * mean / top if mean is not None and top else None


# ---------------------------------------------------------------------------------------------------------------
# Output: Markdown, JSON, picture; loading from MLflow
# ---------------------------------------------------------------------------------------------------------------


def no_fleet_line(report: FleetReport) -> str:
    where = f" of experiment '{report.experiment}'" if report.experiment else ""
    seen = f" ({report.single_machine_workloads} workload(s) on one machine only)" if report.single_machine_workloads \
        else ""
    return (f"No workload{where} ran on two or more machines with {report.settings.min_runs} runs each{seen}: "
            f"no fleet to compare.")


def fleet_markdown(report: FleetReport) -> str:
    if not report.workloads:
        return no_fleet_line(report)
    lines = []
    for w in report.workloads:
        rows = [(f"`{stats.machine}`", stats.runs, fmt(stats.median_step_ms, ".1f"),
                 f"{fmt(stats.ci_low, '.1f')}-{fmt(stats.ci_high, '.1f')}", f"x{stats.ratio:.2f}",
                 fmt(stats.adjusted_pvalue, ".2g"),
                 f"**slower** +{100 * (stats.ratio - 1):.0f}%" if stats.slow else "-") for stats in w.machines]
        lines += [f"### {w.label}", "",
                  markdown_table(["machine", "runs", "median step ms", "95% CI", "vs peers", "p (Holm)", "verdict"],
                                 rows),
                  "", f"Run-to-run noise {w.noise_pct:.1f}% (pooled within machines, {w.degrees_of_freedom} df)."
                  + (f" Left out (fewer than {report.settings.min_runs} runs): {', '.join(w.left_out)}."
                     if w.left_out else "")]
        for s in w.slow_machines:
            lines += ["", f"`{s.machine}` is slower than its peers (+{s.slower_pct:.0f}%, "
                          f"{fmt(s.median_step_ms, '.1f')} vs {fmt(s.peers_median_ms, '.1f')} ms, "
                          f"p {s.adjusted_pvalue:.2g} after Holm): {s.explanation}"]
            lines += [f"- {e.text}" + (" **<-**" if e.stands_out else "") for e in s.evidence]
        if not w.slow_machines:
            lines += ["", "No machine is slower than its peers beyond noise."]
        lines.append("")
    lines.append(f"Test: {report.test}.")
    return "\n".join(lines)


def to_json(report: FleetReport) -> dict:
    out = asdict(report)
    for w, workload in zip(out["workloads"], report.workloads, strict=True):
        for s, slow in zip(w["slow_machines"], workload.slow_machines, strict=True):
            s["slower_pct"] = slow.slower_pct
    if not report.workloads:
        out["note"] = no_fleet_line(report)
    return out


def plot_fleet(report: FleetReport, path: Path) -> Path:
    """Per-machine step-time distributions side by side (box and points), one panel per workload; slow
    machines in red."""
    n = max(len(report.workloads), 1)
    fig = new_figure(8, 3.2 * n)
    for i, w in enumerate(report.workloads):
        ax = fig.add_subplot(n, 1, i + 1)
        ax.boxplot([stats.step_ms for stats in w.machines], tick_labels=[stats.machine for stats in w.machines])
        for j, stats in enumerate(w.machines, start=1):
            offsets = np.linspace(-0.08, 0.08, len(stats.step_ms)) if len(stats.step_ms) > 1 else [0.0]
            ax.scatter(j + np.asarray(offsets), stats.step_ms, s=14, alpha=0.75, zorder=3,
                       color="tab:red" if stats.slow else "tab:blue")
        ax.set_title(w.label, fontsize=9)
        ax.set_ylabel("step time p50, ms")
    return save_figure(fig, path)


def load_fleet(mlflow, experiment: str, settings: FleetSettings | None = None) -> FleetReport:
    """The fleet view of an experiment's FINISHED runs; ConfigError when the experiment does not exist."""
    from yolo_mlops.tracking import connection, queries
    from yolo_mlops.trends import history

    experiment_id = queries.find_experiment_id(mlflow, experiment)
    if experiment_id is None:
        raise ConfigError(f"experiment {experiment!r} does not exist in {connection.tracking_uri()}")
    return fleet_report(history.load_history(mlflow, [experiment_id]), settings, experiment)


def fleet_section(mlflow, experiment: str, settings: FleetSettings | None = None) -> str:
    """The fleet view of one experiment as Markdown, for the nightly artifact's "Fleet" section."""
    try:
        report = load_fleet(mlflow, experiment, settings)
    except ConfigError as exc:
        return f"Experiment `{experiment}`: {exc}"
    return f"Experiment `{experiment}`:\n\n" + fleet_markdown(report)


# ---------------------------------------------------------------------------------------------------------------
# Error rates by simulation (docs/trends.md: `python -m yolo_mlops.trends.fleet`)
# ---------------------------------------------------------------------------------------------------------------


def simulate(machines: int, runs: int, slower: float = 1.0, noise: float = 0.08, seeds: int = 1000,
             settings: FleetSettings | None = None, seed: int = 0) -> float:
    """The share of simulated workloads the test flags. Each run's step time is log-normal around 100 ms with
    `noise` (sd of the log); with `slower` == 1 no machine differs and the share is the false-alarm rate (any
    machine flagged), else machine 0 is `slower` times slower and the share is the power (it, and only it)."""
    settings = settings or FleetSettings()
    rng = np.random.default_rng(seed)
    hits = 0
    for _ in range(seeds):
        logs = {f"m{i}": math.log(100.0 * (slower if i == 0 else 1.0)) + rng.normal(0.0, noise, runs)
                for i in range(machines)}
        found = [machine for machine, *_ in slow_machines(logs, settings.max_pvalue, settings.min_effect)]
        hits += bool(found) if slower == 1.0 else found == ["m0"]
    return hits / seeds


def _simulation_table() -> str:  # pragma: no cover - prints the figures of docs/trends.md
    rows = []
    for machines, runs in ((3, 3), (5, 4), (5, 6), (8, 3)):
        for max_pvalue in (0.01, 0.05):
            settings = FleetSettings(max_pvalue=max_pvalue)
            rows.append((f"{machines} x {runs}", max_pvalue,
                         f"{100 * simulate(machines, runs, seeds=4000, settings=settings, seed=1):.1f}%",
                         *(f"{100 * simulate(machines, runs, slower, seeds=1000, settings=settings, seed=2):.0f}%"
                           for slower in (1.1, 1.2, 1.3))))
    return markdown_table(["machines x runs", "max p", "flagged, no slow machine", "10% slower found",
                           "20% slower found", "30% slower found"], rows)


if __name__ == "__main__":  # pragma: no cover
    print(_simulation_table())
