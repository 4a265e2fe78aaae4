"""The deployed path end to end, with real servers and no Docker:

PostgreSQL <- MLflow tracking server (basic auth, deploy/mlflow/start-mlflow.sh)
           <- Prefect server
deploy/bootstrap.sh -> work pools, gpu-<i> limits, deployments of deploy/prefect.yaml
`prefect deployment run` -> `prefect worker start --run-once` -> profile-training flow on CPU
-> the run, its traces and tables, read back through the MLflow server's REST API
-> the run page in headless Chromium (screenshot kept in ci-output/).
"""

from __future__ import annotations

import gzip
import json
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest
import requests

from yolo_mlops import names

from .conftest import REPO, VENV_BIN, MlflowServer, PrefectServer, base_env, start, stop

pytestmark = pytest.mark.integration

EXPERIMENT = "deploy-integration"
# The smallest run that still covers a full profiler window (1 wait + 1 warmup + 2 active steps).
TINY_SPEC = {
    "experiment": EXPERIMENT,
    "run_name": "deploy-integration",
    "imgsz": 64,
    "batch": 4,
    "epochs": 1,
    "max_steps": 6,
    "synthetic_images": 32,
    "device": "cpu",
    "workers": 0,
    "val": False,
    "profiler": {"wait": 1, "warmup": 1, "active": 2, "repeat": 1},
}
CI_OUTPUT = REPO / "ci-output"


def prefect_cli(args: list[str], env: dict[str, str], timeout: float = 300) -> subprocess.CompletedProcess:
    proc = subprocess.run(
        [str(VENV_BIN / "prefect"), *args], env=env, cwd=REPO, capture_output=True, text=True, timeout=timeout
    )
    assert proc.returncode == 0, f"prefect {' '.join(args)} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc


def api(prefect: PrefectServer, method: str, path: str, **kwargs):
    response = requests.request(method, f"{prefect.api_url}{path}", auth=prefect.auth, timeout=30, **kwargs)
    response.raise_for_status()
    return response.json()


@pytest.fixture(scope="module")
def client_env(prefect_api: PrefectServer, mlflow_server: MlflowServer, work_dir: Path) -> dict[str, str]:
    """What docs/deploy.md tells a user (and a worker machine) to export."""
    return (
        base_env()
        | prefect_api.client_env()
        | mlflow_server.client_env()
        | {
            "YOLO_MLOPS_HOME": str(work_dir / "yolo-mlops-home"),
            "YOLO_MLOPS_PROJECT_DIR": str(REPO),
            "PREFECT_LOGGING_LEVEL": "INFO",
        }
    )


def run_bootstrap(client_env: dict[str, str], machine: str = "ci-node", rc: int = 0) -> subprocess.CompletedProcess:
    """deploy/bootstrap.sh for a machine with 2 GPUs; asserts it exited with `rc`."""
    env = client_env | {
        "YOLO_MLOPS_GPU_COUNT": "2",
        "YOLO_MLOPS_IMAGE": "registry.example/yolo-mlops:ci",
        "YOLO_MLOPS_MACHINE": machine,
    }
    proc = subprocess.run(
        ["bash", str(REPO / "deploy/bootstrap.sh")], env=env, cwd=REPO, capture_output=True, text=True, timeout=300
    )
    output = f"{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    assert proc.returncode == rc, f"bootstrap.sh on {machine}: exit {proc.returncode}:\n{output}"
    return proc


@pytest.fixture(scope="module")
def bootstrapped(client_env: dict[str, str]) -> subprocess.CompletedProcess:
    return run_bootstrap(client_env)


