"""The local history cache against the session's real SQLite MLflow store: what a read returns with the cache
always equals what MLflow holds (runs added, finished later, deleted, restored), and a warm read asks MLflow
only for the runs of the refresh window, not the whole experiment. A series' cache holds and asks for that series
(and the runs without a series tag) only."""

from __future__ import annotations

import pickle
import time

import pytest
from mlflow.entities import Metric, Param

from yolo_mlops import names
from yolo_mlops.tracking import history_cache, queries

DAY_MS = 86_400_000


class Counting:
    """An MlflowClient that records each search's filter and the runs MLflow sent back."""

    def __init__(self, client) -> None:
        self.client = client
        self.filters: list[str] = []
        self.fetched = 0

    def search_runs(self, *args, **kwargs):
        page = self.client.search_runs(*args, **kwargs)
        self.filters.append(kwargs.get("filter_string", ""))
        self.fetched += len(page)
        return page

    def __getattr__(self, name: str):
        return getattr(self.client, name)


@pytest.fixture
def cache_home(tmp_path, monkeypatch):
    monkeypatch.setenv("YOLO_MLOPS_HOME", str(tmp_path / "home"))
    monkeypatch.delenv(history_cache.CACHE_VAR, raising=False)
    return tmp_path / "home"


def _run(
    mlflow, experiment_id: str, step_ms: float, end_ms: int | None, status: str = "FINISHED", series: str = "cached"
) -> str:
    """A run of `series` on machine node-1 (series "" : a run without the series tag)."""
    tags = {names.SERIES: series} if series else {}
    run = mlflow.create_run(experiment_id, start_time=(end_ms or int(time.time() * 1000)) - 1000, tags=tags)
    mlflow.log_batch(
        run.info.run_id,
        metrics=[Metric(names.STEP_TIME_P50, step_ms, 0, 0)],
        params=[Param(names.ENV_MACHINE, "node-1")],
    )
    if end_ms is not None:
        mlflow.set_terminated(run.info.run_id, status, end_time=end_ms)
    return run.info.run_id


def _truth(mlflow, experiment_id: str) -> dict[str, queries.RunRecord]:
    return {r.run_id: r for r in queries.search_records(mlflow, [experiment_id], queries.FINISHED)}


def _cached(mlflow, experiment_id: str) -> dict[str, queries.RunRecord]:
    return {r.run_id: r for r in history_cache.finished_runs(mlflow, [experiment_id])}


def test_the_cache_follows_every_change_mlflow_sees(mlflow_client, cache_home):
    experiment_id = mlflow_client.create_experiment(f"history-cache-{time.time_ns()}")
    now = int(time.time() * 1000)
    old = [_run(mlflow_client, experiment_id, 100.0 + i, now - (30 - i) * DAY_MS) for i in range(10)]
    assert _cached(mlflow_client, experiment_id) == _truth(mlflow_client, experiment_id)
    assert history_cache.cache_file(mlflow_client.tracking_uri, experiment_id).is_file()

    running = _run(mlflow_client, experiment_id, 120.0, None)  # started, not yet finished: not history
    added = _run(mlflow_client, experiment_id, 130.0, now)
    counting = Counting(mlflow_client)
    cached = _cached(counting, experiment_id)
    assert cached == _truth(mlflow_client, experiment_id) and added in cached and running not in cached
    # the warm read asked only for the runs that ended in the window (2 days before the newest end seen: the
    # 3 old runs that ended 23, 22 and 21 days ago, and the new one), and for the deleted ones (none)
    assert counting.fetched == 4 and all("end_time >=" in f or f == queries.FINISHED for f in counting.filters)

    mlflow_client.log_batch(running, metrics=[Metric(names.STEP_TIME_P50, 121.0, 0, 0)])
    mlflow_client.set_terminated(running, "FINISHED", end_time=now + 1000)  # finished later
    mlflow_client.delete_run(old[3])  # an old run deleted
    mlflow_client.set_tag(added, names.TREND, "regression")  # a verdict tag on a run of the window
    cached = _cached(mlflow_client, experiment_id)
    assert cached == _truth(mlflow_client, experiment_id)
    assert running in cached and old[3] not in cached and cached[added].tags[names.TREND] == "regression"

    mlflow_client.restore_run(old[3])  # restored: read back by id
    assert _cached(mlflow_client, experiment_id) == _truth(mlflow_client, experiment_id)
    assert old[3] in _cached(mlflow_client, experiment_id)

    mlflow_client.set_terminated(added, "FAILED", end_time=now + 2000)  # no longer FINISHED: dropped
    assert _cached(mlflow_client, experiment_id) == _truth(mlflow_client, experiment_id)


def test_a_read_that_finds_nothing_new_leaves_the_file_as_it_was(mlflow_client, cache_home):
    # a year of history is a 20 MB file: rewritten only when a read found a change, never after a read that
    # found again exactly the runs of the window it had dropped
    experiment_id = mlflow_client.create_experiment(f"history-cache-unchanged-{time.time_ns()}")
    now = int(time.time() * 1000)
    recent = _run(mlflow_client, experiment_id, 100.0, now)
    _cached(mlflow_client, experiment_id)
    path = history_cache.cache_file(mlflow_client.tracking_uri, experiment_id)
    written = path.stat()
    assert _cached(mlflow_client, experiment_id) == _truth(mlflow_client, experiment_id)
    assert (path.stat().st_ino, path.stat().st_mtime_ns) == (written.st_ino, written.st_mtime_ns)
    mlflow_client.set_tag(recent, names.TREND, "regression")  # a change in the window: written again
    assert _cached(mlflow_client, experiment_id)[recent].tags[names.TREND] == "regression"
    assert path.stat().st_ino != written.st_ino
    with path.open("rb") as f:
        assert pickle.load(f).runs[recent].tags[names.TREND] == "regression"


