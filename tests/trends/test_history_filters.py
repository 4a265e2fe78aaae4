"""One series' history is read through MLflow's filter on the series tag, never the whole experiment.

The store is the session's real SQLite MLflow store. The experiment holds 3 workloads on 2 machines (6
series, the params the pipeline logs), old runs of one series that read into it only when their identity is
rebuilt from their params (no `env.machine`, the machine-less tag), an old run with only the legacy
`series_key`, and a FAILED run. A counting client records every search's filter and how many runs MLflow
sent back, so a command that went back to reading the whole experiment for one series fails here. The local
history cache is off in this module, so every read is one MLflow answers (tests/tracking/test_history_cache.py
holds the cache to the same filters)."""

from __future__ import annotations

import dataclasses
import io
import json
import time
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest
from machines import benchmark_run, cpu_node
from mlflow.entities import Metric
from mlflow.tracking import MlflowClient

from yolo_mlops import names
from yolo_mlops.config import build_run_spec
from yolo_mlops.tracking import queries, writes
from yolo_mlops.trends import history

DATA_YAML = Path("/data/yolo-mlops/datasets/synthetic-0123456789/data.yaml")
RUNS_PER_SERIES = 4
# the untagged filters send back the 3 old runs without env.machine, and twice the run with only the old key
UNTAGGED_SENT = 5
ENV = cpu_node()


class Counting(MlflowClient):
    """An MlflowClient of the same store that records each search's filter and the runs MLflow sent back."""

    def __init__(self, client: MlflowClient) -> None:
        super().__init__(tracking_uri=client.tracking_uri)
        self.filters: list[str] = []
        self.fetched = 0

    def search_runs(self, *args, **kwargs):
        page = super().search_runs(*args, **kwargs)
        self.filters.append(kwargs.get("filter_string", ""))
        self.fetched += len(page)
        return page


@dataclasses.dataclass
class Store:
    experiment: str
    experiment_id: str
    keys: dict[tuple[int, str], str]  # (batch, machine) -> series key
    ids: dict[str, list[str]]  # series key -> its runs' ids, oldest first
    total: int  # runs in the experiment, every status


def _logged(batch: int, machine: str) -> tuple[dict[str, str], dict[str, str], str]:
    spec = build_run_spec(
        {
            "batch": batch,
            "device": "cpu",
            "experiment": "history-filters",
            "profiler": {"skip_first": 10, "wait": 5, "warmup": 2, "active": 5},
        }
    )
    env = dataclasses.replace(ENV, hostname=machine, machine=machine)
    params, tags = benchmark_run(spec, env, DATA_YAML, "cpu", Path("/tmp/unused"))
    return params, tags, tags[names.SERIES]


def _create(mlflow, experiment_id: str, params, tags, step_ms: float, status: str = "FINISHED") -> str:
    run = mlflow.create_run(experiment_id, tags=tags)
    writes.log_values(mlflow, run.info.run_id, params=params)
    mlflow.log_batch(
        run.info.run_id,
        metrics=[
            Metric(names.STEP_TIME_P50, step_ms, int(time.time() * 1000), 0),
            Metric(names.IMAGES_PER_S, 1e4 / step_ms, int(time.time() * 1000), 0),
        ],
    )
    mlflow.set_terminated(run.info.run_id, status)
    time.sleep(0.005)  # distinct start times order the history
    return run.info.run_id


@pytest.fixture(autouse=True)
def no_history_cache(monkeypatch):
    from yolo_mlops.tracking import history_cache

    monkeypatch.setenv(history_cache.CACHE_VAR, "0")


@pytest.fixture(scope="module")
def store(mlflow_client) -> Store:
    name = f"history-filters-{time.time_ns()}"
    experiment_id = mlflow_client.create_experiment(name)
    keys: dict[tuple[int, str], str] = {}
    ids: dict[str, list[str]] = {}
    total = 0
    old = (8, "node-1")  # its first runs were logged before the machine joined the key
    params, tags, key = _logged(*old)
    keys[old] = key
    ids[key] = []
    for i in range(3):
        legacy_params = {k: v for k, v in params.items() if k != names.ENV_MACHINE}
        workload = series_identity_from(legacy_params, tags)
        ids[key].append(
            _create(mlflow_client, experiment_id, legacy_params, {**tags, names.SERIES: workload}, 100.0 + i)
        )
        total += 1
    _create(mlflow_client, experiment_id, {}, {names.SERIES_KEY: "0123456789abcdef"}, 90.0)  # only the old key
    total += 1
    for night in range(RUNS_PER_SERIES):
        for batch in (8, 16, 32):
            for machine in ("node-1", "node-2"):
                params, tags, key = _logged(batch, machine)
                keys[(batch, machine)] = key
                ids.setdefault(key, []).append(
                    _create(mlflow_client, experiment_id, params, tags, 100.0 + batch + night)
                )
                total += 1
    params, tags, key = _logged(16, "node-2")
    _create(mlflow_client, experiment_id, params, tags, 500.0, status="FAILED")  # never part of a history
    total += 1
    return Store(name, experiment_id, keys, ids, total)


