"""A run of the `bisect` deployment for a regression's commit range, handed over without waiting for it.

The nightly benchmark (`BenchmarkSuite.auto_bisect`) hands a confirmed regression to the `bisect/bisect`
deployment (deploy/prefect.yaml); the machine's worker runs it, holding the GPU's limit around every
bisection run, so it never runs beside the next night's benchmark.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

from yolo_mlops.config.benchmark import BISECT_DEPLOYMENT
from yolo_mlops.errors import ConfigError
from yolo_mlops.trends.commit_range import BisectRange

if TYPE_CHECKING:
    from prefect.client.schemas.objects import FlowRun


def start(target: BisectRange, deployment: str = BISECT_DEPLOYMENT) -> str:
    """Create a run of the bisect deployment for `target` and return its flow run id, without waiting for it.
    A deployment that does not exist on the Prefect server is a ConfigError naming it."""
    from prefect.deployments import run_deployment
    from prefect.exceptions import ObjectNotFound

    try:
        # called from sync code, so run_deployment returns the FlowRun, not a coroutine
        flow_run = cast("FlowRun", run_deployment(name=deployment, parameters=target.parameters(), timeout=0))
    except ObjectNotFound:
        raise ConfigError(f"auto-bisect: no deployment {deployment!r} on the Prefect server "
                          "(deploy/bootstrap.sh creates it from deploy/prefect.yaml)") from None
    return str(flow_run.id)
