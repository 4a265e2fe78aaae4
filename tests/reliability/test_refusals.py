"""Bad input and servers that do not answer, tried as a user would: each command in its own process, with its own
data home and SQLite store. A refusal is one line and exit code 2, with no traceback and nothing left behind (the
store holds exactly the runs it held before, none RUNNING); a warning leaves the command's work done.

The cases are data (`REFUSALS`, `SERVER_REFUSALS`; tests/refusals.py): docs/reliability.md's table of every bad
input the suite tries is rendered from them. Every server case has a server that answers nothing: a socket that
accepts connections (the kernel completes them: it listens) and never reads, or a plain HTTP server that is not
the server the command expects. The commands' bounded checks wait `YOLO_MLOPS_SERVER_TIMEOUT_S` = 1 s here.
"""

from __future__ import annotations

import gzip
import json
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from http.server import HTTPServer, SimpleHTTPRequestHandler
from pathlib import Path

import pytest
from reliability_cli import CLI, TINY, Finished, cli_env, mlflow_runs, run_folders

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from refusals import REPO, Refusal  # noqa: E402

pytestmark = pytest.mark.timeout(900)

SERVER_TIMEOUT_S = "1"  # the bound of every check here: the lines say "within 1 s"
CASE_TIMEOUT_S = 300  # a command's whole run, imports included, on a loaded 2-core machine
PARALLEL = 3  # commands at once: each imports torch or MLflow, which is most of its time


# ---------------------------------------------------------------- what the cases are made of


def _trace(path: Path, step_names: list[str], dur: float = 10_000.0, meta: dict | None = None) -> Path:
    """A Kineto trace of one process: a span per step name, each holding an operator, all of duration `dur`."""
    events = []
    for i, name in enumerate(step_names):
        start = 1_000_000.0 + i * 20_000.0
        events.append({"ph": "X", "cat": "user_annotation", "name": name, "pid": 1, "tid": 1, "ts": start, "dur": dur})
        events.append(
            {"ph": "X", "cat": "cpu_op", "name": "aten::conv2d", "pid": 1, "tid": 1, "ts": start + 100, "dur": dur / 2}
        )
    path.write_text(json.dumps({**(meta or {}), "traceEvents": events}))
    return path


def _store_uri(folder: Path) -> str:
    return f"sqlite:///{folder / 'mlflow.db'}"  # the store cli_env gives the case's command


def _client(folder: Path):
    from mlflow.tracking import MlflowClient

    return MlflowClient(tracking_uri=_store_uri(folder))


def _experiment(folder: Path, name: str, artifacts: str | None = None) -> str:
    return _client(folder).create_experiment(name, artifact_location=artifacts or (folder / "artifacts").as_uri())


def _run(folder: Path, experiment_id: str, status: str, params: dict | None = None) -> str:
    """A run of a series, ended with `status`; `params` logged."""
    client = _client(folder)
    run_id = client.create_run(experiment_id, tags={"yolo_mlops.series": "refusals-series"}).info.run_id
    for key, value in (params or {}).items():
        client.log_param(run_id, key, value)
    client.set_terminated(run_id, status)
    return run_id


def _run_folder(folder: Path, tracking: dict, record: dict | None = None) -> Path:
    """A run folder as `profile` leaves it: tracking.json and, unless None, run_record.json."""
    run = folder / "run"
    (run / "analysis").mkdir(parents=True)
    (run / "analysis" / "step_times.csv").write_text("step,step_ms,data_wait_ms\n0,12.5,1.0\n1,11.0,0.5\n")
    (run / "tracking.json").write_text(json.dumps(tracking))
    if record is not None:
        (run / "run_record.json").write_text(json.dumps(record))
    return run


def _tracking(folder: Path, **changes) -> dict:
    base = {
        "tracking_uri": _store_uri(folder),
        "experiment": "uploaded-later",
        "run_id": None,
        "run_name": "late",
        "tags": {"yolo_mlops.run_kind": "profile"},
        "params": {"train.imgsz": "64"},
    }
    return {k: v for k, v in {**base, **changes}.items() if v is not _ABSENT}


