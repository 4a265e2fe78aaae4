"""The runtime image, run: what the Dockerfile builds works as the image's non-root user, with no network.

    make image-test     # builds the image (deploy/build-image.sh), then runs this module against it

Runs only when YOLO_MLOPS_IMAGE_TEST names a built image: a cold build takes longer than the CI budget
allows next to the suite (docs/benchmarks.md, "Runtime image"). Containers run with `buildah run
--isolation chroot` where no Docker engine answers, else with `docker run`. Buildah's chroot isolation
shares the host's network namespace and refuses `--network none`, so each container command runs inside
`unshare --net` with only loopback up: no route and no DNS, as in `docker run --network none`.

The demo's data home is a host directory mounted at the same path inside, so the MLflow store's artifact
paths hold on both sides and the run is read back here with the host's MLflow.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

IMAGE = os.environ.get("YOLO_MLOPS_IMAGE_TEST", "")
APP_UID = 1000  # the Dockerfile's `USER 1000:1000`

# the tests that run the image; the build script's own checks below them need neither an image nor a builder
needs_image = [
    pytest.mark.slow,
    pytest.mark.integration,
    pytest.mark.skipif(
        not IMAGE, reason="YOLO_MLOPS_IMAGE_TEST not set: `make image-test` builds the image and runs these tests on it"
    ),
]


def image_test(test):
    for mark in needs_image:
        test = mark(test)
    return test


def _docker_answers() -> bool:
    return (
        shutil.which("docker") is not None and subprocess.run(["docker", "info"], capture_output=True).returncode == 0
    )


class Container:
    """One container of IMAGE; `run` executes a command in it offline, as the image's user."""

    def __init__(self, image: str):
        self.image = image
        self.docker = _docker_answers()
        self.name = ""
        if not self.docker:
            if shutil.which("buildah") is None:
                pytest.fail("neither a Docker engine nor buildah here: apt-get install -y buildah")
            if os.geteuid() != 0:
                pytest.fail("buildah run --isolation chroot needs root")
            self.name = f"yolo-mlops-image-test-{uuid.uuid4().hex[:8]}"
            subprocess.run(
                ["buildah", "from", "--pull-never", "--name", self.name, image],
                check=True,
                capture_output=True,
                text=True,
            )

    def argv(self, command: list[str], mounts: dict[Path, Path], env: dict[str, str]) -> list[str]:
        flags: list[str] = []
        for host, inside in mounts.items():
            flags += ["-v", f"{host}:{inside}"]
        for key, value in env.items():
            flags += ["-e", f"{key}={value}"]
        if self.docker:
            return ["docker", "run", "--rm", "--network", "none", "--shm-size", "1g", *flags, self.image, *command]
        # a fresh network namespace with only loopback up; buildah (and the container) run inside it
        inner = ["buildah", "run", "--isolation", "chroot", *flags, self.name, "--", *command]
        return ["unshare", "--net", "sh", "-c", 'ip link set lo up && exec "$@"', "sh", *inner]

    def run(
        self,
        command: list[str],
        *,
        mounts: dict[Path, Path] | None = None,
        env: dict[str, str] | None = None,
        timeout: float = 600,
    ) -> subprocess.CompletedProcess:
        return subprocess.run(
            self.argv(command, mounts or {}, env or {}), capture_output=True, text=True, timeout=timeout
        )

    def remove(self) -> None:
        if self.name:
            subprocess.run(["buildah", "rm", self.name], capture_output=True)


@pytest.fixture(scope="module")
def container() -> Iterator[Container]:
    box = Container(IMAGE)
    yield box
    box.remove()