def test_bootstrap_creates_pools_limits_and_deployments(bootstrapped, prefect_api: PrefectServer):
    docker_pool = api(prefect_api, "GET", "/work_pools/gpu-docker")
    assert docker_pool["type"] == "docker"
    variables = docker_pool["base_job_template"]["variables"]["properties"]
    assert variables["image"]["default"] == "registry.example/yolo-mlops:ci"
    kwargs = variables["container_create_kwargs"]["default"]
    assert kwargs["device_requests"][0]["capabilities"] == [["gpu"]]
    assert (
        docker_pool["base_job_template"]["job_configuration"]["container_create_kwargs"]
        == "{{ container_create_kwargs }}"
    )
    assert api(prefect_api, "GET", "/work_pools/gpu-process")["type"] == "process"

    for pool in ("gpu-process", "gpu-docker"):  # the machine's own work queue, for sweeps over the pool
        assert api(prefect_api, "GET", f"/work_pools/{pool}/queues/ci-node")["name"] == "ci-node"
    for name in ("gpu-ci-node-0", "gpu-ci-node-1"):  # per machine: GPU 0 of another machine is another slot
        limit = api(prefect_api, "GET", f"/v2/concurrency_limits/{name}")
        assert (limit["limit"], limit["active"]) == (1, True)

    deployments = {d["name"]: d for d in api(prefect_api, "POST", "/deployments/filter", json={})}
    assert {"profile", "profile-docker", "sweep", "bisect", "nightly-benchmark-ci-node"} <= set(deployments)
    # The pull step must reach the worker unresolved: each worker fills in its own project directory.
    assert deployments["profile"]["pull_steps"] == [
        {"prefect.deployments.steps.set_working_directory": {"directory": "{{ $YOLO_MLOPS_PROJECT_DIR }}"}}
    ]
    assert deployments["profile-docker"]["work_pool_name"] == "gpu-docker"
    assert deployments["profile-docker"]["job_variables"]["container_create_kwargs"]["shm_size"] == "16g"

    nightly = deployments["nightly-benchmark-ci-node"]  # one per machine, on the machine's own queue
    assert nightly["work_queue_name"] == "ci-node"
    assert nightly["job_variables"]["env"]["YOLO_MLOPS_MACHINE"] == "ci-node"
    assert nightly["parameters"]["suite"]["runs"][0]["run_kind"] == "benchmark"
    [schedule] = nightly["schedules"]
    assert schedule["schedule"]["cron"] == "30 2 * * *" and schedule["schedule"]["timezone"] == "UTC"
    assert schedule["active"] is True
    assert nightly["global_concurrency_limit"]["limit"] == 1
    assert nightly["concurrency_options"]["collision_strategy"] == "CANCEL_NEW"


def test_bootstrap_is_idempotent(bootstrapped, client_env: dict[str, str], prefect_api: PrefectServer):
    before = {d["name"]: d["id"] for d in api(prefect_api, "POST", "/deployments/filter", json={})}
    # someone widened a GPU limit by hand; bootstrap puts it back to one run per GPU
    requests.patch(
        f"{prefect_api.api_url}/v2/concurrency_limits/gpu-ci-node-0",
        json={"limit": 3},
        auth=prefect_api.auth,
        timeout=30,
    ).raise_for_status()
    assert api(prefect_api, "GET", "/v2/concurrency_limits/gpu-ci-node-0")["limit"] == 3
    run_bootstrap(client_env)  # again
    after = {d["name"]: d["id"] for d in api(prefect_api, "POST", "/deployments/filter", json={})}
    assert after == before  # updated in place, not duplicated
    limits = [c["name"] for c in api(prefect_api, "POST", "/v2/concurrency_limits/filter", json={})]
    assert sorted(n for n in limits if n.startswith("gpu-")) == ["gpu-ci-node-0", "gpu-ci-node-1"]
    assert api(prefect_api, "GET", "/v2/concurrency_limits/gpu-ci-node-0")["limit"] == 1
    # a second machine adds its own limits beside the first one's
    run_bootstrap(client_env, machine="node-b")
    limits = [c["name"] for c in api(prefect_api, "POST", "/v2/concurrency_limits/filter", json={})]
    assert sorted(n for n in limits if n.startswith("gpu-")) == [
        "gpu-ci-node-0",
        "gpu-ci-node-1",
        "gpu-node-b-0",
        "gpu-node-b-1",
    ]
    bad = run_bootstrap(client_env, machine="no/slash", rc=2)
    assert "cannot be part of a limit name" in bad.stderr