_ABSENT = object()
_FINISHED = {
    "status": "FINISHED",
    "reason": "",
    "metrics": {"perf/steps_total": 2.0},
    "histories": {"perf/step_time_ms": [[0, 12.5], [1, 11.0]]},
    "tags": {},
    "params": {},
    "timestamp_ms": 1_700_000_000_000,
}


def _git_repo(folder: Path) -> Path:
    """A repository of two commits, clean: what bisect checks before it reads the store."""
    repo = folder / "repo"
    repo.mkdir()
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.com"]
    subprocess.run([*git, "init", "-q"], check=True)
    for n in (1, 2):
        (repo / "code.py").write_text(f"SPEED = {n}\n")
        subprocess.run([*git, "add", "code.py"], check=True)
        subprocess.run([*git, "commit", "-q", "-m", f"commit {n}"], check=True)
    return repo


def _bisect_run(folder: Path, status: str) -> dict:
    repo = _git_repo(folder)
    experiment = _experiment(folder, "benchmark")
    run_id = _run(folder, experiment, status)
    spec = "device: cpu\nimgsz: 64\nbatch: 4\nworkers: 0\nmax_steps: 4\nprofiler: {wait: 0, warmup: 1, active: 1}\n"
    _client(folder).log_text(run_id, spec, "run_spec.yaml")
    return {"REPO": str(repo), "RUN": run_id}


# ---------------------------------------------------------------- bad input


def _upload_params_a_string(folder: Path, servers: dict) -> dict:
    tracking = _tracking(folder, run_id="0" * 32, params="train.imgsz=64")
    return {"DIR": str(_run_folder(folder, tracking, _FINISHED))}


def _upload_without_run_id_and_experiment(folder: Path, servers: dict) -> dict:
    tracking = _tracking(folder, run_id=_ABSENT, experiment=_ABSENT)
    return {"DIR": str(_run_folder(folder, tracking, _FINISHED))}


