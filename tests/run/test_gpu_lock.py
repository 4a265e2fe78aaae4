import pytest

from yolo_mlops.run import gpu_lock
from yolo_mlops.run.config import ConfigError


def test_limit_names(monkeypatch):
    from prefect.settings import PREFECT_API_URL, temporary_settings

    assert gpu_lock.limit_name("cpu") is None
    assert gpu_lock.limit_name("cpu", "my-limit") == "my-limit"
    with temporary_settings({PREFECT_API_URL: "http://prefect.example:4200/api"}):
        assert gpu_lock.limit_name("cuda:1") == "gpu-1"
        assert gpu_lock.limit_name("2,3") == "gpu-2"
        assert gpu_lock.limit_name("0", None) is None  # the caller holds it already
    with temporary_settings(restore_defaults={PREFECT_API_URL}):
        assert gpu_lock.limit_name("0") is None  # a temporary server cannot keep other processes off the GPU


def test_missing_limit_is_an_error_not_unthrottled(prefect_server):
    with pytest.raises(ConfigError, match="does not exist"):
        gpu_lock.check_limit("gpu-does-not-exist")
    with pytest.raises(Exception):  # noqa: B017 - Prefect's error type; running the body is the failure
        with gpu_lock.hold("gpu-does-not-exist"):
            pytest.fail("ran without the limit")
    with gpu_lock.hold(None):
        pass