def check(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 0, (
        f"exit {proc.returncode}\n--- stdout\n{proc.stdout[-4000:]}\n--- stderr\n{proc.stderr[-4000:]}"
    )
    return proc.stdout


@image_test
def test_runs_as_the_non_root_user_without_network(container: Container):
    out = check(
        container.run(
            [
                "python",
                "-c",
                """
import os, socket
print("uid", os.getuid(), "gid", os.getgid(), "home", os.environ["HOME"], "cwd", os.getcwd())
try:
    socket.getaddrinfo("pypi.org", 443)
    print("network yes")
except OSError:
    print("network no")
""",
            ]
        )
    )
    assert f"uid {APP_UID} gid {APP_UID} home /home/app cwd /opt/yolo-mlops" in out
    assert "network no" in out


@image_test
def test_build_host_files_were_mounted_not_copied(container: Container):
    """deploy/build-image.sh mounts the host's CA bundle and wheel folders into the build: no file of the image
    has the bundle's content, only empty mount points remain under /tmp/build-host, and no PIP_* setting of the
    build is in the image's environment."""
    bundle = Path(os.environ.get("PIP_CERT", "/etc/ssl/certs/ca-certificates.crt"))
    if not bundle.is_file():
        pytest.skip(f"no CA bundle at {bundle} to look for")
    digest = hashlib.sha256(bundle.read_bytes()).hexdigest()
    out = check(
        container.run(
            [
                "python",
                "-c",
                f"""
import hashlib, os, subprocess
same_size = subprocess.run(["find", "/", "-xdev", "-type", "f", "-size", "{bundle.stat().st_size}c"],
                           capture_output=True, text=True).stdout.split()
print("copies", [p for p in same_size if hashlib.sha256(open(p, "rb").read()).hexdigest() == "{digest}"])
print("non-empty", subprocess.run(["find", "/tmp/build-host", "-type", "f", "-size", "+0"],
                                  capture_output=True, text=True).stdout.split())
print("pip-env", sorted(k for k in os.environ if k in ("PIP_CERT", "PIP_FIND_LINKS", "PIP_EXTRA_INDEX_URL")))
""",
            ]
        )
    )
    assert "copies []" in out and "non-empty []" in out and "pip-env []" in out, out


@image_test
def test_help(container: Container):
    out = check(container.run(["yolo-mlops", "--help"]))
    for command in ("demo", "profile", "sweep", "trends"):
        assert command in out


@image_test
def test_ultralytics_finds_its_font_and_config_dir(container: Container):
    """The fonts and settings the build placed are where ultralytics looks, and the dir is the user's."""
    out = check(
        container.run(
            [
                "python",
                "-c",
                """
import os
from ultralytics.utils import SETTINGS, USER_CONFIG_DIR
from ultralytics.utils.checks import check_font
print("config", USER_CONFIG_DIR, os.access(USER_CONFIG_DIR, os.W_OK))
print("font", check_font("Arial.ttf"))  # downloads when missing: would fail offline
print("sync", SETTINGS["sync"], "mlflow", SETTINGS["mlflow"])
""",
            ]
        )
    )
    assert "config /home/app/.config/Ultralytics True" in out
    assert "font /home/app/.config/Ultralytics/Arial.ttf" in out
    assert "sync False mlflow False" in out


@image_test
def test_flow_entrypoints_load_from_the_working_directory(container: Container):
    """What a worker does with deploy/prefect.yaml's entrypoints after its pull step changes into the project dir."""
    out = check(
        container.run(
            [
                "python",
                "-c",
                """
import yaml
from prefect.flows import load_flow_from_entrypoint
for d in yaml.safe_load(open("deploy/prefect.yaml"))["deployments"]:
    flow = load_flow_from_entrypoint(d["entrypoint"])
    print("flow", d["entrypoint"], flow.name)
""",
            ]
        )
    )
    for entrypoint in (
        "flows/profile_training.py:profile_training",
        "flows/sweep.py:sweep",
        "flows/bisection.py:bisect",
        "flows/benchmark.py:benchmark",
    ):
        assert f"flow {entrypoint} " in out


@image_test
def test_bootstrap_and_process_worker_against_a_server_in_the_container(container: Container):
    """The compose stack's one-shot `bootstrap` and its worker's command, against `prefect server start` on
    loopback in the same container: pools, limits and deployments are created offline (prefect deploy loads
    every entrypoint), the gpu-process worker polls once and stops with status 0. The gpu-docker pool's
    worker runs beside a Docker engine with prefect-docker, not in this image: started here it says so."""
    script = r"""
set -u
export PREFECT_HOME=/tmp/prefect-home PREFECT_API_URL=http://127.0.0.1:4200/api PREFECT_SERVER_ANALYTICS_ENABLED=false
prefect server start --host 127.0.0.1 --port 4200 >/tmp/prefect-server.log 2>&1 &
server=$!
python - "$server" <<'PY' || { cat /tmp/prefect-server.log; exit 1; }
import sys, time, urllib.request
pid = int(sys.argv[1])
while True:  # until the server answers or its process is gone
    try:
        urllib.request.urlopen("http://127.0.0.1:4200/api/health", timeout=5)
        break
    except OSError:
        try:  # a child of the shell: gone or a zombie once it has exited
            exited = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0] == "Z"
        except FileNotFoundError:
            exited = True
        if exited:
            sys.exit("prefect server exited")
        time.sleep(0.5)
PY
YOLO_MLOPS_MACHINE=image-test YOLO_MLOPS_GPU_COUNT=1 bash deploy/bootstrap.sh
echo "bootstrap-rc=$?"
prefect deployment ls
prefect worker start --pool gpu-process --type process --name image-test --work-queue default --run-once
echo "process-worker-rc=$?"
prefect worker start --pool gpu-docker --name image-test-docker --run-once
echo "docker-worker-rc=$?"
kill "$server"
wait "$server"
echo "server-stopped"
"""
    started = time.monotonic()
    proc = container.run(["bash", "-c", script], timeout=900)
    out = proc.stdout + proc.stderr
    assert "bootstrap-rc=0" in out, out[-6000:]
    for name in (
        "profile-training/profile-docker",
        "sweep/sweep",
        "bisect/bisect",
        "benchmark/nightly-benchmark-image-test",
    ):
        assert name.split("/")[1] in out, (name, out[-6000:])
    assert "process-worker-rc=0" in out and "Worker 'image-test' started" in out, out[-6000:]
    # the docker worker needs the prefect-docker package (and a Docker engine), which this image does not carry
    assert re.search(r"docker-worker-rc=[1-9]", out) and "Unable to start worker" in out, out[-6000:]
    assert "server-stopped" in out, out[-6000:]
    print(f"bootstrap + workers in the container: {time.monotonic() - started:.1f} s")


@image_test
def test_demo_offline_writes_a_run_readable_outside(container: Container, tmp_path: Path):
    home = tmp_path / "home"
    home.mkdir()
    os.chown(home, APP_UID, APP_UID)  # the image's user writes here; same uid on both sides (no user namespace)
    tmp_path.chmod(0o755)
    started = time.monotonic()
    out = check(
        container.run(["yolo-mlops", "demo"], mounts={home: home}, env={"YOLO_MLOPS_HOME": str(home)}, timeout=1200)
    )
    wall = time.monotonic() - started
    print(f"demo in the image: {wall:.1f} s wall")
    run_id = re.search(r"MLflow run ([0-9a-f]{32})", out)
    assert run_id, out[-4000:]

    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{home / 'mlflow.db'}")
    run = client.get_run(run_id.group(1))
    assert run.info.status == "FINISHED"
    assert run.data.metrics["perf/step_time_ms_p50"] > 0
    assert run.data.tags["yolo_mlops.nvml_backend"] == "none"  # no GPU in the container
    top = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert {"profiler", "analysis"} <= top, top
    report = Path(client.download_artifacts(run.info.run_id, "analysis/report.html", str(tmp_path)))
    assert report.stat().st_size > 0


# Build-context files: what .dockerignore lets in, plus the Dockerfile and the build script.
CONTEXT = [
    "pyproject.toml",
    "requirements/lock.txt",
    "README.md",
    "yolo_mlops",
    "flows",
    "deploy/prefect.yaml",
    "deploy/bootstrap.sh",
    "deploy/work-pools",
    "Dockerfile",
    ".dockerignore",
    "deploy/build-image.sh",
]
# The steps a code change may rebuild: the build stage's copy of the code and its wheel, then the image's last layers.
CODE_STEPS = (
    "COPY yolo_mlops",
    "COPY flows ./flows",
    "RUN pip wheel",
    "COPY --from=build /wheels",
    "RUN pip install --no-cache-dir --no-deps",
    "USER 1000:1000",
    'RUN python -c "from yolo_mlops',
    "CMD [",
)


@image_test
def test_a_code_change_rebuilds_only_the_code_layers(tmp_path: Path):
    """A copy of the build context with one line added to the package, built on the cache `make image` left:
    the dependency layer comes from the cache, only the code's steps run again."""
    if _docker_answers():
        pytest.skip("reads buildah's build log (`Using cache`); docker's says CACHED")
    repo = Path(__file__).resolve().parents[2]
    context = tmp_path / "context"
    for name in CONTEXT:
        source, target = repo / name, context / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_dir():
            shutil.copytree(source, target, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(source, target)
    init = context / "yolo_mlops" / "__init__.py"
    init.write_text(init.read_text() + "# one more line\n")
    tag = f"localhost/yolo-mlops-rebuild-test:{uuid.uuid4().hex[:8]}"
    env = {**os.environ, "IMAGE": tag, "LOG_DIR": str(tmp_path / "log")}
    started = time.monotonic()
    proc = subprocess.run(
        ["bash", str(context / "deploy" / "build-image.sh")], capture_output=True, text=True, env=env, timeout=1800
    )
    print(f"rebuild after a one-line change: {time.monotonic() - started:.1f} s")
    try:
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        steps: list[tuple[str, bool]] = []  # (instruction, came from the cache)
        for line in proc.stdout.splitlines():
            match = re.search(r"STEP \d+/\d+: (.*)", line)
            if match:
                steps.append((match.group(1), False))
            elif line.startswith("--> Using cache") and steps:
                steps[-1] = (steps[-1][0], True)
        rebuilt = [step for step, cached in steps if not cached and not step.startswith("FROM ")]
        assert rebuilt and all(step.startswith(CODE_STEPS) for step in rebuilt), rebuilt
        # the dependency layer, as the Dockerfile writes it, came from the cache
        dependencies = next(
            line.strip()
            for line in (repo / "Dockerfile").read_text().splitlines()
            if "-r /tmp/requirements.txt" in line
        )
        assert (dependencies, True) in steps, steps
    finally:
        subprocess.run(["buildah", "rmi", tag], capture_output=True)


# ---------------------------------------------------------------- deploy/build-image.sh, no builder needed

BUILD_SCRIPT = Path(__file__).resolve().parents[2] / "deploy" / "build-image.sh"


def test_build_script_passes_shellcheck():
    from .conftest import VENV_BIN

    proc = subprocess.run([str(VENV_BIN / "shellcheck"), str(BUILD_SCRIPT)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def _which(name: str) -> str:
    path = shutil.which(name)
    assert path is not None, f"{name} is not on PATH"
    return path


def _tool_dir(tmp_path: Path, fake: dict[str, str]) -> dict[str, str]:
    """A PATH with the few real tools the script uses and the given fake programs, nothing else."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("bash", "dirname", "date", "mkdir", "cat", "grep", "tail", "tee", "nice", "mktemp", "rm", "sort"):
        (bin_dir / name).symlink_to(_which(name))
    for name, body in fake.items():
        (bin_dir / name).write_text("#!" + _which("bash") + "\n" + body)
        (bin_dir / name).chmod(0o755)
    return {"PATH": str(bin_dir), "HOME": str(tmp_path), "LOG_DIR": str(tmp_path / "log")}


def test_without_docker_or_buildah_says_what_to_install(tmp_path: Path):
    proc = subprocess.run(
        [_which("bash"), str(BUILD_SCRIPT)], capture_output=True, text=True, env=_tool_dir(tmp_path, {})
    )
    assert proc.returncode != 0
    assert proc.stderr.strip().splitlines() == [
        "deploy/build-image.sh: neither docker nor buildah found: install Docker Engine, or apt-get install -y "
        "buildah mmdebstrap"
    ], proc.stderr


def test_a_failed_build_names_its_step(tmp_path: Path):
    """The builder's output is a fake here; the script's report of it is what is checked."""
    fake_buildah = """case $1 in
  inspect) exit 0 ;;                 # every image "exists": no pull, no base build
  bud) echo '[3/3] STEP 6/16: COPY --from=requirements /requirements.txt /tmp/requirements.txt'
       echo '[3/3] STEP 7/16: RUN pip install --no-cache-dir -r /tmp/requirements.txt'
       echo 'ERROR: No matching distribution found for ultralytics'
       exit 1 ;;
esac
"""
    env = _tool_dir(tmp_path, {"buildah": fake_buildah}) | {"HOST_PIP": "0"}
    proc = subprocess.run([_which("bash"), str(BUILD_SCRIPT)], capture_output=True, text=True, env=env)
    assert proc.returncode != 0
    last = proc.stderr.strip().splitlines()[-1]
    assert "build failed" in last and "at [3/3] STEP 7/16: RUN pip install" in last, proc.stderr