def _upload_truncated_trace_no_tables(folder: Path, servers: dict) -> dict:
    run = _run_folder(folder, _tracking(folder), _FINISHED)
    trace = _trace(folder / "t.json", ["ProfilerStep#1", "ProfilerStep#2"])
    packed = gzip.compress(trace.read_bytes())
    (run / "profiler").mkdir()
    (run / "profiler" / "host_1.pt.trace.json.gz").write_bytes(packed[: len(packed) // 2])
    return {"DIR": str(run)}


def _negative_durations(folder: Path, servers: dict) -> dict:
    return {"TRACE": str(_trace(folder / "t.json", ["ProfilerStep#1", "ProfilerStep#2"], dur=-5.0))}


def _two_unrelated_traces(folder: Path, servers: dict) -> dict:
    traces = folder / "traces"
    traces.mkdir()
    rank = {"distributedInfo": {"backend": "gloo", "rank": 0, "world_size": 2}}
    _trace(traces / "ddp_rank0.json", ["ProfilerStep#1", "ProfilerStep#2"], meta=rank)
    _trace(traces / "single.json", ["ProfilerStep#1", "ProfilerStep#2"], dur=50_000.0)
    return {"DIR": str(traces)}


def _malformed_step_ids(folder: Path, servers: dict) -> dict:
    return {"TRACE": str(_trace(folder / "t.json", ["ProfilerStep#abc", "ProfilerStep#def"]))}


def _a_trace(folder: Path, servers: dict) -> dict:
    return {"TRACE": str(_trace(folder / "t.json", ["ProfilerStep#1", "ProfilerStep#2"]))}


def _two_traces(folder: Path, servers: dict) -> dict:
    a = _trace(folder / "a.json", ["ProfilerStep#1", "ProfilerStep#2"])
    b = _trace(folder / "b.json", ["ProfilerStep#1", "ProfilerStep#2"], dur=12_000.0)
    return {"A": str(a), "B": str(b)}


def _single_and_ddp_runs(folder: Path, servers: dict) -> dict:
    experiment = _experiment(folder, "compared")
    single = _run(folder, experiment, "FINISHED")
    ddp = _run(folder, experiment, "FINISHED", {"ddp.world_size": "2"})
    return {"RUN_SINGLE": single, "RUN_DDP": ddp}


def _finished_and_failed_runs(folder: Path, servers: dict) -> dict:
    experiment = _experiment(folder, "compared")
    return {"RUN": _run(folder, experiment, "FINISHED"), "RUN_FAILED": _run(folder, experiment, "FAILED")}


def _plot_file(folder: Path, servers: dict) -> dict:
    return {"OUT": str(folder / "out.txt")}


def _config_folder(folder: Path, servers: dict) -> dict:
    (folder / "configs").mkdir()
    return {"DIR": str(folder / "configs")}


def _config_with_a_typo(folder: Path, servers: dict) -> dict:
    (folder / "run.yaml").write_text("device: cpu\nimgsz: 64\ntrain_args: {workerz: 3}\n")
    return {"CONFIG": str(folder / "run.yaml")}


def _failed_workload_run(folder: Path, servers: dict) -> dict:
    return _bisect_run(folder, "FAILED")


REFUSALS = [
    Refusal(
        "upload-params-not-a-mapping",
        "upload DIR (its tracking.json: params a string, run_id one the store lacks)",
        ("{DIR}/tracking.json is damaged: params is str, not a mapping of names to values; nothing was sent",),
        ("upload", "{DIR}"),
        kept="the folder as it was; no MLflow run (was: a run left RUNNING at each try)",
        setup=_upload_params_a_string,
    ),
    Refusal(
        "upload-missing-fields",
        "upload DIR (its tracking.json without run_id and experiment)",
        ("{DIR}/tracking.json lacks experiment, run_id: not a run folder's record, or damaged",),
        ("upload", "{DIR}"),
        kept="the folder as it was; no MLflow run",
        setup=_upload_without_run_id_and_experiment,
    ),
    Refusal(
        "upload-truncated-trace-no-tables",
        "upload DIR (a finished run's folder: its trace truncated, no tables)",
        (
            "yolo-mlops: warning: {DIR}: trace profiler/host_1.pt.trace.json.gz is unreadable (EOFError: ",
            "yolo-mlops: warning: {DIR}: no key_averages table (tables/): the run will not have it",
            "uploaded to MLflow run ",
        ),
        ("upload", "{DIR}"),
        kept="the run FINISHED with what the folder holds (the trace sent as it is)",
        setup=_upload_truncated_trace_no_tables,
        code=0,
    ),
    Refusal(
        "analyze-negative-durations",
        "analyze TRACE (every event with a negative duration)",
        ("{TRACE}: no event left to analyze (t.json: 4 event(s) with a negative duration left out",),
        ("analyze", "{TRACE}"),
        kept="nothing (was: exit 0, 0 events, no finding)",
        setup=_negative_durations,
    ),
    Refusal(
        "analyze-traces-of-two-jobs",
        "analyze DIR (a DDP rank's trace beside an unrelated single-process trace)",
        (
            "{DIR}: the traces are not of one job: ddp_rank0.json (rank 0 of 2, gloo), single.json (no process "
            "group: a single-process trace); analyze them one at a time",
        ),
        ("analyze", "{DIR}"),
        kept="nothing (was: read as one 2-rank job)",
        setup=_two_unrelated_traces,
    ),
    Refusal(
        "analyze-malformed-step-ids",
        "analyze TRACE (steps named ProfilerStep#abc)",
        ("{TRACE}: malformed step ids: 'ProfilerStep#abc', 'ProfilerStep#def'",),
        ("analyze", "{TRACE}"),
        kept="nothing (was: steps: none)",
        setup=_malformed_step_ids,
    ),
    Refusal(
        "analyze-peak-above-device-memory",
        "analyze TRACE --peak-memory-gib 99 --gpu-memory-gib 1",
        ("--peak-memory-gib 99 is more than --gpu-memory-gib 1",),
        ("analyze", "{TRACE}", "--peak-memory-gib", "99", "--gpu-memory-gib", "1"),
        kept="nothing (was: 9900% of the device)",
        setup=_a_trace,
    ),
    Refusal(
        "compare-rank-of-a-single-process-run",
        "compare RUN_SINGLE RUN_DDP --rank 1",
        ("run {RUN_SINGLE} has no rank 1: it is a single-process run",),
        ("compare", "{RUN_SINGLE}", "{RUN_DDP}", "--rank", "1"),
        kept="the store's runs as they were; no diff logged",
        setup=_single_and_ddp_runs,
    ),
    Refusal(
        "compare-failed-run",
        "compare RUN RUN_FAILED",
        ("run {RUN_FAILED} ended FAILED before its profiler window closed (no key_averages tables)",),
        ("compare", "{RUN}", "{RUN_FAILED}"),
        kept="the store's runs as they were; no diff logged",
        setup=_finished_and_failed_runs,
    ),
    Refusal(
        "compare-traces-rank",
        "compare a.json b.json --rank 5 (single-rank traces)",
        ("--rank 5: {A} has no rank 5 (rank(s) it holds: 0)",),
        ("compare", "{A}", "{B}", "--rank", "5"),
        kept="nothing (was: --rank ignored)",
        setup=_two_traces,
    ),
    Refusal(
        "fleet-alpha-and-max-pvalue",
        "fleet --max-pvalue 0.01 --alpha 0.05",
        ("--alpha 0.05 and --max-pvalue 0.01 are one setting given two values: give one",),
        ("fleet", "--max-pvalue", "0.01", "--alpha", "0.05"),
        kept="nothing (was: --alpha won)",
    ),
    Refusal(
        "profile-nvml-devices-on-cpu",
        "profile --device cpu --nvml-devices 0,1",
        ("nvml devices 0,1 (--nvml-devices) are GPUs to sample, but the run trains on the CPU",),
        ("profile", *TINY, "--nvml-devices", "0,1"),
    ),
    Refusal(
        "trends-plot-format",
        "trends --series KEY --plot out.txt",
        ("--plot {OUT}: format 'txt' is not a figure format; use .png",),
        ("trends", "--series", "refusals-series", "--plot", "{OUT}"),
        kept="nothing, before any history is read (was: the whole analysis, then ValueError, exit 1)",
        setup=_plot_file,
    ),
    Refusal(
        "sweep-ddp-variants-single-process",
        "sweep --variants ddp_no_sync_accumulate --device cpu (no --ranks)",
        (
            "ddp_no_sync_accumulate: DistributedDataParallel switches, and the base is a single process: the sweep "
            "would measure only the baseline; give the base ranks (--ranks 2 on CPU, several GPUs in --device)",
        ),
        ("sweep", "--variants", "ddp_no_sync_accumulate", "--repeats", "1", *TINY),
        kept="nothing: no MLflow run, no run folder (was: the variant skipped, the baseline trained, exit 0)",
    ),
    Refusal(
        "profile-config-is-a-folder",
        "profile --config DIR (a folder)",
        ("config file {DIR} is a directory: give the run YAML file inside it",),
        ("profile", "--config", "{DIR}"),
        setup=_config_folder,
    ),
    Refusal(
        "profile-train-args-typo",
        "profile --config run.yaml (train_args: {workerz: 3})",
        ("train_args: 'workerz' (did you mean 'workers'?) is not an ultralytics train argument",),
        ("profile", "--config", "{CONFIG}"),
        kept="nothing (was: a FAILED run once training started)",
        setup=_config_with_a_typo,
    ),
    Refusal(
        "profile-one-gpu-twice",
        "profile --device 0,cuda:0",
        ("device '0,cuda:0' names a device twice: one rank per device",),
        ("profile", "--device", "0,cuda:0"),
    ),
    Refusal(
        "bisect-run-that-failed",
        "bisect --good HEAD~1 --bad HEAD --run RUN_FAILED",
        ("--run {RUN}: the run is FAILED, not FINISHED; give a run whose workload trained to the end",),
        ("bisect", "--repo", "{REPO}", "--good", "HEAD~1", "--bad", "HEAD", "--run", "{RUN}"),
        kept="the store's runs as they were (was: a parent and a child run, failed 17 s later)",
        setup=_failed_workload_run,
    ),
    Refusal(
        "build-image-help",
        "deploy/build-image.sh --help",
        ("Usage: deploy/build-image.sh [-h|--help]", "IMAGE           tag to build"),
        ("--help",),
        kept="nothing built (was: a full build)",
        program="deploy/build-image.sh",
        code=0,
    ),
    Refusal(
        "build-image-unknown-argument",
        "deploy/build-image.sh --tag x",
        ("deploy/build-image.sh: unknown argument '--tag': the script takes no arguments",),
        ("--tag", "x"),
        kept="nothing built",
        program="deploy/build-image.sh",
    ),
    Refusal(
        "build-image-bad-tag",
        "IMAGE='Bad Tag!!' deploy/build-image.sh",
        ("deploy/build-image.sh: invalid image tag IMAGE='Bad Tag!!': use [registry[:port]/]name[:tag]",),
        kept="nothing built",
        setup=lambda folder, servers: {"env": {"IMAGE": "Bad Tag!!"}},
        program="deploy/build-image.sh",
    ),
]


# ---------------------------------------------------------------- servers that do not answer


def _silent_mlflow(folder: Path, servers: dict) -> dict:
    return {"env": {"MLFLOW_TRACKING_URI": servers["SILENT"]}}


def _silent_prefect(folder: Path, servers: dict) -> dict:
    return {"env": {"PREFECT_API_URL": servers["SILENT"] + "/api"}}


def _plain_http_prefect(folder: Path, servers: dict) -> dict:
    return {"env": {"PREFECT_API_URL": servers["PLAIN"] + "/api"}}


def _silent_artifacts(folder: Path, servers: dict) -> dict:
    _experiment(folder, "hang", servers["SILENT"] + "/api/2.0/mlflow-artifacts/artifacts/hang")
    return {}


def _runs_with_silent_artifacts(folder: Path, servers: dict) -> dict:
    experiment = _experiment(folder, "hang", servers["SILENT"] + "/api/2.0/mlflow-artifacts/artifacts/hang")
    return {"RUN_A": _run(folder, experiment, "FINISHED"), "RUN_B": _run(folder, experiment, "FINISHED")}


def _upload_to_silent_mlflow(folder: Path, servers: dict) -> dict:
    return {"DIR": str(_run_folder(folder, _tracking(folder, tracking_uri=servers["SILENT"]), _FINISHED))}


def _upload_to_silent_artifacts(folder: Path, servers: dict) -> dict:
    _experiment(folder, "hang", servers["SILENT"] + "/api/2.0/mlflow-artifacts/artifacts/hang")
    return {"DIR": str(_run_folder(folder, _tracking(folder, experiment="hang"), _FINISHED))}


def _bisect_silent_mlflow(folder: Path, servers: dict) -> dict:
    return {"REPO": str(_git_repo(folder)), "env": {"MLFLOW_TRACKING_URI": servers["SILENT"]}}


def _bisect_silent_prefect(folder: Path, servers: dict) -> dict:
    return {**_bisect_run(folder, "FINISHED"), "env": {"PREFECT_API_URL": servers["SILENT"] + "/api"}}


_NOTHING = "connected, but nothing answered within 1 s"
_MLFLOW_SILENT = f"MLflow tracking server {{SILENT}} is unreachable: {_NOTHING}"
_PREFECT_SILENT = f"no Prefect server answers at {{SILENT}}/api ({_NOTHING})"
_ARTIFACTS_SILENT = "artifact store {SILENT}/api/2.0/mlflow-artifacts/artifacts?path=hang"
SWEEP = ("sweep", "--variants", "fp32", "--repeats", "2", *TINY)
BISECT = ("bisect", "--repo", "{REPO}", "--good", "HEAD~1", "--bad", "HEAD", "--run")

SERVER_REFUSALS = [
    Refusal(
        "server-profile-mlflow",
        "profile, MLFLOW_TRACKING_URI silent",
        (_MLFLOW_SILENT,),
        ("profile", *TINY),
        setup=_silent_mlflow,
    ),
    Refusal(
        "server-profile-prefect",
        "profile, PREFECT_API_URL silent",
        (_PREFECT_SILENT,),
        ("profile", *TINY),
        setup=_silent_prefect,
    ),
    Refusal(
        "server-profile-artifact-store",
        "profile --experiment E, E's artifact store silent",
        (f"{_ARTIFACTS_SILENT} (artifacts of experiment 'hang') is unreachable: {_NOTHING}",),
        ("profile", *TINY, "--experiment", "hang"),
        setup=_silent_artifacts,
    ),
    Refusal(
        "server-demo-mlflow",
        "demo, MLFLOW_TRACKING_URI silent",
        (_MLFLOW_SILENT,),
        ("demo", "--device", "cpu"),
        setup=_silent_mlflow,
    ),
    Refusal("server-sweep-prefect", "sweep, PREFECT_API_URL silent", (_PREFECT_SILENT,), SWEEP, setup=_silent_prefect),
    Refusal(
        "server-sweep-pool-prefect",
        "sweep --pool gpu-process, PREFECT_API_URL silent",
        ("--pool gpu-process: " + _PREFECT_SILENT,),
        (*SWEEP, "--pool", "gpu-process"),
        kept="nothing (was: no output for 300 s)",
        setup=_silent_prefect,
    ),
    Refusal(
        "server-sweep-pool-not-prefect",
        "sweep --pool gpu-process, PREFECT_API_URL a plain HTTP server",
        ("--pool gpu-process: no Prefect API at {PLAIN}/api: GET /health answered HTTP 404",),
        (*SWEEP, "--pool", "gpu-process"),
        kept="nothing (was: work pool 'gpu-process' does not exist)",
        setup=_plain_http_prefect,
    ),
    Refusal(
        "server-optimize-mlflow",
        "optimize, MLFLOW_TRACKING_URI silent",
        (_MLFLOW_SILENT,),
        ("optimize", *TINY),
        setup=_silent_mlflow,
    ),
    Refusal(
        "server-trends-mlflow",
        "trends, MLFLOW_TRACKING_URI silent",
        (_MLFLOW_SILENT,),
        ("trends",),
        setup=_silent_mlflow,
    ),
    Refusal(
        "server-fleet-mlflow", "fleet, MLFLOW_TRACKING_URI silent", (_MLFLOW_SILENT,), ("fleet",), setup=_silent_mlflow
    ),
    Refusal(
        "server-compare-mlflow",
        "compare RUN_A RUN_B, MLFLOW_TRACKING_URI silent",
        (_MLFLOW_SILENT,),
        ("compare", "0123abcd", "4567cdef"),
        setup=_silent_mlflow,
    ),
    Refusal(
        "server-compare-artifact-store",
        "compare RUN_A RUN_B, their artifact store silent",
        (f"{_ARTIFACTS_SILENT}/{{RUN_A}}/artifacts (artifacts of run {{RUN_A}}) is unreachable: {_NOTHING}",),
        ("compare", "{RUN_A}", "{RUN_B}"),
        kept="the store's runs as they were; no diff logged",
        setup=_runs_with_silent_artifacts,
    ),
    Refusal(
        "server-upload-mlflow",
        "upload DIR, its tracking server silent",
        (f"MLflow tracking server {{SILENT}} is unreachable ({_NOTHING}); {{DIR}} stays pending",),
        ("upload", "{DIR}"),
        kept="the folder as it was",
        setup=_upload_to_silent_mlflow,
    ),
    Refusal(
        "server-upload-artifact-store",
        "upload DIR, its experiment's artifact store silent",
        (f"{_ARTIFACTS_SILENT} (artifacts of experiment 'hang') is unreachable: {_NOTHING}",),
        ("upload", "{DIR}"),
        kept="the folder as it was; no MLflow run",
        setup=_upload_to_silent_artifacts,
    ),
    Refusal(
        "server-bisect-mlflow",
        "bisect --run RUN, MLFLOW_TRACKING_URI silent",
        (_MLFLOW_SILENT,),
        (*BISECT, "0123abcd"),
        setup=_bisect_silent_mlflow,
    ),
    Refusal(
        "server-bisect-prefect",
        "bisect --run RUN, PREFECT_API_URL silent",
        (_PREFECT_SILENT,),
        (*BISECT, "{RUN}"),
        kept="the store's runs as they were: no bisection run",
        setup=_bisect_silent_prefect,
    ),
]


# ---------------------------------------------------------------- running the cases


@dataclass(frozen=True)
class Outcome:
    refusal: Refusal
    values: dict[str, str]
    env: dict[str, str]
    home: Path
    before: list[tuple[str, str]]  # the store's (run id, status) before the command
    done: Finished
    seconds: float

    def fill(self, text: str) -> str:
        return text.format(**self.values)


def _silent_socket() -> socket.socket:
    """Accepts connections (the kernel completes them from its backlog) and never reads or answers."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(256)
    return sock


def _start(refusal: Refusal, folder: Path, servers: dict[str, str]) -> Outcome:
    home = folder / "home"
    made = dict(refusal.setup(folder, servers)) if refusal.setup else {}
    env = {**cli_env(folder, home), "YOLO_MLOPS_SERVER_TIMEOUT_S": SERVER_TIMEOUT_S, **made.pop("env", {})}
    values = {**servers, **made}
    argv = [a.format(**values) for a in refusal.argv]
    command = CLI if refusal.program == "yolo-mlops" else ["bash", str(REPO / refusal.program)]
    before = mlflow_runs(env) if env["MLFLOW_TRACKING_URI"].startswith("sqlite:") else []
    started = time.monotonic()
    proc = subprocess.run([*command, *argv], env=env, capture_output=True, text=True, timeout=CASE_TIMEOUT_S)
    seconds = time.monotonic() - started
    return Outcome(refusal, values, env, home, before, Finished(proc.returncode, proc.stdout, proc.stderr), seconds)


def _run_all(refusals: list[Refusal], tmp_path_factory) -> dict[str, Outcome]:
    silent = _silent_socket()
    site = tmp_path_factory.mktemp("plain-http")
    plain = HTTPServer(("127.0.0.1", 0), lambda *a: SimpleHTTPRequestHandler(*a, directory=str(site)))
    threading.Thread(target=plain.serve_forever, daemon=True).start()
    servers = {
        "SILENT": f"http://127.0.0.1:{silent.getsockname()[1]}",
        "PLAIN": f"http://127.0.0.1:{plain.server_port}",
    }
    try:
        with ThreadPoolExecutor(PARALLEL) as pool:
            futures = {r.case: pool.submit(_start, r, tmp_path_factory.mktemp(r.case), servers) for r in refusals}
            return {case: future.result() for case, future in futures.items()}
    finally:
        plain.shutdown()
        plain.server_close()
        silent.close()


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory) -> dict[str, Outcome]:
    """Every case of this module, run at once (PARALLEL at a time) and awaited."""
    return _run_all([*REFUSALS, *SERVER_REFUSALS], tmp_path_factory)


def _check(outcome: Outcome) -> None:
    refusal, done = outcome.refusal, outcome.done
    shown = f"exit {done.code} after {outcome.seconds:.0f} s\nstdout: {done.out[-1500:]}\nstderr: {done.err[-3000:]}"
    assert done.code == refusal.code, shown
    assert "Traceback" not in done.out + done.err, shown
    says = [outcome.fill(s) for s in refusal.says]
    if refusal.code == 2:
        prefix = "yolo-mlops: error: " if refusal.program == "yolo-mlops" else f"{refusal.program}: "
        lines = [line for line in done.err.splitlines() if line.strip()]
        assert len(lines) == 1 and lines[0].startswith(prefix), shown
        for fragment in says:
            assert fragment in lines[0], f"{fragment!r} not in the line\n{shown}"
        assert mlflow_runs(outcome.env) == outcome.before  # nothing created, nothing changed
        assert run_folders(outcome.home) == []
    else:
        lines = (done.out + done.err).splitlines()
        for fragment in says:
            assert any(fragment in line for line in lines), f"{fragment!r} in no line\n{shown}"
    assert "RUNNING" not in {status for _, status in mlflow_runs(outcome.env)}


@pytest.mark.parametrize("refusal", REFUSALS, ids=[r.case for r in REFUSALS])
def test_bad_input_is_refused_as_a_user_sees_it(outcomes, refusal):
    _check(outcomes[refusal.case])


@pytest.mark.parametrize("refusal", SERVER_REFUSALS, ids=[r.case for r in SERVER_REFUSALS])
def test_a_server_that_does_not_answer_is_one_line(outcomes, refusal):
    """The bound is 1 s a check: the command's own start (imports, on a loaded machine) is most of its time."""
    _check(outcomes[refusal.case])


def test_a_refused_upload_leaves_the_folder_as_it_was(outcomes):
    for case in ("upload-params-not-a-mapping", "upload-missing-fields", "server-upload-artifact-store"):
        folder = Path(outcomes[case].values["DIR"])
        assert sorted(p.name for p in folder.iterdir()) == ["analysis", "run_record.json", "tracking.json"], case


def test_an_upload_with_warnings_finishes_its_run(outcomes):
    outcome = outcomes["upload-truncated-trace-no-tables"]
    (run_id, status), *others = mlflow_runs(outcome.env)
    assert status == "FINISHED" and not others
    folder = Path(outcome.values["DIR"])
    assert json.loads((folder / "tracking.json").read_text())["run_id"] == run_id
    assert (folder / "uploaded").is_file()


def test_an_upload_that_fails_after_its_run_exists_ends_it_failed(tmp_path, monkeypatch, mlflow_client):
    """A failure after the run was created (here: the artifacts cannot be sent) ends the run FAILED with the
    reason and keeps the folder pending; the next upload finishes it."""
    from yolo_mlops.tracking import connection, upload

    folder = _run_folder(tmp_path, _tracking(tmp_path, tracking_uri=connection.tracking_uri()), _FINISHED)

    def refused(*args, **kwargs):
        raise OSError("artifact store refused the upload")

    monkeypatch.setattr(upload, "upload_artifacts", refused)
    with pytest.raises(OSError, match="refused the upload"):
        upload.upload(folder)
    run_id = json.loads((folder / "tracking.json").read_text())["run_id"]
    run = mlflow_client.get_run(run_id)
    assert run.info.status == "FAILED"
    assert "did not finish: OSError: artifact store refused the upload" in run.data.tags["yolo_mlops.error"]
    assert (folder / "upload_pending").is_file()
    monkeypatch.undo()
    assert upload.upload(folder).run_id == run_id
    assert mlflow_client.get_run(run_id).info.status == "FINISHED"
