"""MLflow: what older clients and tracking servers in the declared range lack.

Checked against MLflow 3.17.2 (run) and the sources of the releases in the declared range:
- `MLFLOW_ALLOW_FILE_STORE` (newer clients refuse a file store unless it is set; older ones use it as they are
  told);
- `IS NULL` / `IS NOT NULL` on params and tags in `search_runs` filters: older servers and stores reject them
  (INVALID_PARAMETER_VALUE), so `null_filters_supported` asks the store once per URI and the caller falls back
  to filtering the runs it reads.
"""

from __future__ import annotations

from typing import Any


def file_store_allowed() -> bool:
    """Whether this MLflow client uses a plain folder as its store (newer releases refuse one unless
    MLFLOW_ALLOW_FILE_STORE is set)."""
    try:
        from mlflow.environment_variables import MLFLOW_ALLOW_FILE_STORE
    except ImportError:  # a release from before the switch: the file store is allowed
        return True
    return bool(MLFLOW_ALLOW_FILE_STORE.get())


_NULL_FILTERS: dict[str, bool] = {}  # tracking URI -> whether its store takes IS NULL on params and tags


def null_filters_supported(client: Any, experiment_ids: list[str]) -> bool:
    """Whether the store behind `client` takes `IS NULL` / `IS NOT NULL` on params and tags (asked once per
    tracking URI with a one-row search)."""
    uri = str(getattr(client, "tracking_uri", None) or client._tracking_client.tracking_uri)
    if uri in _NULL_FILTERS:
        return _NULL_FILTERS[uri]
    from mlflow.exceptions import MlflowException

    try:
        client.search_runs(experiment_ids, "params.`_probe` IS NULL AND tags.`_probe` IS NULL", max_results=1)
        supported = True
    except MlflowException as exc:
        if "NULL" not in str(exc).upper() and getattr(exc, "error_code", "") != "INVALID_PARAMETER_VALUE":
            raise
        supported = False
    _NULL_FILTERS[uri] = supported
    return supported
