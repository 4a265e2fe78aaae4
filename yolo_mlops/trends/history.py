"""A series' history as typed records: every FINISHED run of an experiment, grouped by series, oldest first.

The series of a run is its `yolo_mlops.series` tag: one workload on one machine. Runs logged before the
machine was part of the key (no `env.machine` param), and runs older still that carry only
`yolo_mlops.series_key` (whose hash included library versions), have their series rebuilt from the params
they logged (`series_identity_from_params`, the machine being their recorded host name), so old and new
runs of one workload on one machine read as one series.

A record also carries its workload key (the series without the machine): `group_series(...,
across_machines=True)` judges the runs of several machines as one history, only when a user asks for it.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from yolo_mlops import names
from yolo_mlops.errors import ConfigError
from yolo_mlops.run.environment import remembered_series_identity, versions_from_params
from yolo_mlops.tracking import connection, history_cache, queries

if TYPE_CHECKING:
    from yolo_mlops.tracking.connection import MlflowClient


@dataclass(frozen=True)
class HistoryRun:
    run_id: str
    experiment_id: str
    start_time_ms: int
    series: str  # series key: the workload on one machine
    label: str  # human-readable series name
    metrics: dict[str, float]
    versions: dict[str, str]  # commit, torch, cuda, cudnn, ultralytics, driver, python
    night: str | None  # benchmark night (flow run id) that produced the run, if any
    profiled_steps: int | None  # profiler active x repeat, from params
    step_time_ms: float | None  # perf/step_time_ms_p50
    machine: str | None = None  # env.machine (the host name for runs logged before it); None when not recorded
    workload: str | None = None  # the series key without the machine; None when the identity cannot be rebuilt
    workload_label: str | None = None
    host: dict[str, str] = field(default_factory=dict)  # cpu_model (CPU runs), cpu_count, cpu_mhz: fleet evidence
    verdicts: dict[str, str] = field(default_factory=dict)  # yolo_mlops.trend[.<metric>] tags: a night's verdicts


def record_from_stored(run: queries.RunRecord) -> HistoryRun | None:
    """A typed record of one stored run; None when its series cannot be known (no tag, no params)."""
    params, tags = run.params, run.tags
    identity = remembered_series_identity(params, tags)
    series: str | None
    if identity is not None and names.ENV_MACHINE not in params:
        series = identity.key  # logged before the machine joined the key: its machine's series
    else:
        series = tags.get(names.SERIES) or (identity.key if identity else None)
    if series is None:
        legacy = tags.get(names.SERIES_KEY)
        if legacy is None:
            return None
        series = "v1-" + legacy  # an old run without the params to rebuild its identity: its old series
    try:
        steps = int(params[names.PROFILER_PARAM + "active"]) * int(params[names.PROFILER_PARAM + "repeat"])
    except (KeyError, ValueError):
        steps = None
    return HistoryRun(
        run_id=run.run_id,
        experiment_id=run.experiment_id,
        start_time_ms=run.start_time_ms,
        series=series,
        label=identity.label if identity else series,
        machine=identity.machine if identity else params.get(names.ENV_MACHINE),
        workload=identity.workload_key if identity else None,
        workload_label=identity.workload_label if identity else None,
        host=_host(params),
        metrics=dict(run.metrics),
        versions=versions_from_params(params),
        night=tags.get(names.BENCHMARK_NIGHT),
        profiled_steps=steps,
        step_time_ms=run.metrics.get(names.STEP_TIME_P50),
        verdicts={k: v for k, v in tags.items() if k == names.TREND or k.startswith(names.TREND_PREFIX)},
    )


def _host(params: Mapping[str, str]) -> dict[str, str]:
    env = names.ENV_PARAM
    host = {"cpu_count": params.get(env + "cpu_count", ""), "cpu_mhz": params.get(names.ENV_CPU_MHZ, "")}
    if params.get(env + "device_type") == "cpu":  # on CPU the device name is the CPU model
        host["cpu_model"] = params.get(env + "device_name", "")
    return {k: v for k, v in host.items() if v and v != "none"}


def load_history(mlflow: MlflowClient, experiment_ids: list[str]) -> list[HistoryRun]:
    """Every FINISHED run of the experiments (all pages), oldest first (ties broken by run id); through the
    local history cache unless it is turned off (`tracking/history_cache.py`)."""
    return _sorted_records(history_cache.finished_runs(mlflow, experiment_ids))


def _sorted_records(runs: list[queries.RunRecord]) -> list[HistoryRun]:
    records = [r for r in (record_from_stored(run) for run in runs) if r is not None]
    return sorted(records, key=lambda r: (r.start_time_ms, r.run_id))


def load_series_history(
    mlflow: MlflowClient, experiment_ids: list[str], series: list[str], prefix: bool = False
) -> list[HistoryRun] | None:
    """The FINISHED runs of the given series only (with `prefix`, of every series whose key starts with one of
    them), oldest first, found by MLflow's filter on the series tag instead of reading the experiment, through
    the local history cache of each series unless it is turned off; None when a key cannot be filtered on (the
    caller reads the whole history instead)."""
    runs = history_cache.series_runs(mlflow, experiment_ids, series, prefix)
    if runs is None:
        return None
    wanted = tuple(series)
    return [r for r in _sorted_records(runs) if (r.series.startswith(wanted) if prefix else r.series in wanted)]


def series_of_runs(mlflow: MlflowClient, experiment_ids: list[str], run_ids: list[str]) -> list[str]:
    """The series the FINISHED runs among `run_ids` belong to, each once, sorted."""
    runs = queries.records_by_id(mlflow, experiment_ids, run_ids)
    return sorted({r.series for r in (record_from_stored(run) for run in runs) if r is not None})


def group_series(records: list[HistoryRun], across_machines: bool = False) -> dict[str, list[HistoryRun]]:
    """Series key -> its runs, oldest first (input order kept). `across_machines`: group by workload instead,
    so one history holds every machine's runs of a workload (records without a workload keep their series)."""
    grouped: dict[str, list[HistoryRun]] = defaultdict(list)
    for record in records:
        if across_machines and record.workload is not None:
            record = replace(record, series=record.workload, label=f"{record.workload_label} @ all machines")
        grouped[record.series].append(record)
    return dict(grouped)


