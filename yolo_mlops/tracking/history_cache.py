"""A local cache of FINISHED runs, so that reading a long history costs the runs that changed, not the
whole history. MLflow stays the source of truth: the cache is rebuilt from it, refreshed from it on every read,
and can be deleted or turned off (`YOLO_MLOPS_HISTORY_CACHE=0`) at any time.

A cache holds one *scope* of one experiment (a union of MLflow filters: every FINISHED run, or one series), under
`<data home>/cache/history/`. Each read refreshes it with searches none of which grows with the history: runs
that ended within `REFRESH_WINDOW_MS` of the newest end time seen, the experiment's deleted runs, and runs
restored since. What it cannot see and what to do then: docs/trends.md ("Reading the history").
"""

from __future__ import annotations

import hashlib
import os
import pickle
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from yolo_mlops.config import data_home
from yolo_mlops.tracking import connection, queries

if TYPE_CHECKING:
    from mlflow.tracking import MlflowClient

CACHE_VAR = "YOLO_MLOPS_HISTORY_CACHE"  # "0", "off", "false", "no": no cache
REFRESH_WINDOW_MS = 2 * 86_400_000
FORMAT = 2
EXPERIMENT_SCOPE = (queries.FINISHED,)


@dataclass
class _State:
    format: int
    tracking_uri: str
    experiment_id: str
    scope: tuple[str, ...]  # the filters whose union the cache holds
    runs: dict[str, queries.RunRecord] = field(default_factory=dict)
    deleted: set[str] = field(default_factory=set)  # deleted FINISHED runs at the last read

    def newest_end_ms(self) -> int | None:
        ends = [r.end_time_ms for r in self.runs.values() if r.end_time_ms is not None]
        return max(ends) if ends else None


def enabled() -> bool:
    return os.environ.get(CACHE_VAR, "1").strip().lower() not in ("0", "off", "false", "no")


def cache_dir() -> Path:
    return data_home() / "cache" / "history"


def cache_file(tracking_uri: str, experiment_id: str, scope: Sequence[str] = EXPERIMENT_SCOPE) -> Path:
    digest = hashlib.sha256("\n".join([tracking_uri, experiment_id, *scope]).encode()).hexdigest()[:24]
    return cache_dir() / f"{digest}.pickle"


def _uri(mlflow: MlflowClient) -> str:
    return str(getattr(mlflow, "tracking_uri", None) or connection.tracking_uri())


def finished_runs(mlflow: MlflowClient, experiment_ids: Sequence[str]) -> list[queries.RunRecord]:
    """Every FINISHED run of the experiments: from MLflow alone when the cache is off, else the cached runs
    refreshed from MLflow (module docstring)."""
    if not enabled():
        return queries.search_records(mlflow, experiment_ids, queries.FINISHED)
    found: list[queries.RunRecord] = []
    for experiment_id in experiment_ids:
        found += _refreshed_scopes(mlflow, str(experiment_id), [EXPERIMENT_SCOPE])
    return found


def series_runs(
    mlflow: MlflowClient, experiment_ids: Sequence[str], series: Sequence[str], prefix: bool = False
) -> list[queries.RunRecord] | None:
    """`queries.series_records` (the FINISHED runs that can belong to the series, oldest first, ties by run id;
    None when a key cannot be filtered on), each series' runs and the untagged ones kept in a cache of their
    own and refreshed from MLflow (module docstring)."""
    filters = [queries.series_filter(s, prefix) for s in series]
    if not enabled() or any(f is None for f in filters):
        return queries.series_records(mlflow, experiment_ids, series, prefix)
    scopes = [(str(f),) for f in dict.fromkeys(filters)] + [queries.UNTAGGED_FILTERS]
    found: dict[str, queries.RunRecord] = {}
    for experiment_id in experiment_ids:
        found.update((r.run_id, r) for r in _refreshed_scopes(mlflow, str(experiment_id), scopes))
    return sorted(found.values(), key=lambda r: (r.start_time_ms, r.run_id))


