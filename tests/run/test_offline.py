import socket
from pathlib import Path

import pytest

from yolo_mlops.config import data_home
from yolo_mlops.run.offline import configure_ultralytics


def test_ultralytics_is_configured_offline():
    settings_dir = configure_ultralytics(data_home())
    from ultralytics.utils import SETTINGS, is_online

    assert (Path(settings_dir) / "Arial.ttf").stat().st_size > 10_000
    assert SETTINGS["sync"] is False and SETTINGS["mlflow"] is False
    assert is_online() is False
    assert str(data_home()) in SETTINGS["weights_dir"]  # nothing lands in the current directory


def test_the_test_network_guard_blocks_external_hosts(blocked_connections):
    before = len(blocked_connections)
    with socket.socket() as sock, pytest.raises(OSError, match="tests are offline"):
        sock.connect(("192.0.2.1", 80))  # TEST-NET-1: never routable
    assert len(blocked_connections) == before + 1
    del blocked_connections[before:]  # keep the record clean for the end-to-end assertion
