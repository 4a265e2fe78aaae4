"""compat.mlflow against a real SQLite store, and against the same store behind a client that rejects IS NULL
filters on params and tags as MLflow before 3.11.1 does: the history queries find the same runs either way."""

from __future__ import annotations

import sys
import time
import types
from typing import Any

import pytest

from yolo_mlops import names
from yolo_mlops.compat import mlflow as mlflow_compat
from yolo_mlops.compat import versions
from yolo_mlops.tracking import queries


class OldStore:
    """The store behind an MLflow before 3.11.1: a filter with IS [NOT] NULL on params or tags is refused with the
    error those releases raise; everything else is the real client's."""

    def __init__(self, client) -> None:
        self.client = client
        self.tracking_uri = client.tracking_uri + "#old"
        self.filters: list[str] = []

    def search_runs(self, experiment_ids, filter_string="", *args, **kwargs):
        from mlflow.exceptions import MlflowException

        self.filters.append(filter_string)
        if " IS NULL" in filter_string or " IS NOT NULL" in filter_string:
            raise MlflowException.invalid_parameter_value(f"Invalid clause(s) in filter string: {filter_string!r}")
        return self.client.search_runs(experiment_ids, filter_string, *args, **kwargs)

    def __getattr__(self, name: str):
        return getattr(self.client, name)


def _run(client, experiment_id: str, series: str | None, machine: str | None) -> str:
    run_id = client.create_run(experiment_id).info.run_id
    if series is not None:
        client.set_tag(run_id, names.SERIES, series)
    if machine is not None:
        client.log_param(run_id, names.ENV_MACHINE, machine)
    client.set_terminated(run_id, "FINISHED")
    return run_id


def test_split_null_clauses():
    rest, clauses = mlflow_compat.split_null_clauses(
        "attributes.status = 'FINISHED' AND tags.`a.b` IS NULL AND params.`c` IS NOT NULL"
    )
    assert rest == "attributes.status = 'FINISHED'"
    assert clauses == [
        mlflow_compat.NullClause("tags", "a.b", present=False),
        mlflow_compat.NullClause("params", "c", present=True),
    ]
    assert clauses[0].holds(params={}, tags={"x": "1"}) and not clauses[0].holds(params={}, tags={"a.b": "1"})
    assert clauses[1].holds(params={"c": "1"}, tags={}) and not clauses[1].holds(params={}, tags={})


def test_history_queries_find_the_same_runs_on_a_store_without_null_filters(mlflow_client):
    experiment_id = mlflow_client.create_experiment(f"null-filters-{time.time_ns()}")
    runs = {
        "tagged": _run(mlflow_client, experiment_id, "abc123", "m1"),
        "other": _run(mlflow_client, experiment_id, "def456", "m1"),
        "no_tag": _run(mlflow_client, experiment_id, None, "m1"),
        "no_machine": _run(mlflow_client, experiment_id, "abc123", None),
    }
    old: Any = OldStore(mlflow_client)
    found = queries.series_records(mlflow_client, [experiment_id], ["abc123"])
    found_old = queries.series_records(old, [experiment_id], ["abc123"])
    assert found is not None and found_old is not None
    assert [r.run_id for r in found_old] == [r.run_id for r in found]
    assert {r.run_id for r in found} == {runs["tagged"], runs["no_tag"], runs["no_machine"]}
    assert mlflow_compat.null_filters_refused(old) and not mlflow_compat.null_filters_refused(mlflow_client)
    assert sum("NULL" in f for f in old.filters) == 1  # refused once, then never asked again


def test_another_failure_is_not_taken_for_a_refusal():
    from mlflow.exceptions import MlflowException
    from mlflow.protos.databricks_pb2 import TEMPORARILY_UNAVAILABLE

    class Down:
        tracking_uri = "http://127.0.0.1:1#down"

    down = Down()
    assert not mlflow_compat.refuses_null_filters(down, MlflowException("API request failed", TEMPORARILY_UNAVAILABLE))
    assert not mlflow_compat.refuses_null_filters(down, MlflowException.invalid_parameter_value("bad run id"))
    assert not mlflow_compat.null_filters_refused(down)


def test_file_store_allowed_on_a_client_without_the_switch(monkeypatch):
    """Before 3.13.0 there is no MLFLOW_ALLOW_FILE_STORE and a folder store is used as asked."""
    monkeypatch.setitem(sys.modules, "mlflow.environment_variables", types.ModuleType("environment_variables"))
    assert mlflow_compat.file_store_allowed()


@pytest.mark.skipif(
    not versions.version_at_least("mlflow", "3.13"), reason="MLflow before 3.13 has no MLFLOW_ALLOW_FILE_STORE"
)
def test_file_store_refused_on_a_newer_client_unless_allowed(monkeypatch):
    monkeypatch.delenv("MLFLOW_ALLOW_FILE_STORE", raising=False)
    assert not mlflow_compat.file_store_allowed()
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    assert mlflow_compat.file_store_allowed()
