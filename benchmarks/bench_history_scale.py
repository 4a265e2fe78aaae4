"""History at scale: `trends --series`, `fleet` and one suite's nightly judging over 10k-60k runs in a real
MLflow server on PostgreSQL.

The script starts its own PostgreSQL cluster and MLflow server the way tests/deploy does (initdb + pg_ctl,
deploy/postgres/init-databases.sh, deploy/mlflow/start-mlflow.sh with basic auth and proxied artifacts), in a
throwaway directory, and stops both at the end.

**Filling.** Creating 60,000 runs one REST call at a time takes far too long on a 2-core machine, so the
runs are inserted in bulk, in-process, into the same PostgreSQL database through MLflow's own SQLAlchemy
table models (`mlflow.store.tracking.dbmodels.models`: `runs`, `params`, `tags`, `metrics`,
`latest_metrics`), in batches of 2,000 runs; the experiment itself is created through the server. The rows
are the ones MLflow writes for a FINISHED run: the ~50 params the pipeline logs (`pipeline.run_params`), the
series tag and run tags, and 3 watched metrics (`perf/step_time_ms_p50`, `perf/images_per_s`,
`perf/data_wait_pct`; one value each, in `metrics` and `latest_metrics`). 20 workloads (batch 1..20) x 8
machines = 160 series; night by night every series gets one run, so 60,000 runs are 375 nights (a year),
and a series' history grows with the experiment. The commit changes every 7 nights.

**Timing.** At each size (10k, then filled on to 30k, then to 60k) every command runs as a fresh subprocess,
as a user meets it, the commands interleaved, `--repeats` rounds; the figure is the median, with peak RSS
(`ru_maxrss` from `os.wait4`, taken by a small wrapper process: see `_measure`):

- `trends --series`: `yolo-mlops trends --experiment bench-scale --series KEY` (KEY: the first 10 characters
  of one series' key, so the prefix path is timed);
- `nightly judging`: `nightly.judge_night` over the newest night's runs of a suite of 4 workloads on one
  machine (4 series judged; their verdict tags, picture and report logged on the runs through the server),
  with the series' history caches (`tracking/history_cache.py`) brought up to the size once, untimed, so each
  timed call is a night's warm read that refreshes them from MLflow;
- `nightly judging, no history cache`: the same with `YOLO_MLOPS_HISTORY_CACHE=0`, every run of the 4 series
  read from MLflow (what the first night on a machine without a cache costs);
- `nightly judging, auth cache off`: the warm judging through a second server over the same stores that checks
  the login on every request (`MLFLOW_AUTH_CACHE_TTL_SECONDS=0`; the first server keeps start-mlflow.sh's
  default);
- `fleet, no cache`: `yolo-mlops fleet --experiment bench-scale` with `YOLO_MLOPS_HISTORY_CACHE=0` (every
  FINISHED run read from MLflow), only up to `--no-cache-up-to` runs (default 10,080): it reads them all;
- `fleet, cache`: the same with the history cache, built once by an untimed call at that size, so each
  timed call is a warm read that refreshes it from MLflow.

`trends --series` and the judging read only their series (MLflow's filter on the series tag); `trends` is
timed cold: its one series' cache is rebuilt on each call (`YOLO_MLOPS_HISTORY_CACHE=0`), as a user's first
look at a series meets it.

**Operator series.** With `--operators N` (default 20) every run also carries what a profiled run logs of its
operators (analysis/operators.py; a CPU run of the tiny workload logs 20): N `op/cpu/<operator>` metrics (ms per
profiled step, falling off as a real CPU profile does, each with its own noise) plus `op/step_ms` and
`op/floor_ms`, so `trends --series` and the judging read, type and judge their operator series.
`--baseline-src PATH` times the code of another source tree (a `git worktree` of the commit before operator
series) beside this one, in the same rounds: the baseline's commands run with `PYTHONPATH=PATH` over an
experiment filled the same way without operator metrics (what its runs logged), this tree's (or
`--after-src`'s) over the experiment with them. Only `trends --series`, the warm judging and the judging without a
history cache are timed then:

    .venv/bin/python benchmarks/bench_history_scale.py --sizes 60000 --repeats 3 --no-fleet \
        --baseline-src /tmp/before --after-src /tmp/after

    .venv/bin/python benchmarks/bench_history_scale.py --sizes 10000 30000 60000 --repeats 3
"""

