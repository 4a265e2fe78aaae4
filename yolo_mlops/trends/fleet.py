"""The fleet view: the same workload on several machines, each machine's step time, and the slow machine.

Split by concern:

- `fleet_stats`: the settings, the test (pooled t per machine against its peers, Holm over a workload's
  machines, a practical floor) and the report's dataclasses (`fleet_report`).
- `fleet_evidence`: the recorded figures beside a slow machine (NVML, host), against its peers' medians.
- `fleet_moved`: a slow machine's phases and operators against its peers' (the trends attribution, peers'
  runs as "before"), read from the newest runs' key_averages tables (`explain`).
- `fleet_render`: Markdown, JSON and the picture.
- this module: loading from MLflow (`load_fleet`, `fleet_section`), and every name the callers import
  (`from yolo_mlops.trends import fleet; fleet.fleet_report(...)`).

The simulation of the test's error rates, which feeds docs/trends.md, is benchmarks/bench_fleet.py.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from yolo_mlops.errors import ConfigError
from yolo_mlops.trends.fleet_evidence import (
    CLOCKS_EVENT_REASONS,
    CPU_EVIDENCE,
    GPU_EVIDENCE,
    NOT_EXPLAINED,
    STANDS_OUT,
    Evidence,
    evidence,
)
from yolo_mlops.trends.fleet_moved import RUNS_PER_MACHINE, explain, moved_entries
from yolo_mlops.trends.fleet_render import fleet_markdown, no_fleet_line, plot_fleet, to_json
from yolo_mlops.trends.fleet_stats import (
    ALPHA,
    MIN_EFFECT,
    MIN_RUNS,
    RESAMPLES,
    SEED,
    FleetReport,
    FleetSettings,
    MachineStats,
    SlowMachine,
    WorkloadFleet,
    describe_test,
    fleet_report,
    judge_workload,
    machine_tests,
    slow_machines,
)

if TYPE_CHECKING:
    from yolo_mlops.tracking.connection import MlflowClient

__all__ = [
    "ALPHA",
    "CLOCKS_EVENT_REASONS",
    "CPU_EVIDENCE",
    "GPU_EVIDENCE",
    "MIN_EFFECT",
    "MIN_RUNS",
    "NOT_EXPLAINED",
    "RESAMPLES",
    "RUNS_PER_MACHINE",
    "SEED",
    "STANDS_OUT",
    "Evidence",
    "FleetReport",
    "FleetSettings",
    "MachineStats",
    "SlowMachine",
    "WorkloadFleet",
    "describe_test",
    "evidence",
    "explain",
    "fleet_markdown",
    "fleet_report",
    "fleet_section",
    "judge_workload",
    "load_fleet",
    "machine_tests",
    "moved_entries",
    "no_fleet_line",
    "plot_fleet",
    "slow_machines",
    "to_json",
]


def load_fleet(mlflow: MlflowClient, experiment: str, settings: FleetSettings | None = None) -> FleetReport:
    """The fleet view of an experiment's FINISHED runs; ConfigError when the experiment does not exist."""
    from yolo_mlops.tracking import connection, queries
    from yolo_mlops.trends import history

    experiment_id = queries.find_experiment_id(mlflow, experiment)
    if experiment_id is None:
        raise ConfigError(f"experiment {experiment!r} does not exist in {connection.tracking_uri()}")
    return fleet_report(history.load_history(mlflow, [experiment_id]), settings, experiment)


def fleet_section(mlflow: MlflowClient, experiment: str, settings: FleetSettings | None = None) -> str:
    """The fleet view of an experiment as Markdown (the nightly artifact's "Fleet" section): each workload per
    machine, the slow machine named with its evidence and the phases and operators that differ from its
    peers' (`explain`: the newest runs' key_averages tables)."""
    try:
        report = load_fleet(mlflow, experiment, settings)
    except ConfigError as exc:
        return f"Experiment `{experiment}`: {exc}"
    return f"Experiment `{experiment}`:\n\n" + fleet_markdown(explain(mlflow, report))