@pytest.fixture(scope="module")
def profiled_run(
    bootstrapped, client_env: dict[str, str], prefect_api: PrefectServer, mlflow_server: MlflowServer, work_dir: Path
) -> dict:
    """Trigger the `profile` deployment as a user would and let a process worker run it once."""
    started = prefect_cli(
        ["deployment", "run", "profile-training/profile", "--params", json.dumps({"spec": TINY_SPEC})], client_env
    )
    match = re.search(r"UUID:\s*([0-9a-f-]{36})", started.stdout)
    assert match, f"no flow run id in:\n{started.stdout}"
    flow_run_id = match.group(1)

    # A process worker as on a GPU machine; --run-once: take the queued run, execute it, exit.
    log = work_dir / "worker.log"
    worker = start(
        [
            str(VENV_BIN / "prefect"),
            "worker",
            "start",
            "--pool",
            "gpu-process",
            "--type",
            "process",
            "--run-once",
            "--name",
            "ci-worker",
        ],
        log,
        client_env,
        cwd=work_dir,
    )
    try:
        worker.wait(600)
    finally:
        stop(worker)  # also ends a flow-run process left behind by a timeout
    worker_log = log.read_text(errors="replace")

    deadline = time.monotonic() + 60
    while True:  # --run-once returns when its run ended; the final state may land a moment later
        flow_run = api(prefect_api, "GET", f"/flow_runs/{flow_run_id}")
        if flow_run["state_type"] in ("COMPLETED", "FAILED", "CRASHED", "CANCELLED") or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert worker.returncode == 0 and flow_run["state_type"] == "COMPLETED", (
        f"flow run ended {flow_run['state_type']}; worker exit {worker.returncode}\n{worker_log[-6000:]}"
    )
    return {"flow_run": flow_run, "worker_log": worker_log}


@pytest.fixture(scope="module")
def mlflow_run(profiled_run, mlflow_server: MlflowServer, monkeypatch_module):
    from mlflow import MlflowClient

    for key, value in mlflow_server.client_env().items():
        monkeypatch_module.setenv(key, value)
    client = MlflowClient(tracking_uri=mlflow_server.url)
    experiment = client.get_experiment_by_name(EXPERIMENT)
    assert experiment is not None, "the flow created no experiment on the tracking server"
    [run] = client.search_runs([experiment.experiment_id])
    return client, run


@pytest.fixture(scope="module")
def monkeypatch_module():
    with pytest.MonkeyPatch.context() as mp:
        yield mp


def _artifact_paths(client, run_id: str, path: str | None = None) -> list[str]:
    found: list[str] = []
    for item in client.list_artifacts(run_id, path):
        found += _artifact_paths(client, run_id, item.path) if item.is_dir else [item.path]
    return found


def test_profile_deployment_run_lands_in_mlflow(mlflow_run, mlflow_server: MlflowServer):
    client, run = mlflow_run
    assert run.info.status == "FINISHED"
    assert run.data.tags["yolo_mlops.run_kind"] == "profile"
    assert run.data.params["train.imgsz"] == "64"
    assert any(k.startswith("perf/") for k in run.data.metrics)

    paths = _artifact_paths(client, run.info.run_id)
    traces = [p for p in paths if p.startswith("profiler/") and p.endswith(".pt.trace.json.gz")]
    text_tables = [p for p in paths if p.startswith("profiler/") and p.endswith(".txt")]
    mlflow_tables = [p for p in paths if p.startswith("profiler/") and p.endswith(".json")]
    assert traces and text_tables and mlflow_tables and "env.json" in paths, paths
    for report in ("analysis/report.md", "analysis/report.html", "analysis/step_time_breakdown.png"):
        assert report in paths, paths

    # Artifacts went through the server's proxy into its --artifacts-destination, not to the client's disk.
    stored = {str(p.relative_to(mlflow_server.artifacts)) for p in mlflow_server.artifacts.rglob("*") if p.is_file()}
    assert any(s.endswith(traces[0]) for s in stored), sorted(stored)[:20]
    # ...and come back intact through the REST API: a gzipped Chrome trace with trace events.
    local = Path(client.download_artifacts(run.info.run_id, traces[0]))
    assert "traceEvents" in json.loads(gzip.decompress(local.read_bytes()))


def test_prefect_server_requires_credentials(prefect_api: PrefectServer):
    assert requests.get(f"{prefect_api.api_url}/work_pools/gpu-process", timeout=10).status_code == 401