from __future__ import annotations

import argparse
import contextlib
import os
import secrets
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path


def _measure(argv: list[str]) -> int:
    """`--measure CMD ...`: run CMD, then print its wall time and peak RSS. Measured from this small process,
    not from the benchmark itself: a child's `ru_maxrss` counts the memory of the process it was forked from
    (the benchmark holds hundreds of MiB after filling), so the figure would be the benchmark's."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    print(f"\nMEASURED wall_s={wall:.4f} peak_rss_kib={usage.ru_maxrss}", flush=True)
    return os.waitstatus_to_exitcode(status)


if __name__ == "__main__" and sys.argv[1:2] == ["--measure"]:
    sys.exit(_measure(sys.argv[2:]))

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))  # processes.py (ports, polls, stop), postgres_cluster.py, machines.py

from harness import Samples, command_line, interleave  # noqa: E402
from postgres_cluster import pg_bindir, running_cluster  # noqa: E402
from processes import base_env, free_port, http_ok, poll_until, start, stop  # noqa: E402

EXPERIMENT = os.environ.get("BENCH_EXPERIMENT", "bench-scale")  # --judge: the experiment judged
EXPERIMENT_OPS = "bench-scale-ops"  # the same runs with their operator metrics (--baseline-src)
WORKLOADS, MACHINES = 20, 8
SERIES = WORKLOADS * MACHINES
BATCH_RUNS = 2000
SUITE = 4  # configurations of the nightly suite judged: 4 workloads on one machine
DAY_MS = 86_400_000
T0_MS = 1_700_000_000_000


# ---- servers ------------------------------------------------------------------------------------------------


class Servers:
    """PostgreSQL (tests/postgres_cluster.py) + `mlflow server` (start-mlflow.sh), as tests/deploy starts them."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.cluster = contextlib.ExitStack()
        self.mlflow_procs: list[subprocess.Popen] = []  # every mlflow server started, stopped at the end

    def start(self) -> None:
        bindir = pg_bindir()
        if bindir is None:
            raise SystemExit("PostgreSQL server binaries not found (deploy/ci-system-packages.txt)")
        self.base.chmod(0o755)  # the server's user must reach the cluster's folder inside
        (self.base / "pg").mkdir()
        pg = self.cluster.enter_context(running_cluster(self.base / "pg", bindir))
        self.db_url = pg.url("mlflow", "mlflow", driver="postgresql+psycopg2")
        self.auth_url = pg.url("mlflow", "mlflow_auth", driver="postgresql+psycopg2")
        self.password = secrets.token_urlsafe(16)
        (self.base / "artifacts").mkdir()
        self.url = self._start_mlflow("mlflow", auth_cache_ttl_s=None)

    def _start_mlflow(self, name: str, auth_cache_ttl_s: int | None) -> str:
        """One `mlflow server` (start-mlflow.sh) over the cluster's stores; auth_cache_ttl_s None: the script's
        default. Several may run at once: the stores live in PostgreSQL, and the first start creates the admin."""
        port = free_port()
        env = base_env() | {
            "MLFLOW_BACKEND_STORE_URI": self.db_url,
            "MLFLOW_AUTH_DATABASE_URI": self.auth_url,
            "MLFLOW_ARTIFACTS_DESTINATION": str(self.base / "artifacts"),
            "MLFLOW_AUTH_ADMIN_PASSWORD": self.password,
            "MLFLOW_FLASK_SERVER_SECRET_KEY": secrets.token_hex(16),
            "MLFLOW_HOST": "127.0.0.1",
            "MLFLOW_PORT": str(port),
            "MLFLOW_WORKERS": "2",
        }
        if auth_cache_ttl_s is not None:
            env["MLFLOW_AUTH_CACHE_TTL_SECONDS"] = str(auth_cache_ttl_s)
        log = self.base / f"{name}.log"
        proc = start(["sh", str(REPO / "deploy/mlflow/start-mlflow.sh")], log, env)
        self.mlflow_procs.append(proc)
        url = f"http://127.0.0.1:{port}"
        if not poll_until(lambda: http_ok(f"{url}/health"), 300, proc):
            raise SystemExit(f"mlflow server did not come up:\n{log.read_text()[-3000:]}")
        return url

    def start_uncached(self) -> str:
        """A second server over the same stores that checks the login on every request (auth cache off)."""
        return self._start_mlflow("mlflow-uncached", auth_cache_ttl_s=0)

    def client_env(self) -> dict[str, str]:
        return {
            "MLFLOW_TRACKING_URI": self.url,
            "MLFLOW_TRACKING_USERNAME": "admin",
            "MLFLOW_TRACKING_PASSWORD": self.password,
        }

    def stop(self) -> None:
        for proc in self.mlflow_procs:
            stop(proc)
        self.cluster.close()


