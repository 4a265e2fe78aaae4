"""The Prefect API as the library calls it, in small typed functions over plain data: the settings (which API, its
credentials), global concurrency limits, work pools, deployments and their runs, flow-run states.

Outside flows/, only this module and compat/prefect.py (the differences between Prefect's releases and its
private parts) import Prefect (tests/test_layers.py); both import it inside functions only, so a command that
never talks to Prefect does not load it. Callers get dataclasses and this module's exceptions, never Prefect's
objects, and decide what a missing object or an unreachable server means for them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal, cast

if TYPE_CHECKING:
    from prefect.client.orchestration import SyncPrefectClient
    from prefect.client.schemas.objects import FlowRun


class NotFound(LookupError):
    """The Prefect server has no such object (work pool, deployment, concurrency limit)."""


class Unreachable(ConnectionError):
    """No Prefect server answered at the API URL."""


@dataclass(frozen=True)
class ConcurrencyLimit:
    name: str
    slots: int
    active: bool


@dataclass(frozen=True)
class Deployment:
    id: str
    name: str  # the deployment's own name, without its flow's
    work_pool: str | None  # None: a served deployment, run wherever it is served
    job_env: dict[str, str] = field(default_factory=dict)  # the job variables' `env`


@dataclass(frozen=True)
class WorkQueue:
    name: str
    last_polled: datetime | None  # None: no worker polled it yet
    paused: bool


@dataclass(frozen=True)
class RunState:
    """A flow run's state, as far as a waiting caller needs it."""

    name: str
    message: str
    final: bool
    running: bool
    completed: bool


EndState = Literal["cancelled", "cancelling", "crashed"]


def api_url() -> str | None:
    """PREFECT_API_URL as Prefect reads it (environment or profile); None when a command starts its temporary
    server instead."""
    from prefect.settings import PREFECT_API_URL

    return PREFECT_API_URL.value() or None


def auth_headers() -> dict[str, str]:
    """The Authorization header Prefect's client sends: a self-hosted server's basic auth, or a Cloud API key."""
    import base64

    from prefect.settings import get_current_settings

    api = get_current_settings().api
    if api.auth_string is not None:
        secret = api.auth_string.get_secret_value()
        return {"Authorization": "Basic " + base64.b64encode(secret.encode()).decode()}
    if api.key is not None:
        return {"Authorization": f"Bearer {api.key.get_secret_value()}"}
    return {}


def concurrency_limit(name: str) -> ConcurrencyLimit | None:
    """The global concurrency limit `name`; None when the server has none of that name."""
    from prefect.exceptions import ObjectNotFound

    with _client() as client:
        try:
            found = client.read_global_concurrency_limit_by_name(name)
        except ObjectNotFound:
            return None
    return ConcurrencyLimit(name, int(found.limit), bool(found.active))


@contextlib.contextmanager
def occupy(names: list[str]) -> Iterator[None]:
    """One slot of every limit in `names`, taken in one request (all or none) and strict: a missing limit raises."""
    from prefect.concurrency.sync import concurrency

    with concurrency(names, occupy=1, strict=True):
        yield


def deployment(name: str) -> Deployment:
    """The deployment `<flow>/<deployment>`; NotFound when the server has none of that name."""
    from prefect.exceptions import ObjectNotFound

    with _client() as client:
        try:
            return _deployment(client.read_deployment_by_name(name))
        except ObjectNotFound:
            raise NotFound(name) from None


def start_deployment_run(
    deployment_ref: str,
    parameters: dict[str, Any],
    *,
    as_subflow: bool = True,
    **options: Any,
) -> str:
    """Create a run of a deployment (its id, or `<flow>/<deployment>`) without waiting for it; its flow run id.
    `options` are run_deployment's own (work_queue_name, job_variables, flow_run_name, tags)."""
    from prefect.deployments import run_deployment

    # called from sync code, so run_deployment returns the FlowRun itself, not a coroutine
    flow_run = cast(
        "FlowRun",
        run_deployment(deployment_ref, parameters=parameters, timeout=0, as_subflow=as_subflow, **options),
    )
    return str(flow_run.id)


class Session:
    """One client connection for a caller that polls (a pool sweep's lane)."""

    def __init__(self, client: SyncPrefectClient) -> None:
        self._client = client

    @property
    def api_url(self) -> str:
        return str(self._client.api_url)

    def work_pool_exists(self, pool: str) -> bool:
        """Unreachable when no server answers."""
        import httpx
        from prefect.exceptions import ObjectNotFound

        try:
            self._client.read_work_pool(pool)
        except httpx.TransportError as exc:
            raise Unreachable(f"{type(exc).__name__}: {exc}") from None
        except ObjectNotFound:
            return False
        return True

    def deployments_of(self, flow: str) -> list[Deployment]:
        from prefect.client.schemas.filters import FlowFilter, FlowFilterName

        found = self._client.read_deployments(flow_filter=FlowFilter(name=FlowFilterName(any_=[flow])))
        return [_deployment(d) for d in found]

    def work_queues(self, pool: str) -> list[WorkQueue]:
        return [
            WorkQueue(q.name, q.last_polled, bool(q.is_paused))
            for q in self._client.read_work_queues(work_pool_name=pool)
        ]

    def queue_last_polled(self, pool: str, queue: str) -> datetime | None:
        return self._client.read_work_queue_by_name(queue, work_pool_name=pool).last_polled

    def flow_run_state(self, flow_run_id: str) -> RunState | None:
        from uuid import UUID

        state = self._client.read_flow_run(UUID(flow_run_id)).state
        if state is None:
            return None
        name, message = state.name or str(state.type.value), state.message or ""
        return RunState(name, message, state.is_final(), state.is_running(), state.is_completed())

    def end_flow_run(self, flow_run_id: str, end: EndState, message: str) -> None:
        """Force a flow run into Cancelled (never started), Cancelling (its worker stops the process, as a
        cancellation from the UI does) or Crashed (its machine was lost)."""
        from uuid import UUID

        from prefect.client.schemas.objects import State
        from prefect.states import Cancelled, Cancelling, Crashed

        state: State = {"cancelled": Cancelled, "cancelling": Cancelling, "crashed": Crashed}[end](message=message)
        self._client.set_flow_run_state(UUID(flow_run_id), state, force=True)


@contextlib.contextmanager
def session() -> Iterator[Session]:
    with _client() as client:
        yield Session(client)


def _client() -> SyncPrefectClient:
    from prefect.client.orchestration import get_client

    return get_client(sync_client=True)


def _deployment(found: Any) -> Deployment:
    env = {str(k): str(v) for k, v in ((found.job_variables or {}).get("env") or {}).items()}
    return Deployment(str(found.id), found.name, found.work_pool_name, env)
