"""MLflow: what older clients and tracking servers in the declared range lack.

Checked against MLflow 3.5.0, 3.10.1, 3.11.1, 3.13.0, 3.17.2 and 3.18.0 (run), and the sources of 3.0 to 3.18:
- `MLFLOW_ALLOW_FILE_STORE` (from 3.13.0 a client refuses a file store unless it is set; older ones use it);
- `IS NULL` / `IS NOT NULL` on params and tags in `search_runs` filters: accepted from 3.11.1; older tracking
  servers (and older clients on a SQL store, which parse the filter themselves) reject them with
  INVALID_PARAMETER_VALUE "Invalid clause(s) in filter string". Where a store refuses them, the caller searches
  without those clauses (`split_null_clauses`) and judges them on the runs it reads; a store that refused once in
  a process (`refuses_null_filters`) is not asked again.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


def file_store_allowed() -> bool:
    """Whether this MLflow client uses a plain folder as its store (newer releases refuse one unless
    MLFLOW_ALLOW_FILE_STORE is set)."""
    try:
        from mlflow.environment_variables import MLFLOW_ALLOW_FILE_STORE
    except ImportError:  # a release from before the switch: the file store is allowed
        return True
    return bool(MLFLOW_ALLOW_FILE_STORE.get())


_REFUSED: set[str] = set()  # tracking URIs whose store refused IS NULL on params or tags
_NULL_CLAUSE = re.compile(r"(params|tags)\.`([^`]+)`\s+IS\s+(NOT\s+)?NULL", re.IGNORECASE)
_REJECTED = re.compile(r"Invalid clause\(s\) in filter string", re.IGNORECASE)


@dataclass(frozen=True)
class NullClause:
    """`params.`key` IS NULL` (present False) or `IS NOT NULL` (present True), judged on a run's params and tags."""

    kind: str  # "params" | "tags"
    key: str
    present: bool

    def holds(self, params: Mapping[str, str], tags: Mapping[str, str]) -> bool:
        return (self.key in (params if self.kind == "params" else tags)) == self.present


def split_null_clauses(filter_string: str) -> tuple[str, list[NullClause]]:
    """The filter without its IS [NOT] NULL clauses on params and tags, and those clauses (the filter's clauses
    are joined by AND, as MLflow's filter grammar requires)."""
    clauses: list[NullClause] = []
    kept = []
    for part in re.split(r"\s+AND\s+", filter_string, flags=re.IGNORECASE):
        match = _NULL_CLAUSE.fullmatch(part.strip())
        if match:
            clauses.append(NullClause(match.group(1).lower(), match.group(2), match.group(3) is not None))
        elif part.strip():
            kept.append(part.strip())
    return " AND ".join(kept), clauses


def _uri(client: Any) -> str:
    return str(getattr(client, "tracking_uri", None) or client._tracking_client.tracking_uri)


def null_filters_refused(client: Any) -> bool:
    """Whether the store behind `client` has refused `IS [NOT] NULL` on params or tags in this process."""
    return _uri(client) in _REFUSED


def refuses_null_filters(client: Any, exc: Exception) -> bool:
    """Whether `exc`, raised by a search with IS [NOT] NULL clauses, is the store's refusal of them (an MLflow
    before 3.11.1); if so the store is remembered as refusing them."""
    refused = (
        getattr(exc, "error_code", None) == "INVALID_PARAMETER_VALUE"
        and _REJECTED.search(str(exc)) is not None
        and "NULL" in str(exc).upper()
    )
    if refused:
        _REFUSED.add(_uri(client))
    return refused