# ---- filling --------------------------------------------------------------------------------------------------


class Filler:
    """Run rows for the 160 series, inserted through MLflow's table models in batches."""

    def __init__(
        self, db_url: str, experiment_id: str, artifact_location: str, home: Path, operators: int = 0, tag: str = ""
    ) -> None:
        import dataclasses

        from machines import benchmark_run, cpu_node  # tests/machines.py
        from sqlalchemy import create_engine

        from yolo_mlops import names
        from yolo_mlops.config import build_run_spec

        self.engine = create_engine(db_url)
        self.experiment_id, self.artifact_location = experiment_id, artifact_location
        self.tag = tag  # run ids of another experiment's filler differ
        # a run's operators as a CPU profile falls off (each 0.85 of the one before, 95% of the step)
        weights = [0.85**i for i in range(operators)]
        self.operators = {
            names.operator_metric("operator", f"aten::bench_op_{i:02d}"): 0.95 * w / sum(weights)
            for i, w in enumerate(weights)
        }
        yaml_path = home / "datasets" / "synthetic-0123456789" / "data.yaml"
        env = cpu_node(hostname="node-0", machine="node-0", git_commit="0" * 40)
        self.series: list[tuple[str, dict[str, str], dict[str, str], str]] = []  # key, params, tags, machine
        for w in range(WORKLOADS):
            spec = build_run_spec({"batch": w + 1, "device": "cpu", "experiment": EXPERIMENT, "run_kind": "benchmark"})
            for m in range(MACHINES):
                machine_env = dataclasses.replace(env, hostname=f"node-{m}", machine=f"node-{m}")
                params, tags = benchmark_run(spec, machine_env, yaml_path, "cpu", home)
                self.series.append((tags[names.SERIES], params, tags, f"node-{m}"))
        self.names = names

    def run_at(self, index: int) -> tuple[int, int]:
        """(night, series index) of the index-th run: every series once a night."""
        return divmod(index, SERIES)

    def fill(self, first: int, last: int) -> None:
        import numpy as np
        from mlflow.store.tracking.dbmodels import models as m
        from sqlalchemy import insert

        names = self.names
        start = time.perf_counter()
        for lo in range(first, last, BATCH_RUNS):
            runs, params, tags, metrics = [], [], [], []
            for index in range(lo, min(last, lo + BATCH_RUNS)):
                night, s = self.run_at(index)
                key, p, t, machine = self.series[s]
                rng = np.random.default_rng(index)
                run_id = _run_id(index, self.tag)
                begin = T0_MS + night * DAY_MS + s * 60_000
                runs.append(
                    dict(
                        run_uuid=run_id,
                        name=f"bench-{index}",
                        source_type="LOCAL",
                        source_name="",
                        entry_point_name="",
                        user_id="bench",
                        status="FINISHED",
                        start_time=begin,
                        end_time=begin + 50_000,
                        source_version="",
                        lifecycle_stage="active",
                        artifact_uri=f"{self.artifact_location}/{run_id}/artifacts",
                        experiment_id=int(self.experiment_id),
                    )
                )
                commit = f"{night // 7:040x}"
                params += [
                    dict(key=k, value=(commit if k == "env.git_commit" else v), run_uuid=run_id) for k, v in p.items()
                ]
                run_tags = {
                    **t,
                    names.BENCHMARK_NIGHT: f"night-{night}",
                    "mlflow.runName": f"bench-{index}",
                    "mlflow.user": "bench",
                }
                tags += [dict(key=k, value=v, run_uuid=run_id) for k, v in run_tags.items()]
                step = 50.0 * (1 + (s // MACHINES) / 10) * (1 + 0.02 * rng.standard_normal())
                values = {
                    names.STEP_TIME_P50: step,
                    names.IMAGES_PER_S: 1000.0 / step,
                    names.DATA_WAIT_PCT: 2.0 + 0.1 * rng.standard_normal(),
                }
                if self.operators:
                    noise = 1 + 0.06 * rng.standard_normal(len(self.operators))
                    values.update(
                        {m: step * share * f for (m, share), f in zip(self.operators.items(), noise, strict=True)}
                    )
                    values[names.OP_STEP_MS] = step
                    values[names.OP_FLOOR_MS] = 0.001 * step
                metrics += [
                    dict(key=k, value=float(v), timestamp=begin + 50_000, step=0, is_nan=False, run_uuid=run_id)
                    for k, v in values.items()
                ]
            with self.engine.begin() as conn:
                conn.execute(insert(m.SqlRun.__table__), runs)
                conn.execute(insert(m.SqlParam.__table__), params)
                conn.execute(insert(m.SqlTag.__table__), tags)
                conn.execute(insert(m.SqlMetric.__table__), metrics)
                conn.execute(insert(m.SqlLatestMetric.__table__), metrics)
            done = min(last, lo + BATCH_RUNS)
            if done % 10_000 == 0 or done == last:
                print(f"  filled {done} runs ({time.perf_counter() - start:.0f} s)", flush=True)
        with self.engine.begin() as conn:
            from sqlalchemy import text

            conn.execute(text("ANALYZE"))

    def night_runs(self, total: int, machine: str) -> list[str]:
        """Run ids of the newest complete night's runs on one machine (the suite judged)."""
        night = total // SERIES - 1
        ids = []
        for s, (_key, _p, _t, m) in enumerate(self.series):
            if m == machine:
                ids.append(_run_id(night * SERIES + s, self.tag))
        return ids


def _run_id(index: int, tag: str = "") -> str:
    return uuid.uuid5(uuid.NAMESPACE_OID, f"bench-history-scale-{tag}{index}").hex


# ---- timing ---------------------------------------------------------------------------------------------------


def timed(cmd: list[str], env: dict[str, str]) -> tuple[float, float, str]:
    """Wall seconds and peak RSS (MiB) of the command, and its output; raises when it fails."""
    proc = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), "--measure", *cmd],
        env=env,
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    if proc.returncode != 0:
        raise SystemExit(f"{command_line(cmd)} failed ({proc.returncode}):\n{proc.stdout[-3000:]}")
    fields = dict(f.split("=") for f in proc.stdout.rsplit("MEASURED ", 1)[1].split())
    return float(fields["wall_s"]), int(fields["peak_rss_kib"]) / 1024, proc.stdout


