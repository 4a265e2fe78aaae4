"""Session-wide isolation: a temp data home, one SQLite MLflow store and one Prefect test server per session.

Environment variables are set at import time, before any test module imports prefect or ultralytics,
because both read their settings once on import.
"""

from __future__ import annotations

import ipaddress
import os
import shutil
import socket
import sys
import tempfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # helper modules shared by test folders (processes.py)

from isolation import isolate  # noqa: E402

_SESSION_DIR = Path(tempfile.mkdtemp(prefix="yolo-mlops-tests-"))
isolate(_SESSION_DIR)  # tests use their own stores and server, never a developer's

# Offline guard: any connection to a non-loopback address fails and is recorded, so a test that needs the
# internet (ultralytics' checks, a download, telemetry) fails here instead of passing on a networked laptop.
BLOCKED_CONNECTIONS: list[object] = []
_real_connect, _real_connect_ex = socket.socket.connect, socket.socket.connect_ex


def _is_loopback(address: object) -> bool:
    host = address[0] if isinstance(address, tuple) else address
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(str(host).split("%")[0]).is_loopback
    except ValueError:
        return False


def _guard(sock: socket.socket, address: object) -> None:
    if sock.family in (socket.AF_INET, socket.AF_INET6) and not _is_loopback(address):
        BLOCKED_CONNECTIONS.append(address)
        raise OSError(f"tests are offline: blocked connection to {address}")


def _connect(self, address):
    _guard(self, address)
    return _real_connect(self, address)


def _connect_ex(self, address):
    _guard(self, address)
    return _real_connect_ex(self, address)


# every socket of the test process goes through the guard (setattr: a method of the class replaced on purpose)
setattr(socket.socket, "connect", _connect)  # noqa: B010
setattr(socket.socket, "connect_ex", _connect_ex)  # noqa: B010


# Parallel runs (`make test` runs pytest-xdist workers; every worker imports this file, so each has its own
# session dir, data home, MLflow store and Prefect server). A test module is one unit of work, so its
# module-scoped fixtures (servers, trained runs) are built once. The modules of one SAME_WORKER entry run one
# after another on one worker: tests/deploy shares the session servers of its conftest; the CPU burners of
# test_busy_machine would stretch the bounded reactions of test_faults (a command ending after its tracking
# server died); the TIMING modules judge wall-clock step times against a planted slowdown (0.5-2 s per step:
# bisect must find the slow commit and call an unchanged one unchanged, the fleet reports must name the slow
# machine, a lost machine must be noticed within its bound, a real two-night history must show its planted shift
# above the runs' noise, a night of real runs without a change must open no operator event), so each of their
# tests runs on a core of its own
# (tests/quiet_core.py) while the other workers go on beside it on the other cores.
# tests/test_quiet_core.py splits the cores itself: in the same unit, no other split runs beside it.
TIMING = (
    "tests/bisect/test_bisect.py",
    "tests/sweeps/test_pool_sweep.py",
    "tests/trends/test_fleet.py",
    "tests/trends/test_fleet_moved.py",
    "tests/trends/test_real_history.py",
    "tests/trends/test_operator_planted.py",
)
QUIET = "quiet-core"
SAME_WORKER = {
    QUIET: (*TIMING, "tests/test_quiet_core.py"),
    "tests/deploy": ("tests/deploy/",),
    "machine-load-and-bounds": ("tests/reliability/test_busy_machine.py", "tests/reliability/test_faults.py"),
}
# The longest units first (seconds in a parallel run on 2 cores: ~590, 470 + 130, 490, 400, 250, 50, 80 ...; the
# first four start together), so no long unit starts when the others are nearly done; every other module follows
# in the usual order.
LONGEST_FIRST = (
    "machine-load-and-bounds",
    QUIET,
    "tests/gpu_checks/test_run_gpu_checks.py",
    "tests/trends/test_verdicts.py",
    "tests/deploy",
    "tests/reliability/test_inputs.py",
    "tests/test_lint.py",
    "tests/sweeps/test_lanes.py",
    "tests/sweeps/test_sweep_flow.py",
    "tests/analysis/test_planted_bottlenecks.py",
    "tests/run/test_profile_flow.py",
    "tests/sweeps/test_optimize_flow.py",
)


