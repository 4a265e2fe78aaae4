"""A run of the `bisect` deployment for a regression's commit range, handed over without waiting for it.

The nightly benchmark (`BenchmarkSuite.auto_bisect`) hands a confirmed regression to the `bisect/bisect`
deployment (deploy/prefect.yaml), on the work queue named after the regressed series' machine: that machine's
worker runs it, holding the GPU's limit around every bisection run, so it never runs beside the next night's
benchmark, and never on another machine, whose speed is not the one that regressed.
"""

from __future__ import annotations

from yolo_mlops.compat import prefect_client
from yolo_mlops.config.benchmark import BISECT_DEPLOYMENT
from yolo_mlops.errors import ConfigError
from yolo_mlops.run.environment import MACHINE_VAR
from yolo_mlops.trends.commit_range import BisectRange


def start(target: BisectRange, deployment: str = BISECT_DEPLOYMENT, machine: str | None = None) -> tuple[str, str]:
    """Create a run of the bisect deployment for `target`, without waiting for it: on the work queue named after
    `machine` (the regressed series' machine, whose worker polls it) with `YOLO_MLOPS_MACHINE=<machine>` in its
    job environment, so the bisection re-runs the workload where it regressed and its runs name that machine.
    Returns the flow run id and where it goes. A deployment that does not exist on the Prefect server is a
    ConfigError naming it; so is a machine to run on with a deployment that has no work pool (a served
    deployment runs wherever it is served: it cannot be sent to a machine)."""
    try:
        found = prefect_client.deployment(deployment)
    except prefect_client.NotFound:
        raise ConfigError(
            f"auto-bisect: no deployment {deployment!r} on the Prefect server "
            "(deploy/bootstrap.sh creates it from deploy/prefect.yaml)"
        ) from None
    routing: dict = {}
    where = "any machine (the series' machine is not recorded)"
    if machine:
        if not found.work_pool:
            raise ConfigError(
                f"auto-bisect: deployment {deployment!r} has no work pool, so it cannot be sent to "
                f"machine {machine!r}: deploy it to the process pool (deploy/prefect.yaml)"
            )
        routing = {"work_queue_name": machine, "job_variables": {"env": {MACHINE_VAR: machine}}}
        where = f"work queue {machine!r} of pool {found.work_pool!r}"
    return prefect_client.start_deployment_run(deployment, target.parameters(), **routing), where