def judge_main(run_ids: list[str]) -> int:
    """`--judge RUN_ID ...`: one suite's nightly judging, as the benchmark flow calls it."""
    from yolo_mlops.tracking import connection
    from yolo_mlops.trends import nightly
    from yolo_mlops.trends.trend import DetectionSettings

    profile_to = os.environ.get("BENCH_JUDGE_PROFILE", "")  # --profile-judge: cProfile stats of the judging
    import cProfile

    profiler = cProfile.Profile()
    if profile_to:
        profiler.enable()
    judged = nightly.judge_night(connection.client(), EXPERIMENT, run_ids, DetectionSettings())
    if profile_to:
        profiler.disable()
        profiler.dump_stats(profile_to)
    print(f"{len(judged)} series judged, {sum(j.history_runs for j in judged)} runs of history")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 30_000, 60_000])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--no-cache-up-to",
        type=int,
        default=10_080,
        help="time `fleet` without the cache only up to this many runs (it reads them all)",
    )
    parser.add_argument(
        "--no-fleet",
        action="store_true",
        help="time only `trends --series` and the nightly judgings, not `fleet`",
    )
    parser.add_argument(
        "--profile-judge",
        type=Path,
        help="after the timed rounds at each size, one more judging under cProfile: PATH.<size>.prof",
    )
    parser.add_argument(
        "--profile-fleet",
        type=Path,
        help="after the timed rounds at each size, one more `fleet` (cache warm) under cProfile: PATH.<size>.prof",
    )
    parser.add_argument(
        "--operators",
        type=int,
        default=20,
        help="operator metrics a run carries (op/cpu/*, besides op/step_ms and op/floor_ms; 0: none)",
    )
    parser.add_argument(
        "--baseline-src",
        type=Path,
        help="a source tree (git worktree) of the code before operator series, timed beside this one",
    )
    parser.add_argument("--after-src", type=Path, help="the source tree compared with the baseline (default: this)")
    parser.add_argument("--judge", nargs="+", help=argparse.SUPPRESS)
    return parser


