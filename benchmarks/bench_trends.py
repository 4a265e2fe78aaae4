"""Full `yolo-mlops trends` report over 20 series x 200 runs in a real SQLite MLflow store.

The history is written once with the project's own tracking functions (`writes.create_run`,
`writes.log_values`, `run_end.end_run`) and the params the pipeline logs (`pipeline.run_params`), not by training: 20
series (batch 1..20) x 200 runs, each with the 7 watched metrics (noise 2%, a planted +10% step-time shift at
run 120 in every other series) and the pipeline's ~50 params and tags. Measured the way a user meets it:

- `cli`: wall time of `python -m yolo_mlops.cli trends --experiment bench-trends` as a fresh subprocess
  (interpreter start, imports, every page of runs read, detection on every series and metric, the table)
- `query`: in-process, all pages of the experiment's FINISHED runs into typed records
- `detect`: in-process, change points of every series and watched metric (140 series-metrics of 200 runs)

Medians of `--repeats` interleaved repeats. The script checks that more than one page of runs was read
(4,000 runs, 1,000 per page) and that the planted shifts were found.

    .venv/bin/python benchmarks/bench_trends.py --repeats 5
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

SERIES, RUNS, SHIFT_AT, EXPERIMENT = 20, 200, 120, "bench-trends"
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))  # tests/machines.py: the made-up node
from harness import medians, time_child  # noqa: E402


def _populate(db_dir: Path) -> None:
    import dataclasses

    import numpy as np
    from machines import benchmark_run, gpu_node  # tests/machines.py

    from yolo_mlops import names
    from yolo_mlops.config import build_run_spec
    from yolo_mlops.tracking import connection, run_end, writes

    mlflow = connection.client()
    env = gpu_node()
    rng = np.random.default_rng(0)
    yaml_path = db_dir / "datasets" / "synthetic-0123456789" / "data.yaml"
    start = time.perf_counter()
    for run in range(RUNS):  # night by night, every series each night, as the nightly flow writes them
        run_env = dataclasses.replace(env, torch="2.15.0+cu130") if run >= SHIFT_AT else env
        for s in range(SERIES):
            spec = build_run_spec({"batch": s + 1, "device": "0", "experiment": EXPERIMENT, "run_kind": "benchmark"})
            params, tags = benchmark_run(spec, run_env, yaml_path, "0", db_dir)
            shift = 1.10 if (s % 2 == 0 and run >= SHIFT_AT) else 1.0
            step = 50.0 * (1 + s / 10) * shift * (1 + 0.02 * rng.standard_normal())
            metrics = {
                names.STEP_TIME_P50: step,
                names.IMAGES_PER_S: 1000.0 * (s + 1) / step,
                names.DATA_WAIT_PCT: 2.0 + 0.1 * rng.standard_normal(),
                "gpu/sm_util_pct_mean": 80 + rng.standard_normal(),
                "gpu/dram_bw_util_pct_mean": 40 + rng.standard_normal(),
                "gpu/mem_used_gib_max": 10 + 0.01 * rng.standard_normal(),
                "gpu/energy_per_image_j": 2 + 0.02 * rng.standard_normal(),
            }
            run_id = writes.create_run(mlflow, EXPERIMENT, None, tags, params)
            writes.log_values(mlflow, run_id, metrics=metrics)
            run_end.end_run(mlflow, run_id, "FINISHED")
        if run % 20 == 19:
            print(f"  {run + 1}/{RUNS} nights written ({time.perf_counter() - start:.0f} s)", flush=True)


def _in_process() -> tuple[float, float, int, int]:
    from yolo_mlops.tracking import connection
    from yolo_mlops.trends.history import load_experiment_series
    from yolo_mlops.trends.trend import series_trend

    mlflow = connection.client()
    t0 = time.perf_counter()
    grouped = load_experiment_series(mlflow, EXPERIMENT)
    t1 = time.perf_counter()
    found = [series_trend(runs) for runs in grouped.values()]
    t2 = time.perf_counter()
    runs = sum(len(r) for r in grouped.values())
    step_times = [t.metric("perf/step_time_ms_p50") for t in found]
    shifted = sum(1 for m in step_times if m is not None and [c.index for c in m.changes] == [SHIFT_AT])
    return t1 - t0, t2 - t1, runs, shifted


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--dir", type=Path, help="reuse (or create) the store here")
    args = parser.parse_args()
    home = args.dir or Path(tempfile.mkdtemp(prefix="bench-trends-"))
    home.mkdir(parents=True, exist_ok=True)
    # the history cache off: `cli` and `query` read every page from MLflow each time, as before the cache
    # (benchmarks/bench_history_scale.py times the cache)
    os.environ.update(
        YOLO_MLOPS_HOME=str(home / "home"),
        MLFLOW_TRACKING_URI=f"sqlite:///{home / 'mlflow.db'}",
        YOLO_OFFLINE="1",
        YOLO_MLOPS_HISTORY_CACHE="0",
    )
    from yolo_mlops.tracking import connection, queries

    if queries.find_experiment_id(connection.client(), EXPERIMENT) is None:
        print(f"writing {SERIES} series x {RUNS} runs into {home / 'mlflow.db'}")
        _populate(home)
    page = queries.SEARCH_PAGE_SIZE
    cli, query, detect = [], [], []
    for _ in range(args.repeats):
        timed = time_child(
            [sys.executable, "-m", "yolo_mlops.cli", "trends", "--experiment", EXPERIMENT],
            capture_output=True,
            text=True,
            env=os.environ.copy(),
        )
        out = timed.proc
        cli.append(timed.seconds)
        if out.returncode != 0:
            print(out.stderr, file=sys.stderr)
            return 1
        q, d, runs, shifted = _in_process()
        query.append(q)
        detect.append(d)
    assert runs == SERIES * RUNS and runs > page, f"read {runs} runs (page size {page})"
    print(out.stdout.splitlines()[0])
    print(
        f"runs read: {runs} ({-(-runs // page)} pages of {page}); series whose step-time shift at run "
        f"{SHIFT_AT} was found exactly: {shifted}/{SERIES // 2} planted"
    )
    median = medians({"cli": cli, "query": query, "detect": detect})
    print(
        f"median of {args.repeats}: cli {median['cli']:.2f} s, query {median['query']:.2f} s, "
        f"detect {median['detect']:.2f} s (cli runs: {', '.join(f'{c:.2f}' for c in cli)})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