def test_a_changed_old_run_is_seen_with_the_cache_off_or_deleted(mlflow_client, cache_home, monkeypatch):
    # the documented limit: a tag written on a run long after it ended is not seen by a warm cache
    experiment_id = mlflow_client.create_experiment(f"history-cache-off-{time.time_ns()}")
    now = int(time.time() * 1000)
    old = _run(mlflow_client, experiment_id, 100.0, now - 30 * DAY_MS)
    _run(mlflow_client, experiment_id, 101.0, now)
    _cached(mlflow_client, experiment_id)
    mlflow_client.set_tag(old, names.TREND, "suspected")
    assert names.TREND not in _cached(mlflow_client, experiment_id)[old].tags
    monkeypatch.setenv(history_cache.CACHE_VAR, "0")
    assert _cached(mlflow_client, experiment_id) == _truth(mlflow_client, experiment_id)
    monkeypatch.delenv(history_cache.CACHE_VAR)
    history_cache.cache_file(mlflow_client.tracking_uri, experiment_id).unlink()
    assert _cached(mlflow_client, experiment_id)[old].tags[names.TREND] == "suspected"


def test_a_damaged_cache_file_is_rebuilt_from_mlflow(mlflow_client, cache_home):
    experiment_id = mlflow_client.create_experiment(f"history-cache-bad-{time.time_ns()}")
    _run(mlflow_client, experiment_id, 100.0, int(time.time() * 1000))
    path = history_cache.cache_file(mlflow_client.tracking_uri, experiment_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"not a pickle")
    assert _cached(mlflow_client, experiment_id) == _truth(mlflow_client, experiment_id)


def _series_cached(mlflow, experiment_id: str, series: list[str]) -> list[queries.RunRecord] | None:
    return history_cache.series_runs(mlflow, [experiment_id], series)


def _series_truth(mlflow, experiment_id: str, series: list[str]) -> list[queries.RunRecord]:
    found = queries.series_records(mlflow, [experiment_id], series)
    assert found is not None
    return found


def test_a_series_cache_follows_its_series_and_asks_for_nothing_else(mlflow_client, cache_home):
    experiment_id = mlflow_client.create_experiment(f"series-cache-{time.time_ns()}")
    now = int(time.time() * 1000)
    mine = [_run(mlflow_client, experiment_id, 100.0 + i, now - (30 - i) * DAY_MS, series="mine") for i in range(8)]
    other = [_run(mlflow_client, experiment_id, 200.0 + i, now - (30 - i) * DAY_MS, series="other") for i in range(8)]
    untagged = _run(mlflow_client, experiment_id, 150.0, now - 20 * DAY_MS, series="")
    assert history_cache.series_runs(mlflow_client, [experiment_id], ["mine"]) == _series_truth(
        mlflow_client, experiment_id, ["mine"]
    )
    found = {r.run_id for r in history_cache.series_runs(mlflow_client, [experiment_id], ["mine"]) or []}
    assert found == {*mine, untagged} and not found & set(other)  # the caller keeps the untagged ones that match

    added = _run(mlflow_client, experiment_id, 130.0, now, series="mine")
    _run(mlflow_client, experiment_id, 230.0, now, series="other")
    mlflow_client.set_tag(mine[-1], names.TREND, "regression")  # a verdict tag on a run of the window
    mlflow_client.delete_run(mine[2])
    counting = Counting(mlflow_client)
    cached = _series_cached(counting, experiment_id, ["mine"])
    assert cached == _series_truth(mlflow_client, experiment_id, ["mine"])
    assert added in {r.run_id for r in cached or []} and mine[2] not in {r.run_id for r in cached or []}
    # the warm read: the series' runs that ended in its window (the new one, and the 3 that ended 23-25 days ago:
    # within 2 days of the newest end it had seen), the untagged run (in its own scope's window), the deleted id
    assert counting.fetched == 4 + 1 + 1
    assert all(
        f"tags.`{names.SERIES}` = 'mine'" in f
        or f in queries.UNTAGGED_FILTERS
        or "end_time >=" in f
        or f == queries.FINISHED
        for f in counting.filters
    ), counting.filters
    assert not any("'other'" in f for f in counting.filters)

    mlflow_client.restore_run(mine[2])
    cached = history_cache.series_runs(mlflow_client, [experiment_id], ["mine"])
    assert cached == _series_truth(mlflow_client, experiment_id, ["mine"]) and mine[2] in {
        r.run_id for r in cached or []
    }
    # two series at once: the union, each from its own cache
    both = history_cache.series_runs(mlflow_client, [experiment_id], ["mine", "other"])
    assert both == _series_truth(mlflow_client, experiment_id, ["mine", "other"])


def test_a_series_cache_holds_only_its_series(mlflow_client, cache_home):
    experiment_id = mlflow_client.create_experiment(f"series-cache-size-{time.time_ns()}")
    now = int(time.time() * 1000)
    for i in range(6):
        _run(mlflow_client, experiment_id, 100.0 + i, now - i * DAY_MS, series="small")
    for i in range(30):
        _run(mlflow_client, experiment_id, 200.0 + i, now - i * DAY_MS, series="large")
    history_cache.series_runs(mlflow_client, [experiment_id], ["small"])
    files = list(history_cache.cache_dir().glob("*.pickle"))
    held = [len(pickle.loads(f.read_bytes()).runs) for f in files]
    assert sorted(held) == [0, 6]  # the untagged runs' cache (none) and the series' own: never the 30 others