Command = tuple[list[str], dict[str, str]]  # a command and its environment


def size_commands(
    args: argparse.Namespace, arms: list, fillers: list, size: int, env: dict[str, str], uncached_url: str
) -> dict[str, Command]:
    """The timed commands at one size, by name: each arm's trends and judgings (and without a baseline the
    uncached judging and `fleet`)."""
    cli = [sys.executable, "-m", "yolo_mlops.cli"]
    judge = [sys.executable, str(Path(__file__).resolve()), "--judge"]
    commands: dict[str, Command] = {}  # name -> (command, environment)
    for (label, experiment, _ops, src), filler in zip(arms, fillers, strict=True):
        key = filler.series[0][0]
        suite = filler.night_runs(size, "node-0")[:SUITE]
        arm_env = env | {"BENCH_EXPERIMENT": experiment}
        if src is not None:  # that tree's yolo_mlops first (the editable install's finder comes after)
            arm_env["PYTHONPATH"] = str(src.resolve())
        commands |= {
            "trends --series" + label: (
                cli + ["trends", "--experiment", experiment, "--series", key[:10]],
                arm_env | {"YOLO_MLOPS_HISTORY_CACHE": "0"},
            ),
            "nightly judging" + label: ([*judge, *suite], arm_env),
            "nightly judging, no history cache" + label: (
                [*judge, *suite],
                arm_env | {"YOLO_MLOPS_HISTORY_CACHE": "0"},
            ),
        }
        if args.baseline_src is None:
            commands |= {
                "nightly judging, auth cache off": (
                    [*judge, *suite],
                    arm_env | {"MLFLOW_TRACKING_URI": uncached_url},
                ),
                "fleet, no cache": (
                    cli + ["fleet", "--experiment", experiment],
                    arm_env | {"YOLO_MLOPS_HISTORY_CACHE": "0"},
                ),
                "fleet, cache": (cli + ["fleet", "--experiment", experiment], arm_env),
            }
    return commands


