"""The workload a bisection re-runs: the run it names (`--run`, or the newest run of `--series`), the history
of its series, and the RunSpec that run logged.

`spec_from_params` rebuilds a RunSpec from a run's `train.*` / `profiler.*` params when the run logged no
usable `run_spec.yaml`; it is the only place here that knows how RunSpec fields are written as params.
"""

from __future__ import annotations

from typing import Any

import yaml

from yolo_mlops import names
from yolo_mlops.bisect.models import BisectRequest
from yolo_mlops.config import RunSpec, build_run_spec
from yolo_mlops.errors import ConfigError
from yolo_mlops.tracking import connection, queries


def find_workload(mlflow, request: BisectRequest):
    """The workload's run and the history of its series (oldest first)."""
    from yolo_mlops import trends
    from yolo_mlops.trends.history import group_series, load_history, one_series, record_from_run

    if request.run_id is not None:
        run = queries.find_run(mlflow, request.run_id)
        if run is None:
            raise ConfigError(f"no MLflow run {request.run_id!r} in {connection.tracking_uri()}")
        record = record_from_run(run)
        if record is None:
            return run, []
        grouped = group_series(load_history(mlflow, [run.info.experiment_id]))
        return run, grouped.get(record.series, [])
    if request.series is None:  # checks.prepare lets no request through without a run or a series
        raise ConfigError("bisect needs one workload: --run RUN_ID or --series KEY")
    grouped = trends.load_experiment_series(mlflow, request.experiment)
    history = grouped[one_series(grouped, request.series, request.experiment)]
    run = queries.find_run(mlflow, history[-1].run_id)
    return run, history


def workload_spec(mlflow, run) -> RunSpec:
    """The RunSpec a run logged (`run_spec.yaml`), else rebuilt from its params (fields the params do not
    hold, such as train_args, take their defaults)."""
    text = queries.load_artifact_text(mlflow, run.info.run_id, names.RUN_SPEC_YAML)
    if text is not None:
        try:
            return build_run_spec(yaml.safe_load(text) or {})
        except (ConfigError, yaml.YAMLError):
            pass  # logged by a version of the code whose RunSpec differs: rebuild from the params
    return spec_from_params(run.data.params, run.data.tags, run.info.run_id)


def spec_from_params(params: dict[str, str], tags: dict[str, str], run_id: str) -> RunSpec:
    p, prof = names.TRAIN_PARAM, names.PROFILER_PARAM

    def num(key: str) -> int | None:
        value = params.get(key)
        return int(value) if value not in (None, "none", "None") else None

    try:
        fields: dict[str, Any] = {"model": params[p + "model"], "imgsz": num(p + "imgsz"), "batch": num(p + "batch"),
                  "workers": num(p + "workers"), "seed": num(p + "seed") or 0, "max_steps": num(p + "max_steps"),
                  "device": params.get(p + "device"), "variant": params.get(p + "variant", "baseline"),
                  "val": params.get(p + "val", "True") == "True",
                  "profiler": {f: num(prof + f) for f in ("skip_first", "wait", "warmup", "active", "repeat")}}
    except (KeyError, ValueError):
        raise ConfigError(f"run {run_id} has neither {names.RUN_SPEC_YAML} nor the params to rebuild its "
                          "workload") from None
    if tags.get(names.DATASET) != "synthetic" and params.get(p + "data"):
        fields["data"] = params[p + "data"]
    fields["profiler"] = {k: v for k, v in fields["profiler"].items() if v is not None}
    return build_run_spec({k: v for k, v in fields.items() if v is not None})
