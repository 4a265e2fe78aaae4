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
from dataclasses import dataclass, field, replace

from yolo_mlops.errors import ConfigError
from yolo_mlops.run.environment import series_identity_from_params, versions_from_params
from yolo_mlops.tracking import names, queries


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


def record_from_run(run) -> HistoryRun | None:
    """A typed record of one MLflow run; None when its series cannot be known (no tag, no params)."""
    params, tags = run.data.params, run.data.tags
    identity = series_identity_from_params(params, tags)
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
        run_id=run.info.run_id,
        experiment_id=run.info.experiment_id,
        start_time_ms=int(run.info.start_time),
        series=series,
        label=identity.label if identity else series,
        machine=identity.machine if identity else params.get(names.ENV_MACHINE),
        workload=identity.workload_key if identity else None,
        workload_label=identity.workload_label if identity else None,
        host=_host(params),
        metrics=dict(run.data.metrics),
        versions=versions_from_params(params),
        night=tags.get(names.BENCHMARK_NIGHT),
        profiled_steps=steps,
        step_time_ms=run.data.metrics.get(names.STEP_TIME_P50),
        verdicts={k: v for k, v in tags.items() if k == names.TREND or k.startswith(names.TREND_PREFIX)},
    )


def _host(params: dict[str, str]) -> dict[str, str]:
    env = names.ENV_PARAM
    host = {"cpu_count": params.get(env + "cpu_count", ""), "cpu_mhz": params.get(names.ENV_CPU_MHZ, "")}
    if params.get(env + "device_type") == "cpu":  # on CPU the device name is the CPU model
        host["cpu_model"] = params.get(env + "device_name", "")
    return {k: v for k, v in host.items() if v and v != "none"}


def load_history(mlflow, experiment_ids: list[str]) -> list[HistoryRun]:
    """Every FINISHED run of the experiments (all pages), oldest first (ties broken by run id)."""
    runs = queries.search_all_runs(mlflow, experiment_ids, filter_string="attributes.status = 'FINISHED'")
    records = [r for r in (record_from_run(run) for run in runs) if r is not None]
    return sorted(records, key=lambda r: (r.start_time_ms, r.run_id))


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
        raise ConfigError(f"no series {key!r} in experiment {experiment!r}: it has no runs "
                          f"(series: {', '.join(sorted(grouped))})")
    if len(matches) > 1:
        raise ConfigError(f"series {key!r} is ambiguous: {', '.join(matches)}")
    return matches[0]