def time_size(args: argparse.Namespace, arms: list, commands: dict[str, Command], size: int) -> list[tuple]:
    """The commands at one size, caches warmed untimed first, then `--repeats` interleaved rounds: a row per
    command (size, name, median s, median peak RSS MiB, the rounds' seconds)."""
    results = []
    if args.baseline_src is not None:  # the warm judgings' caches, once each, untimed
        for label, *_ in arms:
            timed(*commands["nightly judging" + label])
    if (size > args.no_cache_up_to or args.no_fleet) and "fleet, no cache" in commands:
        del commands["fleet, no cache"]  # reads every run each time: timed at the small sizes only
    if args.no_fleet and "fleet, cache" in commands:
        del commands["fleet, cache"]
    for name in ("fleet, cache", "nightly judging", "nightly judging, auth cache off"):
        if name in commands:  # each cache brought up to this size once, untimed: later reads refresh it
            timed(*commands[name])
    times: Samples[str] = Samples(commands)
    rss: Samples[str] = Samples(commands)
    for _, name in interleave(commands, args.repeats, order="same"):
        wall, peak, _out = timed(*commands[name])
        times.add(name, wall)
        rss.add(name, peak)
    if args.profile_judge:
        stats = f"{args.profile_judge}.{size}.prof"
        judge_cmd, judge_env = commands["nightly judging" + arms[-1][0]]
        timed(judge_cmd, judge_env | {"BENCH_JUDGE_PROFILE": stats})
        print(f"  cProfile of one judging: {stats}", flush=True)
    if args.profile_fleet and "fleet, cache" in commands:
        stats = f"{args.profile_fleet}.{size}.prof"
        fleet_cmd, fleet_env = commands["fleet, cache"]
        timed([sys.executable, "-m", "cProfile", "-o", stats, *fleet_cmd[1:]], fleet_env)
        print(f"  cProfile of one fleet: {stats}", flush=True)
    median_s, median_rss = times.medians(), rss.medians()
    for name, values in times.items():
        row = (size, name, median_s[name], median_rss[name], values)
        results.append(row)
        print(
            f"{size:>6} runs  {name:<44}  median {row[2]:6.2f} s  peak RSS {row[3]:5.0f} MiB  "
            f"({', '.join(f'{v:.2f}' for v in values)})",
            flush=True,
        )
    return results


def main() -> int:
    args = build_parser().parse_args()
    if args.judge:
        return judge_main(args.judge)
    if any(s % SERIES for s in args.sizes) or args.sizes != sorted(args.sizes):
        raise SystemExit(f"--sizes: ascending multiples of {SERIES} (one run per series a night)")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stop the servers on the way out
    base = Path(tempfile.mkdtemp(prefix="bench-history-scale-"))
    servers = Servers(base)
    try:
        print("starting PostgreSQL and the MLflow server ...", flush=True)
        servers.start()
        uncached_url = servers.start_uncached()
        home = base / "home"
        # MLFLOW_HTTP_REQUEST_TIMEOUT: the project's default of 15 s per request (connection.HTTP_RETRY_DEFAULTS)
        # is shorter than a 1,000-run page of `search_runs` takes on 2 cores shared with other jobs
        env = (
            base_env()
            | servers.client_env()
            | {
                "YOLO_MLOPS_HOME": str(home),
                "YOLO_OFFLINE": "1",
                "MPLBACKEND": "Agg",
                "MLFLOW_HTTP_REQUEST_TIMEOUT": "300",
            }
        )
        os.environ.update(servers.client_env())
        from mlflow.tracking import MlflowClient

        client = MlflowClient(servers.url)
        # arms: (label suffix, experiment, operator metrics a run, source tree on PYTHONPATH or None for this one)
        arms = [("", EXPERIMENT, args.operators, args.after_src)]
        if args.baseline_src is not None:
            arms = [
                (" [before]", EXPERIMENT, 0, args.baseline_src),
                (" [after]", EXPERIMENT_OPS, args.operators, args.after_src),
            ]
        fillers = []
        for label, experiment, operators, _src in arms:
            experiment_id = client.create_experiment(experiment)
            location = client.get_experiment(experiment_id).artifact_location
            fillers.append(Filler(servers.db_url, experiment_id, location, home, operators, tag=label.strip(" []")))
        cli = [sys.executable, "-m", "yolo_mlops.cli"]
        filled = 0
        results = []
        for size in args.sizes:
            for filler in fillers:
                filler.fill(filled, size)
            filled = size
            commands = size_commands(args, arms, fillers, size, env, uncached_url)
            results += time_size(args, arms, commands, size)
        help_times = [timed(cli + ["--help"], env)[0] for _ in range(args.repeats)]
        print(f"--help: median {statistics.median(help_times):.2f} s")
        print("\n| runs | command | median s | peak RSS MiB |\n|---|---|---|---|")
        for size, name, med, peak, _ in results:
            print(f"| {size:,} | {name} | {med:.2f} | {peak:.0f} |")
        return 0
    finally:
        servers.stop()
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
