"""What the project reads back from the tracking store: run lookups, children of a sweep, paginated searches
over long histories (trends, compare), artifacts and tables, and links into the MLflow UI."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

import pandas as pd
from mlflow.entities import Run
from mlflow.tracking import MlflowClient

from yolo_mlops import names
from yolo_mlops.compat import mlflow as mlflow_compat
from yolo_mlops.config.params import LoggedParams
from yolo_mlops.tracking.connection import tracking_uri


@dataclass(frozen=True)
class RunRecord:
    """A run as the project reads it back, out of MLflow's types: params and tags as logged (strings; `logged`
    decodes the params), each metric's latest value, the start and end time in epoch ms (end None while it runs)
    and where its artifacts are stored. Every query that returns runs returns these; no `mlflow.entities`
    object leaves `tracking/`."""

    run_id: str
    experiment_id: str
    status: str
    start_time_ms: int
    end_time_ms: int | None
    params: Mapping[str, str]
    metrics: Mapping[str, float]
    tags: Mapping[str, str]
    artifact_uri: str = ""

    @property
    def logged(self) -> LoggedParams:
        """The params read back by field (the params codec of `config.params`)."""
        return LoggedParams(self.params)


def run_record(run: Run) -> RunRecord:
    """The record of one MLflow `Run`."""
    info, data = run.info, run.data
    end = None if info.end_time is None else int(info.end_time)
    return RunRecord(
        run_id=info.run_id,
        experiment_id=info.experiment_id,
        status=info.status,
        start_time_ms=int(info.start_time),
        end_time_ms=end,
        params=dict(data.params),
        metrics=dict(data.metrics),
        tags=dict(data.tags),
        artifact_uri=info.artifact_uri or "",
    )


def experiment_of(mlflow: MlflowClient, run_id: str) -> str:
    return mlflow.get_run(run_id).info.experiment_id


def child_runs(mlflow: MlflowClient, parent_run_id: str) -> list[RunRecord]:
    """All child runs of a parent (a sweep), found by the parent tag: works for any store, from any process."""
    found = mlflow.search_runs(
        [experiment_of(mlflow, parent_run_id)],
        filter_string=f"tags.`{names.PARENT_RUN_TAG}` = '{parent_run_id}'",
        max_results=5000,
    )
    return [run_record(r) for r in found]


def find_experiment_id(mlflow: MlflowClient, name: str) -> str | None:
    """The id of an existing experiment (never creates one)."""
    found = mlflow.get_experiment_by_name(name)
    return None if found is None else found.experiment_id


def find_run(mlflow: MlflowClient, run_id: str) -> RunRecord | None:
    """The run's record, or None when no run has this id (any other failure, e.g. the server, is raised)."""
    from mlflow.exceptions import MlflowException

    try:
        return run_record(mlflow.get_run(run_id))
    except MlflowException as exc:
        if exc.error_code in ("RESOURCE_DOES_NOT_EXIST", "INVALID_PARAMETER_VALUE"):  # unknown or malformed id
            return None
        raise


def run_metric(mlflow: MlflowClient, run_id: str, name: str) -> float | None:
    """One summary metric of a run (its latest value), None when the run has none by that name."""
    return mlflow.get_run(run_id).data.metrics.get(name)


# ---- history queries (trends, compare) ------------------------------------------------------------------------
# search_runs is paginated over ALL pages: MLflow answers at most `max_results` runs per call, and a trend over
# a silently truncated history would be wrong.

SEARCH_PAGE_SIZE = 1000  # runs per page; MLflow's SQL store caps one page at 50,000


def _pages(
    mlflow: MlflowClient,
    experiment_ids: Sequence[str],
    filter_string: str,
    order_by: Sequence[str],
    page_size: int | None,
    deleted: bool = False,
):
    from mlflow.entities import ViewType

    view = ViewType.DELETED_ONLY if deleted else ViewType.ACTIVE_ONLY
    token = None
    while True:
        page = mlflow.search_runs(
            list(experiment_ids),
            filter_string=filter_string,
            run_view_type=view,
            order_by=list(order_by),
            max_results=page_size or SEARCH_PAGE_SIZE,
            page_token=token,
        )
        yield page
        token = page.token
        if not token:
            return


def search_records(
    mlflow: MlflowClient,
    experiment_ids: Sequence[str],
    filter_string: str = "",
    order_by: Sequence[str] = ("attributes.start_time ASC",),
    page_size: int | None = None,
) -> list[RunRecord]:
    """Every run matching the filter, following page tokens until the last page; each page converted to records
    as it arrives (MLflow's objects are not kept). On a store that refuses `IS [NOT] NULL` on params and tags
    (MLflow before 3.11.1), those clauses are judged here on the runs the rest of the filter finds."""
    if " NULL" not in filter_string.upper():
        return _records(mlflow, experiment_ids, filter_string, order_by, page_size)
    if not mlflow_compat.null_filters_refused(mlflow):
        from mlflow.exceptions import MlflowException

        try:
            return _records(mlflow, experiment_ids, filter_string, order_by, page_size)
        except MlflowException as exc:
            if not mlflow_compat.refuses_null_filters(mlflow, exc):
                raise
    rest, clauses = mlflow_compat.split_null_clauses(filter_string)
    return _records(mlflow, experiment_ids, rest, order_by, page_size, clauses)


def _records(
    mlflow: MlflowClient,
    experiment_ids: Sequence[str],
    filter_string: str,
    order_by: Sequence[str],
    page_size: int | None,
    clauses: Sequence[mlflow_compat.NullClause] = (),
) -> list[RunRecord]:
    """The runs of every page of a search, as records; those `clauses` hold for."""
    records: list[RunRecord] = []
    for page in _pages(mlflow, experiment_ids, filter_string, order_by, page_size):
        for run in page:
            record = run_record(run)
            if all(c.holds(record.params, record.tags) for c in clauses):
                records.append(record)
    return records


