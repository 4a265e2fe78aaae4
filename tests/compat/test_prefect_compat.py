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