def work_unit(nodeid: str) -> str:
    """The unit of work of a test in a parallel run: its SAME_WORKER entry, or else its module."""
    module = nodeid.split("::", 1)[0]
    return next((unit for unit, paths in SAME_WORKER.items() if module.startswith(paths)), module)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not hasattr(config, "workerinput"):  # a serial run keeps pytest's order
        return
    rank = {unit: i for i, unit in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(work_unit(item.nodeid), len(rank)))  # stable: module order kept


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    """In a parallel run, a TIMING test (setup, call, teardown) runs on a core of its own. Where the machine has
    no core to give (one core, or no CPU affinity: macOS), it holds the run's file lock exclusively and every
    other test holds it shared; `gate` keeps new tests from starting while a TIMING test waits."""
    if not hasattr(item.config, "workerinput"):
        return (yield)
    from quiet_core import can_split, quiet_core

    quiet = item.nodeid.split("::", 1)[0] in TIMING
    if can_split():
        if not quiet:
            return (yield)
        with quiet_core():
            return (yield)
    import fcntl

    prefix = Path(tempfile.gettempdir()) / f"yolo-mlops-tests-{item.config.workerinput['testrunuid']}"
    with open(f"{prefix}.gate", "a") as gate, open(f"{prefix}.lock", "a") as lock:
        fcntl.flock(gate, fcntl.LOCK_EX)
        if not quiet:
            fcntl.flock(gate, fcntl.LOCK_UN)
        fcntl.flock(lock, fcntl.LOCK_EX if quiet else fcntl.LOCK_SH)
        try:
            return (yield)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
            fcntl.flock(gate, fcntl.LOCK_UN)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """With `--dist loadfile`: units of work as work_unit() says, handed out in collection order (longest first)."""
    if config.getvalue("dist") != "loadfile":
        return None  # another distribution asked for on the command line: xdist's own
    from xdist.scheduler import LoadScopeScheduling

    class ModuleScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return work_unit(nodeid)

    config.option.loadscopereorder = False  # by default xdist puts the units with most tests first
    return ModuleScheduling(config, log)


def pytest_unconfigure(config: pytest.Config) -> None:
    """The session dir holds every training output of the session (0.3-0.8 GB per worker): removed when the
    session ends, after its fixtures stopped their servers, so repeated runs do not fill the disk.
    YOLO_MLOPS_KEEP_TEST_DIR=1 keeps it (its MLflow store, e.g. for benchmarks/bench_bisect_noise.py)."""
    if not os.environ.get("YOLO_MLOPS_KEEP_TEST_DIR"):
        shutil.rmtree(_SESSION_DIR, ignore_errors=True)


@pytest.fixture(scope="session")
def session_dir() -> Path:
    return _SESSION_DIR


def running_runs(folders: list[Path]) -> list[str]:
    """Every active MLflow run in status RUNNING in the SQLite stores under `folders` (any `*.db` file with MLflow's
    `runs` table, opened read-only), as 'store: run <id> "<name>" of experiment <name>'."""
    import sqlite3
    from contextlib import closing

    found = []
    stores = sorted({db.resolve() for folder in folders if folder.is_dir() for db in folder.rglob("*.db")})
    for db in stores:
        try:
            with closing(sqlite3.connect(db.as_uri() + "?mode=ro", uri=True)) as store:
                tables = {row[0] for row in store.execute("SELECT name FROM sqlite_master WHERE type='table'")}
                if not {"runs", "experiments"} <= tables:
                    continue
                rows = store.execute(
                    "SELECT r.run_uuid, r.name, e.name FROM runs r JOIN experiments e "
                    "ON r.experiment_id = e.experiment_id WHERE r.status = 'RUNNING' AND r.lifecycle_stage = 'active'"
                ).fetchall()
        except sqlite3.Error:  # not a database, or one another process is rewriting: not a store to judge
            continue
        found += [f"{db}: run {run} {name!r} of experiment {experiment!r}" for run, name, experiment in rows]
    return found


@pytest.fixture(scope="session", autouse=True)
def no_run_left_running(tmp_path_factory: pytest.TempPathFactory):
    """After the session's last test: no MLflow run is left RUNNING in any store the tests made and the session
    still holds (its own store, and the stores of module fixtures' folders and of failed tests' tmp_path). A
    command or a test that ends its work must end its run too; a store's path names the test or module that made
    it. A passed test's tmp_path is removed when the test ends (tmp_path_retention_policy = "failed"), so its
    stores are judged then, by `no_run_left_running_in_tmp_path`."""
    yield
    leaks = running_runs([_SESSION_DIR, tmp_path_factory.getbasetemp()])
    if leaks:
        pytest.fail(f"{len(leaks)} MLflow run(s) left RUNNING:\n" + "\n".join(leaks), pytrace=False)


@pytest.fixture(autouse=True)
def no_run_left_running_in_tmp_path(request: pytest.FixtureRequest):
    """A test's own stores (under its tmp_path), judged after its other fixtures ended and before tmp_path goes
    (this fixture depends on tmp_path, so tmp_path outlives it)."""
    if "tmp_path" not in request.fixturenames:
        yield
        return
    tmp_path = request.getfixturevalue("tmp_path")
    yield
    leaks = running_runs([tmp_path])
    if leaks:
        pytest.fail(f"{len(leaks)} MLflow run(s) left RUNNING:\n" + "\n".join(leaks), pytrace=False)


@pytest.fixture(scope="session")
def prefect_server():
    """Prefect's real (ephemeral) API server, started once per session (per worker in a parallel run).
    Its start-up takes 10-100 s on a loaded 2-core machine, longer while other workers start theirs: the bound
    is generous, since a loaded machine is slower, not broken."""
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=600):
        yield


@pytest.fixture
def blocked_connections() -> list[object]:
    return BLOCKED_CONNECTIONS


@pytest.fixture(scope="session")
def mlflow_client():
    from yolo_mlops.tracking import connection

    return connection.client()