def test_tracking_server_requires_credentials(mlflow_server: MlflowServer):
    search = f"{mlflow_server.url}/api/2.0/mlflow/experiments/search?max_results=1"
    assert requests.get(search, timeout=10).status_code == 401
    creds = (mlflow_server.username, mlflow_server.password)
    assert requests.get(search, auth=creds, timeout=10).status_code == 200
    # --allowed-hosts: the compose service name is accepted, an unknown Host header is refused.
    assert requests.get(search, auth=creds, headers={"Host": "mlflow:5000"}, timeout=10).status_code == 200
    assert requests.get(search, auth=creds, headers={"Host": "attacker.example"}, timeout=10).status_code == 403


def _chromium() -> str | None:
    # Debian's /usr/bin/chromium is a wrapper script; start the browser binary behind it directly.
    for candidate in ("/usr/lib/chromium/chromium", shutil.which("chromium")):
        if candidate and Path(candidate).exists():
            return candidate
    return None


def test_run_page_in_headless_chromium(mlflow_run, mlflow_server: MlflowServer, tmp_path: Path):
    """A person opening the run in the MLflow UI sees its report, its plot and its key_averages table.
    Screenshots of each view are kept in ci-output/."""
    from playwright.sync_api import expect, sync_playwright

    chromium = _chromium()
    if chromium is None:
        pytest.skip("Debian's chromium is not installed (.ci/run installs it, see deploy/ci-system-packages.txt)")
    client, run = mlflow_run
    # the link the project prints (queries.run_url), on the artifacts tab
    url = (
        f"{mlflow_server.url}/#/experiments/{run.info.experiment_id}/runs/{run.info.run_id}/artifacts"
        f"?{names.UI_TRAINING_VIEW_QUERY}"
    )
    CI_OUTPUT.mkdir(exist_ok=True)

    with sync_playwright() as playwright:
        # Never a downloaded browser: the system's chromium, with no network calls of its own.
        browser = playwright.chromium.launch_persistent_context(
            user_data_dir=str(tmp_path / "chromium-profile"),
            executable_path=chromium,
            headless=True,
            args=[
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
            ],
            http_credentials={"username": mlflow_server.username, "password": mlflow_server.password},
            viewport={"width": 1600, "height": 1000},
        )
        page = browser.new_page()
        view = "mlflow-run-page"
        try:
            page.goto(url, wait_until="domcontentloaded")
            analysis = page.get_by_text("analysis", exact=True).first
            expect(analysis).to_be_visible(timeout=60_000)  # the artifact tree, loaded through basic auth
            expect(page.get_by_text("env.json", exact=True).first).to_be_visible()
            # the model-training view (its sidebar has the model registry), not the GenAI "Evaluation runs"
            expect(page.get_by_text("Model registry", exact=True).first).to_be_visible()
            expect(page.get_by_text("Evaluation runs", exact=True)).to_have_count(0)
            analysis.click()

            view = "mlflow-run-report"  # the markdown report, which the viewer renders
            page.get_by_text("report.md", exact=True).first.click()
            expect(page.get_by_role("heading", name="Profiling report")).to_be_visible(timeout=30_000)
            expect(page.get_by_role("heading", name="Step time", exact=True)).to_be_visible()
            page.screenshot(path=str(CI_OUTPUT / f"{view}.png"))

            view = "mlflow-run-plot"  # the step-time plot, as an image the browser actually decoded
            page.get_by_text("step_time_breakdown.png", exact=True).first.click()
            plot = page.locator("img[alt='analysis/step_time_breakdown.png']").first  # src is a blob: URL
            expect(plot).to_be_visible(timeout=30_000)
            page.wait_for_function(
                "img => img.complete && img.naturalWidth > 100", arg=plot.element_handle(), timeout=30_000
            )
            page.screenshot(path=str(CI_OUTPUT / f"{view}.png"))

            view = "mlflow-run-key-averages"  # a key_averages table with its own header
            page.get_by_text("profiler", exact=True).first.click()
            page.get_by_text("key_averages_self_cpu.txt", exact=True).first.click()
            expect(page.get_by_text("Self CPU", exact=False).first).to_be_visible(timeout=30_000)
            page.screenshot(path=str(CI_OUTPUT / f"{view}.png"))
        except Exception:
            page.screenshot(path=str(CI_OUTPUT / f"{view}-FAILED.png"), full_page=True)
            (CI_OUTPUT / f"{view}-FAILED.html").write_text(page.content())
            raise
        finally:
            browser.close()