def find_series(grouped: dict[str, list[HistoryRun]], key: str) -> list[str]:
    """Series whose key equals `key` or starts with it (a key may be abbreviated, like a git hash)."""
    if key in grouped:
        return [key]
    return sorted(k for k in grouped if k.startswith(key))


def one_series(grouped: dict[str, list[HistoryRun]], key: str, experiment: str) -> str:
    """The one series `key` names (in full or abbreviated); a ConfigError when none or several match."""
    matches = find_series(grouped, key)
    if not matches:
        raise ConfigError(
            f"no series {key!r} in experiment {experiment!r}: it has no runs (series: {', '.join(sorted(grouped))})"
        )
    if len(matches) > 1:
        raise ConfigError(f"series {key!r} is ambiguous: {', '.join(matches)}")
    return matches[0]


# ---- loading by experiment name: only the series asked for ---------------------------------------------------


def experiment_id(mlflow: MlflowClient, experiment: str) -> str:
    """The experiment's id; a ConfigError when it does not exist."""
    found = queries.find_experiment_id(mlflow, experiment)
    if found is None:
        raise ConfigError(f"experiment {experiment!r} does not exist in {connection.tracking_uri()}")
    return found


def load_experiment_series(
    mlflow: MlflowClient, experiment: str, across_machines: bool = False
) -> dict[str, list[HistoryRun]]:
    """Every series of the experiment, from all its FINISHED runs; a ConfigError when it has none.
    `across_machines`: one history per workload, every machine's runs in it (only when a user asks)."""
    records = load_history(mlflow, [experiment_id(mlflow, experiment)])
    if not records:
        raise ConfigError(f"experiment {experiment!r} has no finished runs with a series: no history yet")
    return group_series(records, across_machines)


def load_one_series(
    mlflow: MlflowClient, experiment: str, key: str, across_machines: bool = False
) -> tuple[str, list[HistoryRun]]:
    """The one series `key` names (in full or abbreviated) and its runs, reading only the runs that can be
    in it (the series tag filtered by MLflow). The whole history is read only to answer a key that names no
    series or is not a key (the error lists the experiment's series), and for `across_machines` (a workload's
    key is not a tag)."""
    if not across_machines:
        runs = load_series_history(mlflow, [experiment_id(mlflow, experiment)], [key], prefix=True)
        grouped = group_series(runs) if runs is not None else {}
        matches = find_series(grouped, key)
        if matches:
            found = one_series(grouped, key, experiment)
            return found, grouped[found]
    grouped = load_experiment_series(mlflow, experiment, across_machines)
    found = one_series(grouped, key, experiment)
    return found, grouped[found]


def load_series_of(mlflow: MlflowClient, experiment: str, run_ids: list[str]) -> dict[str, list[HistoryRun]]:
    """Series key -> its runs, for the series the FINISHED runs among `run_ids` belong to (a night's runs),
    each read by MLflow's filter on its series tag. When none of them is FINISHED: every series of the
    experiment (the callers judge only series with one of the runs)."""
    ids = [experiment_id(mlflow, experiment)]
    keys = series_of_runs(mlflow, ids, run_ids)
    runs = load_series_history(mlflow, ids, keys) if keys else None
    if not runs:
        return load_experiment_series(mlflow, experiment)
    return group_series(runs)
