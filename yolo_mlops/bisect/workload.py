"""The workload a bisection re-runs: the run it names (`--run`, or the newest run of `--series`), the history
of its series, and the RunSpec that run logged (`run_spec.yaml`, else rebuilt from its params by the params
codec, `config.params.LoggedParams.run_spec_fields`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import yaml

from yolo_mlops import names
from yolo_mlops.bisect.models import BisectRequest
from yolo_mlops.config import RunSpec, build_run_spec
from yolo_mlops.errors import ConfigError
from yolo_mlops.tracking import connection, queries

if TYPE_CHECKING:
    from yolo_mlops.tracking.connection import MlflowClient
    from yolo_mlops.trends.history import HistoryRun


def find_workload(mlflow: MlflowClient, request: BisectRequest) -> tuple[queries.RunRecord, list[HistoryRun]]:
    """The workload's run and the history of its series (oldest first)."""
    from yolo_mlops.trends.history import (
        group_series,
        load_experiment_series,
        load_history,
        one_series,
        record_from_stored,
    )

    if request.run_id is not None:
        run = queries.find_run(mlflow, request.run_id)
        if run is None:
            raise ConfigError(f"no MLflow run {request.run_id!r} in {connection.tracking_uri()}")
        if run.status != "FINISHED":
            # its workload never trained to the end once: every run of the bisection would fail the same way
            error = (run.tags.get(names.ERROR) or "").strip().split("\n")[0][:200]
            raise ConfigError(
                f"--run {request.run_id}: the run is {run.status}, not FINISHED"
                + (f" ({error})" if error else "")
                + "; give a run whose workload trained to the end"
            )
        record = record_from_stored(run)
        if record is None:
            return run, []
        grouped = group_series(load_history(mlflow, [run.experiment_id]))
        return run, grouped.get(record.series, [])
    if request.series is None:  # checks.prepare lets no request through without a run or a series
        raise ConfigError("bisect needs one workload: --run RUN_ID or --series KEY")
    grouped = load_experiment_series(mlflow, request.experiment)
    history = grouped[one_series(grouped, request.series, request.experiment)]
    newest = queries.find_run(mlflow, history[-1].run_id)
    if newest is None:
        raise ConfigError(f"run {history[-1].run_id} of series {request.series!r} was deleted while it was read")
    return newest, history


def workload_spec(mlflow: MlflowClient, run: queries.RunRecord) -> RunSpec:
    """The RunSpec a run logged (`run_spec.yaml`), else rebuilt from its params (fields the params do not
    hold, such as train_args, take their defaults)."""
    text = queries.load_artifact_text(mlflow, run.run_id, names.RUN_SPEC_YAML)
    if text is not None:
        try:
            return build_run_spec(yaml.safe_load(text) or {})
        except (ConfigError, yaml.YAMLError):
            pass  # logged by a version of the code whose RunSpec differs: rebuild from the params
    try:
        fields = run.logged.run_spec_fields(synthetic_data=run.tags.get(names.DATASET) == "synthetic")
    except (KeyError, ValueError):
        raise ConfigError(
            f"run {run.run_id} has neither {names.RUN_SPEC_YAML} nor the params to rebuild its workload"
        ) from None
    return build_run_spec(fields)
