import pytest

from yolo_mlops.errors import ConfigError
from yolo_mlops.run import gpu_lock


def _create_limit(name: str) -> None:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import GlobalConcurrencyLimitCreate

    with get_client(sync_client=True) as client:
        client.create_global_concurrency_limit(GlobalConcurrencyLimitCreate(name=name, limit=1))


def test_limit_names_carry_the_machine(prefect_server, monkeypatch):
    from prefect.settings import PREFECT_API_URL, temporary_settings

    assert gpu_lock.limit_name("cpu") is None
    assert gpu_lock.limit_name("cpu", "my-limit") == "my-limit"
    monkeypatch.setenv("YOLO_MLOPS_MACHINE", "lock-node-a")
    with temporary_settings({PREFECT_API_URL: PREFECT_API_URL.value()}):  # the test server, as a shared one
        assert gpu_lock.limit_name("cuda:1") == "gpu-lock-node-a-1"  # missing: named, so the strict hold says so
        assert gpu_lock.limit_name("2,3") == "gpu-lock-node-a-2"
        assert gpu_lock.limit_name("0", None) is None  # the caller holds it already
        _create_limit("gpu-7")  # a server set up before the machine was in the name
        assert gpu_lock.limit_name("7") == "gpu-7"
        _create_limit("gpu-lock-node-a-7")  # bootstrap.sh ran on this machine: its own limit wins
        assert gpu_lock.limit_name("7") == "gpu-lock-node-a-7"
        monkeypatch.setenv("YOLO_MLOPS_MACHINE", "lock-node-b")
        assert gpu_lock.limit_name("7") == "gpu-7"
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


def test_a_job_on_several_gpus_holds_every_gpu_at_once(prefect_server, monkeypatch):
    from prefect.client.orchestration import get_client
    from prefect.settings import PREFECT_API_URL, temporary_settings

    assert gpu_lock.limit_names("cpu") == [] and gpu_lock.limit_names("0,1", None) == []
    monkeypatch.setenv("YOLO_MLOPS_MACHINE", "lock-node-c")
    with temporary_settings({PREFECT_API_URL: PREFECT_API_URL.value()}):
        names = gpu_lock.limit_names("3,1,2")
        assert names == ["gpu-lock-node-c-1", "gpu-lock-node-c-2", "gpu-lock-node-c-3"]  # index order
        for name in names:
            _create_limit(name)

        def active() -> list[int]:
            with get_client(sync_client=True) as client:
                return [client.read_global_concurrency_limit_by_name(n).active_slots for n in names]

        with gpu_lock.hold(names):
            assert active() == [1, 1, 1]
        assert active() == [0, 0, 0]


def test_a_sweep_of_a_multi_gpu_job_says_what_it_needs(prefect_server, monkeypatch):
    """A data-parallel job over GPUs 0,1: no single-device lanes, and no child holding only GPU 0's limit. The GPU
    is the hardware tests may fake: a machine of 2 GPUs."""
    from prefect.settings import PREFECT_API_URL, temporary_settings

    from yolo_mlops import sweeps
    from yolo_mlops.config import build_run_spec
    from yolo_mlops.sweeps import plan as plan_module

    job = build_run_spec({"device": "0,1", "batch": 8})
    monkeypatch.setattr(plan_module, "_cuda_device_count", lambda: 2)
    monkeypatch.setenv("YOLO_MLOPS_MACHINE", "lock-node-d")
    with pytest.raises(ConfigError, match="--devices makes each device a lane of single-device children"):
        sweeps.plan_sweep(job, ["batch_16"], devices=["0", "1"])
    with temporary_settings({PREFECT_API_URL: PREFECT_API_URL.value()}):  # the test server, as a shared one
        with pytest.raises(ConfigError, match="holds one concurrency limit per child: give --concurrency-limit"):
            sweeps.plan_sweep(job, ["batch_16"])
        assert sweeps.plan_sweep(job, ["batch_16"], concurrency_limit="gpus-0-1").concurrency_limit == "gpus-0-1"