def series_identity_from(params: dict[str, str], tags: dict[str, str]) -> str:
    """The machine-less tag an old run carried: its workload key."""
    from yolo_mlops.run.environment import series_identity_from_params

    identity = series_identity_from_params({**params, names.ENV_MACHINE: "node-1"}, tags)
    assert identity is not None
    return identity.workload_key


def _full(mlflow_client, store: Store) -> dict[str, list[history.HistoryRun]]:
    return history.group_series(history.load_history(mlflow_client, [store.experiment_id]))


def _filtered(counting: Counting) -> None:
    """Every search was restricted by a series tag, a run id or one of the untagged runs' filters."""
    assert counting.filters
    for f in counting.filters:
        assert f in queries.UNTAGGED_FILTERS or f"tags.`{names.SERIES}` " in f or "attributes.run_id IN" in f, f
        assert f.startswith(queries.FINISHED), f


@pytest.mark.parametrize("abbreviated", [False, True])
def test_one_series_reads_only_its_runs(mlflow_client, store, abbreviated):
    key = store.keys[(8, "node-1")]
    counting = Counting(mlflow_client)
    found, runs = history.load_one_series(counting, store.experiment, key[:7] if abbreviated else key)
    assert found == key
    assert runs == _full(mlflow_client, store)[key]  # the same typed records as from the whole history
    assert [r.run_id for r in runs] == store.ids[key]  # its old runs, rebuilt from their params, included
    _filtered(counting)
    # its 4 tagged runs plus the runs the tag alone does not place
    assert counting.fetched == RUNS_PER_SERIES + UNTAGGED_SENT < store.total


def test_a_series_of_new_runs_only_reads_them_and_the_untagged(mlflow_client, store):
    key = store.keys[(32, "node-2")]
    counting = Counting(mlflow_client)
    found, runs = history.load_one_series(counting, store.experiment, key)
    assert (found, [r.run_id for r in runs]) == (key, store.ids[key])
    assert counting.fetched == RUNS_PER_SERIES + UNTAGGED_SENT


def test_an_unknown_series_still_lists_the_experiments_series(mlflow_client, store):
    from yolo_mlops.errors import ConfigError

    with pytest.raises(ConfigError, match="no series 'ffffffff' in experiment") as raised:
        history.load_one_series(mlflow_client, store.experiment, "ffffffff")
    assert all(k in str(raised.value) for k in store.ids)


def test_a_nights_series_are_read_by_their_tags(mlflow_client, store):
    tonight = [store.ids[store.keys[(16, "node-1")]][-1], store.ids[store.keys[(8, "node-1")]][-1]]
    counting = Counting(mlflow_client)
    grouped = history.load_series_of(counting, store.experiment, tonight)
    full = _full(mlflow_client, store)
    assert grouped == {k: full[k] for k in (store.keys[(16, "node-1")], store.keys[(8, "node-1")])}
    _filtered(counting)
    assert counting.fetched == 2 + 2 * RUNS_PER_SERIES + UNTAGGED_SENT < store.total


def test_records_come_back_as_the_projects_types(mlflow_client, store):
    key = store.keys[(16, "node-2")]
    run = mlflow_client.get_run(store.ids[key][0])
    record = queries.run_record(run)
    assert isinstance(record, queries.RunRecord) and record.params["train.batch"] == "16"
    assert record.metrics[names.STEP_TIME_P50] == run.data.metrics[names.STEP_TIME_P50]
    assert queries.find_run(mlflow_client, run.info.run_id) == record
    assert record.artifact_uri == run.info.artifact_uri and record.logged.integer("train.batch") == 16


def _cli(argv) -> tuple[int, str, str]:
    from yolo_mlops.cli import main

    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        rc = main(argv)
    return rc, out.getvalue(), err.getvalue()


def test_the_trends_command_reads_one_series_by_its_tag(mlflow_client, store, monkeypatch):
    from yolo_mlops.tracking import connection

    key = store.keys[(16, "node-1")]
    counting = Counting(mlflow_client)
    monkeypatch.setattr(connection, "client", lambda: counting)
    rc, out, err = _cli(["trends", "--experiment", store.experiment, "--series", key[:8], "--format", "json"])
    assert rc == 0, err
    assert json.loads(out)["series"] == key
    _filtered(counting)
    assert counting.fetched == RUNS_PER_SERIES + UNTAGGED_SENT


def test_the_nightly_judges_tonights_series_from_their_tags(mlflow_client, store):
    from yolo_mlops.trends import nightly
    from yolo_mlops.trends.trend import DetectionSettings

    key = store.keys[(32, "node-1")]
    counting = Counting(mlflow_client)
    (judged,) = nightly.judge_night(counting, store.experiment, [store.ids[key][-1]], DetectionSettings())
    assert judged.series == key and judged.history_runs == RUNS_PER_SERIES
    _filtered(counting)
    assert counting.fetched == 1 + RUNS_PER_SERIES + UNTAGGED_SENT
