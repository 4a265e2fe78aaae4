"""compat.prefect's reach into a ProcessPoolTaskRunner, against runners with and without a resolver thread. The real
runner is tested end to end in tests/sweeps/test_lanes.py, the temporary server's own session in
tests/reliability/test_busy_machine.py."""

from __future__ import annotations

import types

import pytest

from yolo_mlops.compat import prefect as prefect_compat


class _Process:
    def __init__(self, alive=True, stubborn=False):
        self.alive, self.stubborn, self.events = alive, stubborn, []

    def is_alive(self):
        return self.alive

    def terminate(self):
        self.events.append("terminate")
        self.alive = self.stubborn

    def join(self, timeout):
        self.events.append("join")

    def kill(self):
        self.events.append("kill")
        self.alive = False


class _Resolver:
    def __init__(self, order):
        self.order = order

    def shutdown(self, wait):
        self.order.append(("resolver drained", wait))


@pytest.mark.parametrize("with_resolver", [True, False], ids=["resolver_thread", "no_resolver_thread"])
def test_the_pool_processes_are_ended(with_resolver):
    order: list = []
    running, stubborn, done = _Process(), _Process(stubborn=True), _Process(alive=False)
    runner = types.SimpleNamespace(_executor=types.SimpleNamespace(_processes={1: running, 2: stubborn, 3: done}))
    if with_resolver:
        runner._resolver_executor = _Resolver(order)
    prefect_compat.end_pool_processes(runner)
    assert order == ([("resolver drained", True)] if with_resolver else [])
    assert running.events == ["terminate", "join"]
    assert stubborn.events == ["terminate", "join", "kill"]
    assert done.events == []


def test_a_runner_whose_pool_never_started_is_left_alone():
    prefect_compat.end_pool_processes(types.SimpleNamespace(_executor=None))
    prefect_compat.end_pool_processes(object())


def test_the_process_pool_runner_is_prefects():
    from prefect.task_runners import ProcessPoolTaskRunner

    assert isinstance(prefect_compat.process_pool_runner(1), ProcessPoolTaskRunner)


def test_no_temporary_server_to_manage_with_an_api_url(monkeypatch):
    monkeypatch.setenv("PREFECT_API_URL", "http://127.0.0.1:1/api")
    assert prefect_compat.own_session_server(lambda: None) is False


class _OldServer:
    """SubprocessASGIServer before Prefect 3.6.26: one object per port asked for, and a stop() that removes the
    port it started on (chosen at start), leaving the one asked for (None) registered."""

    _instances: dict = {}

    def __new__(cls, port=None):
        if port not in cls._instances:
            cls._instances[port] = super().__new__(cls)
        return cls._instances[port]

    def __init__(self, port=None):
        self.port = port

    def start(self):
        self.port = 8123

    def stop(self):
        self._instances.pop(self.port, None)


class _NewServer(_OldServer):
    """From 3.6.26: stop() removes the key the server was registered under."""

    _instances: dict = {}

    def __init__(self, port=None):
        super().__init__(port)
        self._instance_key = port

    def stop(self):
        self._instances.pop(self._instance_key, None)


@pytest.mark.parametrize("base", [_OldServer, _NewServer], ids=["before_3.6.26", "3.6.26_on"])
def test_a_stopped_server_leaves_the_registry(base):
    server = prefect_compat.own_session_server_class(base, lambda: None)()
    assert base._instances == {None: server}
    server.start()
    server.stop()
    assert base._instances == {}  # the next client gets a new server, not this stopped one


def test_no_log_file_when_its_folder_is_gone(tmp_path):
    started: list[object] = []

    class Base(_NewServer):
        _instances: dict = {}

    cls = prefect_compat.own_session_server_class(Base, lambda: tmp_path / "gone" / "server.log")
    server = cls()
    server.start_server = started.append  # records the log handed to the process
    server._run_uvicorn_command()
    assert started == [None]