def _refreshed_scopes(
    mlflow: MlflowClient, experiment_id: str, scopes: Sequence[tuple[str, ...]]
) -> list[queries.RunRecord]:
    """The runs of each scope, each scope's cache refreshed; the experiment's deleted runs read once for all."""
    uri = _uri(mlflow)
    deleted = set(queries.deleted_run_ids(mlflow, [experiment_id]))
    found: list[queries.RunRecord] = []
    for scope in scopes:
        found += _refreshed(mlflow, uri, experiment_id, tuple(scope), deleted)
    return found


def _search(
    mlflow: MlflowClient, experiment_id: str, scope: tuple[str, ...], also: str = ""
) -> list[queries.RunRecord]:
    """The runs matching any filter of the scope (each AND `also`), each once."""
    found: dict[str, queries.RunRecord] = {}
    for where in scope:
        found.update((r.run_id, r) for r in queries.search_records(mlflow, [experiment_id], where + also))
    return list(found.values())


def _refreshed(
    mlflow: MlflowClient, uri: str, experiment_id: str, scope: tuple[str, ...], deleted: set[str]
) -> list[queries.RunRecord]:
    path = cache_file(uri, experiment_id, scope)
    state = _load(path, uri, experiment_id, scope)
    if state is None:
        state = _State(FORMAT, uri, experiment_id, scope)
        state.runs = {r.run_id: _interned(r) for r in _search(mlflow, experiment_id, scope)}
        changed = True
    else:
        newest = state.newest_end_ms()
        if newest is not None:
            since = newest - REFRESH_WINDOW_MS
            # read again below, unless deleted or no longer FINISHED
            stale = [i for i, r in state.runs.items() if r.end_time_ms is None or r.end_time_ms >= since]
            dropped = {run_id: state.runs.pop(run_id) for run_id in stale}
            fresh = _search(mlflow, experiment_id, scope, f" AND attributes.end_time >= {since}")
        else:
            dropped = dict(state.runs)
            state.runs.clear()
            fresh = _search(mlflow, experiment_id, scope)
        state.runs.update((r.run_id, _interned(r)) for r in fresh)
        restored = sorted(state.deleted - deleted)
        for where in scope if restored else ():
            records = queries.records_by_id(mlflow, [experiment_id], restored, where)
            state.runs.update((r.run_id, _interned(r)) for r in records)
        # most reads find again exactly the runs of the last days they dropped: the file is then rewritten
        # only when something changed, not a year of history at every read
        changed = bool(restored) or deleted != state.deleted or {r.run_id: r for r in fresh} != dropped
    for run_id in deleted:
        state.runs.pop(run_id, None)
    state.deleted = deleted
    if changed:
        _save(path, state)
    return list(state.runs.values())


def _load(path: Path, uri: str, experiment_id: str, scope: tuple[str, ...]) -> _State | None:
    try:
        with path.open("rb") as f:
            state = pickle.load(f)
    except (OSError, EOFError, pickle.UnpicklingError, AttributeError, ImportError, TypeError, ValueError):
        return None  # none yet, unreadable or from another version: rebuilt from MLflow
    if (
        not isinstance(state, _State)
        or state.format != FORMAT
        or state.tracking_uri != uri
        or state.experiment_id != experiment_id
        or state.scope != scope
    ):
        return None
    return state


def _save(path: Path, state: _State) -> None:
    """Written whole to a temporary file and renamed over the old one: a reader never sees half a file, and
    of two writers the last one wins with a state that was true when it read. Its runs are interned (_interned)
    as they enter it."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile("wb", dir=path.parent, prefix=path.stem, suffix=".tmp", delete=False) as f:
            pickle.dump(state, f, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(f.name, path)
    except OSError:
        return  # a read-only or full disk costs speed, never an answer


def _interned(record: queries.RunRecord) -> queries.RunRecord:
    """The record with its param and tag strings interned: the same value in every run of a series is then
    one string in memory and in the file."""
    return replace(
        record,
        params={sys.intern(k): _intern(v) for k, v in record.params.items()},
        tags={sys.intern(k): _intern(v) for k, v in record.tags.items()},
        metrics={sys.intern(k): v for k, v in record.metrics.items()},
    )


def _intern(value: str) -> str:
    return sys.intern(value) if type(value) is str else value
