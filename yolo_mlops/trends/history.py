"""A series' history as typed records: every FINISHED run of an experiment, grouped by series, oldest first.

The series of a run is its `yolo_mlops.series` tag. Runs logged before that tag existed carry only the
older `yolo_mlops.series_key` (whose hash included library versions); their series is rebuilt from the
params they logged (`series_identity_from_params`), so old and new runs of one workload read as one series.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from yolo_mlops.run.environment import series_identity_from_params, versions_from_params
from yolo_mlops.tracking import names, store


@dataclass(frozen=True)
class RunRecord:
    run_id: str
    experiment_id: str
    start_time_ms: int
    series: str  # series key
    label: str  # human-readable series name
    metrics: dict[str, float]
    versions: dict[str, str]  # commit, torch, cuda, cudnn, ultralytics, driver, python
    night: str | None  # benchmark night (flow run id) that produced the run, if any
    profiled_steps: int | None  # profiler active x repeat, from params
    step_time_ms: float | None  # perf/step_time_ms_p50


def record_from_run(run) -> RunRecord | None:
    """A typed record of one MLflow run; None when its series cannot be known (no tag, no params)."""
    params, tags = run.data.params, run.data.tags
    identity = series_identity_from_params(params, tags)
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
    return RunRecord(
        run_id=run.info.run_id,
        experiment_id=run.info.experiment_id,
        start_time_ms=int(run.info.start_time),
        series=series,
        label=identity.label if identity else series,
        metrics=dict(run.data.metrics),
        versions=versions_from_params(params),
        night=tags.get(names.BENCHMARK_NIGHT),
        profiled_steps=steps,
        step_time_ms=run.data.metrics.get(names.STEP_TIME_P50),
    )


def load_history(mlflow, experiment_ids: list[str]) -> list[RunRecord]:
    """Every FINISHED run of the experiments (all pages), oldest first (ties broken by run id)."""
    runs = store.search_all_runs(mlflow, experiment_ids, filter_string="attributes.status = 'FINISHED'")
    records = [r for r in (record_from_run(run) for run in runs) if r is not None]
    return sorted(records, key=lambda r: (r.start_time_ms, r.run_id))


def group_series(records: list[RunRecord]) -> dict[str, list[RunRecord]]:
    """Series key -> its runs, oldest first (input order kept)."""
    grouped: dict[str, list[RunRecord]] = defaultdict(list)
    for record in records:
        grouped[record.series].append(record)
    return dict(grouped)


def find_series(grouped: dict[str, list[RunRecord]], key: str) -> list[str]:
    """Series whose key equals `key` or starts with it (a key may be abbreviated, like a git hash)."""
    if key in grouped:
        return [key]
    return sorted(k for k in grouped if k.startswith(key))
