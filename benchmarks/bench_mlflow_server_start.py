"""`mlflow server` with and without MLflow's job execution: time to /health, processes, CPU seconds.

MLflow 3 starts a job runner beside the server by default (huey consumers for GenAI evaluation jobs and
trace roll-ups), none of which this project uses; deploy/mlflow/start-mlflow.sh turns it off. Both arms start
the same server (SQLite store, local artifacts, 1 worker), interleaved, `--repeats` times, and hold it for
`--idle-s` seconds after it answers; the table gives the medians of the time to /health, the processes of the
server's tree, and the CPU seconds the tree used from start to the end of the idle period.

    python benchmarks/bench_mlflow_server_start.py --repeats 3 --idle-s 20
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import psutil
from harness import interleave

MLFLOW = str(Path(sys.executable).parent / "mlflow")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


def _tree_cpu_s(root: psutil.Process, seen: dict[int, float]) -> None:
    """Record the CPU seconds of every process of the tree (kept for those that ended since the last look)."""
    for process in [root, *root.children(recursive=True)]:
        try:
            times = process.cpu_times()
            seen[process.pid] = times.user + times.system + times.children_user + times.children_system
        except psutil.Error:
            pass


def one_start(jobs: bool, idle_s: float, work: Path) -> tuple[float, int, float]:
    port = _free_port()
    env = dict(os.environ, MLFLOW_SERVER_ENABLE_JOB_EXECUTION="true" if jobs else "false")
    started = time.perf_counter()
    proc = subprocess.Popen(
        [
            MLFLOW,
            "server",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--backend-store-uri",
            f"sqlite:///{work / f'{port}.db'}",
            "--artifacts-destination",
            str(work / f"{port}-artifacts"),
            "--workers",
            "1",
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    root = psutil.Process(proc.pid)
    cpu: dict[int, float] = {}
    try:
        while not _answers(f"http://127.0.0.1:{port}/health"):
            if proc.poll() is not None:
                raise SystemExit(f"mlflow server exited with {proc.returncode}")
            _tree_cpu_s(root, cpu)
            time.sleep(0.2)
        to_health = time.perf_counter() - started
        deadline = time.monotonic() + idle_s
        processes = 0
        while time.monotonic() < deadline:
            _tree_cpu_s(root, cpu)
            processes = max(processes, len(root.children(recursive=True)) + 1)
            time.sleep(0.5)
        return to_health, processes, sum(cpu.values())
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--idle-s", type=float, default=20.0)
    args = parser.parse_args()

    results: dict[bool, list[tuple[float, int, float]]] = {True: [], False: []}
    with tempfile.TemporaryDirectory() as tmp:
        for repeat, jobs in interleave((True, False), args.repeats, order="alternate"):
            results[jobs].append(one_start(jobs, args.idle_s, Path(tmp)))
            health, procs, cpu = results[jobs][-1]
            print(
                f"repeat {repeat}: jobs {'on ' if jobs else 'off'}  /health after {health:5.1f} s  "
                f"{procs:2d} processes  {cpu:5.1f} CPU s",
                flush=True,
            )
    print(f"\n| job execution | median s to /health | processes | median CPU s (start + {args.idle_s:.0f} s idle) |")
    print("|---|---|---|---|")
    for jobs in (True, False):
        healths, proc_counts, cpus = zip(*results[jobs], strict=True)
        print(
            f"| {'on (MLflow default)' if jobs else 'off'} | {statistics.median(healths):.1f} | "
            f"{max(proc_counts)} | {statistics.median(cpus):.1f} |"
        )


if __name__ == "__main__":
    main()
