"""One GPU, one profiled run: Prefect global concurrency limits named `gpu-<machine>-<index>`.

Sweeps, scheduled benchmarks and ad-hoc deployment runs on the same GPU take the same limit, so they never
share a GPU and spoil each other's timings. The machine is in the name because one Prefect server serves a
fleet: GPU 0 of machine A and GPU 0 of machine B are different slots. Limits are strict: a missing limit is
an error, never an unthrottled run. `deploy/bootstrap.sh` creates one limit of 1 slot per GPU of the machine
it runs on.

Servers set up before the machine was in the name have `gpu-<index>`: where a machine has no limit of its
own but that one exists, runs hold it (safe: never oversubscribed, but it serialises GPU <index> of every
machine) until bootstrap.sh is run on the machine.

A temporary Prefect server (no PREFECT_API_URL, e.g. `yolo-mlops sweep` on a workstation) lives only as
long as one command, so a limit on it could not keep another process off the GPU; there the lock is
skipped and the run says so.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from yolo_mlops.compat import prefect_client
from yolo_mlops.errors import ConfigError
from yolo_mlops.run.environment import cuda_indices, machine_name

AUTO = "auto"


def machine_limit(machine: str, index: int) -> str:
    """The limit of GPU `index` of `machine`: gpu-<machine>-<index>."""
    return f"gpu-{machine}-{index}"


def legacy_limit(index: int) -> str:
    """The single-machine name of GPU `index`'s limit, from before the machine was in the name."""
    return f"gpu-{index}"


def limit_name(device: str, requested: str | None = AUTO) -> str | None:
    """The limit a run on `device` holds: `requested` if it is a name, else on a shared server
    gpu-<machine>-<index> (or the legacy gpu-<index> where only that one exists); None on CPU or on a
    temporary server. A data-parallel job on several GPUs holds `limit_names`."""
    if requested != AUTO:
        return requested
    if device == "cpu" or not _shared_server():
        return None
    return _limit_of(cuda_indices(device)[0])


def limit_names(device: str, requested: str | None = AUTO) -> list[str]:
    """Every limit a run on `device` holds: one per GPU, in index order, so a data-parallel job takes the slot of
    every GPU it trains on (and `hold` takes them in one request: two jobs never each hold half)."""
    if requested != AUTO:
        return [requested] if requested else []
    if device == "cpu" or not _shared_server():
        return []
    return [_limit_of(index) for index in sorted(set(cuda_indices(device)))]


def _limit_of(index: int) -> str:
    name = machine_limit(machine_name(), index)
    if not _exists(name) and _exists(legacy_limit(index)):
        print(
            f"concurrency limit {name!r} does not exist; holding the single-machine {legacy_limit(index)!r} "
            f"(run deploy/bootstrap.sh on this machine to create its own)"
        )
        return legacy_limit(index)
    return name


def _exists(name: str) -> bool:
    return prefect_client.concurrency_limit(name) is not None


def _shared_server() -> bool:
    return prefect_client.api_url() is not None


def check_limit(name: str | None) -> int | None:
    """The limit's slot count; a missing or inactive limit is an error (never run unthrottled on a shared GPU)."""
    if name is None:
        return None
    limit = prefect_client.concurrency_limit(name)
    if limit is None:
        raise ConfigError(
            f"Prefect concurrency limit {name!r} does not exist; create it once with "
            f"`prefect gcl create {name} --limit 1` or deploy/bootstrap.sh on that machine "
            "(GPU runs never go unthrottled)"
        )
    if not limit.active:
        raise ConfigError(f"Prefect concurrency limit {name!r} is inactive: it would not throttle anything")
    return limit.slots


@contextlib.contextmanager
def hold(name: str | list[str] | None) -> Iterator[None]:
    """Hold one slot of limit `name`, or of every limit of a list at once (Prefect acquires them in one request,
    all or none, so jobs over overlapping GPUs queue instead of deadlocking); strict: raises if one does not
    exist; a no-op for None or an empty list."""
    names = [name] if isinstance(name, str) else sorted(name or [])
    if not names:
        yield
        return
    with prefect_client.occupy(names):
        yield