def deleted_run_ids(mlflow: MlflowClient, experiment_ids: Sequence[str]) -> list[str]:
    """The ids of the experiments' deleted (not yet purged) FINISHED runs."""
    return [
        run.info.run_id for page in _pages(mlflow, experiment_ids, FINISHED, (), None, deleted=True) for run in page
    ]


FINISHED = "attributes.status = 'FINISHED'"
_SERIES_KEY_TEXT = re.compile(r"[A-Za-z0-9-]+")


def series_filter(series: str, prefix: bool = False) -> str | None:
    """The filter of the FINISHED runs tagged with series `series` (or, with `prefix`, any series whose key
    starts with it) that also record their machine; None when `series` cannot be a key (keys are hex, a
    `v1-` prefix at most)."""
    if not _SERIES_KEY_TEXT.fullmatch(series):
        return None
    tag = f"tags.`{names.SERIES}`"
    match = f"{tag} LIKE '{series}%'" if prefix else f"{tag} = '{series}'"
    return f"{FINISHED} AND {match} AND params.`{names.ENV_MACHINE}` IS NOT NULL"


# FINISHED runs whose series is not simply their series tag: rebuilt from their params (no machine recorded,
# or no tag), or their old `series_key`. Together with `series_filter` of every key they cover every FINISHED
# run exactly once or twice (deduplicated by `series_records`).
UNTAGGED_FILTERS = (
    f"{FINISHED} AND tags.`{names.SERIES}` IS NULL",
    f"{FINISHED} AND params.`{names.ENV_MACHINE}` IS NULL",
)


def series_records(
    mlflow: MlflowClient, experiment_ids: Sequence[str], series: Sequence[str], prefix: bool = False
) -> list[RunRecord] | None:
    """The FINISHED runs that can belong to the given series, oldest first (ties by run id): those tagged
    with one of them (their key starting with one, with `prefix`) and every run whose series the tag alone
    does not tell (`UNTAGGED_FILTERS`: the caller rebuilds theirs and keeps the ones that match). A superset of
    the series' runs, never the whole experiment for them. None when a key cannot be filtered on."""
    filters = [series_filter(s, prefix) for s in series]
    if any(f is None for f in filters):
        return None
    found: dict[str, RunRecord] = {}
    for filter_string in [*filters, *UNTAGGED_FILTERS]:
        for record in search_records(mlflow, experiment_ids, str(filter_string)):
            found[record.run_id] = record
    return sorted(found.values(), key=lambda r: (r.start_time_ms, r.run_id))


def records_by_id(
    mlflow: MlflowClient, experiment_ids: Sequence[str], run_ids: Sequence[str], where: str = FINISHED
) -> list[RunRecord]:
    """The runs among `run_ids` that match `where` (by default: FINISHED; unknown ones are left out), in one
    search per 100."""
    ids = [i for i in dict.fromkeys(run_ids) if _SERIES_KEY_TEXT.fullmatch(i)]
    records: list[RunRecord] = []
    for lo in range(0, len(ids), 100):
        quoted = ", ".join(f"'{i}'" for i in ids[lo : lo + 100])
        records += search_records(mlflow, experiment_ids, f"{where} AND attributes.run_id IN ({quoted})")
    return records


# ---- artifacts --------------------------------------------------------------------------------------------------


def download_artifact(mlflow: MlflowClient, run_id: str, path: str, dest: Path) -> Path:
    """One artifact file of a run into `dest` (a folder); returns the local file."""
    dest.mkdir(parents=True, exist_ok=True)
    return Path(mlflow.download_artifacts(run_id, path, str(dest)))


def load_artifact_text(mlflow: MlflowClient, run_id: str, artifact_path: str) -> str | None:
    """Text of one run artifact; None when the run has no such artifact."""
    import tempfile

    from mlflow.exceptions import MlflowException

    with tempfile.TemporaryDirectory(prefix="yolo-mlops-artifact-") as tmp:
        try:
            local = mlflow.download_artifacts(run_id, artifact_path, tmp)
        except (MlflowException, OSError):
            return None
        path = Path(local)
        return path.read_text() if path.is_file() else None


def load_run_table(mlflow: MlflowClient, run_id: str, artifact_file: str) -> pd.DataFrame | None:
    """An MLflow table logged with `writes.log_table` (JSON, pandas 'split' layout); None when absent."""
    import io

    text = load_artifact_text(mlflow, run_id, artifact_file)
    if text is None:
        return None
    return pd.read_json(io.StringIO(text), orient="split")


# ---- links into the MLflow UI -----------------------------------------------------------------------------------


def _ui_base() -> str:
    """The tracking server itself, or where `mlflow ui` serves a local store."""
    uri = tracking_uri()
    return uri if urlparse(uri).scheme in ("http", "https") else "http://127.0.0.1:5000"


def run_url(run_id: str, experiment_id_: str) -> str:
    """Link to the run in the MLflow UI (served by `mlflow ui` for local stores)."""
    return f"{_ui_base().rstrip('/')}/#/experiments/{experiment_id_}/runs/{run_id}?{names.UI_TRAINING_VIEW_QUERY}"


def artifact_url(run_id: str, artifact_path: str) -> str:
    """URL of one run artifact as served by the MLflow UI/server (`/get-artifact`), for links and images."""
    return f"{_ui_base().rstrip('/')}/get-artifact?path={artifact_path}&run_uuid={run_id}"


def ui_command() -> str:
    uri = tracking_uri()
    if urlparse(uri).scheme in ("http", "https"):
        return f"open {uri}"
    return f"mlflow ui --backend-store-uri {uri} --port 5000"
