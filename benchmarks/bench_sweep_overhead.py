"""Orchestration overhead of a sweep child run: child wall time minus the training inside it (CPU).

A real `sweep` flow (Prefect test server, SQLite MLflow, real YOLO11n training on the synthetic dataset,
tiny settings) runs `--children` baseline repeats under a Prefect concurrency limit of 1. For every child:

- child wall   = the subflow call as the sweep times it (slot held): what one variant x repeat costs
- train        = the `train` task of the child's `profile-training` flow run (ultralytics setup, the steps,
                 profiler export, final validation) as Prefect recorded it
- overhead     = child wall - train: Prefect subflow + task engine, prepare (dataset check, env fingerprint,
                 MLflow run creation), analyze, track (MLflow batch write + artifact upload)
- acquire      = waiting for and acquiring the concurrency slot (uncontended here), outside child wall

Sweep-level cost (plan, parent run, collecting step times from MLflow, statistics, report, chart,
artifacts) is reported once: sweep wall - sum(child wall + acquire). Medians over the children; the first
child (cold imports, dataset build) is reported separately and excluded from the medians.

    .venv/bin/python benchmarks/bench_sweep_overhead.py --children 6
    .venv/bin/python benchmarks/bench_sweep_overhead.py --children 6 --write-docs
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

import workloads  # noqa: E402
from harness import Stopwatch, medians  # noqa: E402
from isolation import isolate  # noqa: E402

GOAL_S = 2.0


def _task_durations(flow_run_id: str) -> dict[str, float]:
    from uuid import UUID

    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    with get_client(sync_client=True) as client:
        runs = client.read_task_runs(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[UUID(flow_run_id)])))
    out = {}
    for run in runs:
        if run.start_time and run.end_time:
            out[re.sub(r"-[0-9a-f]+$", "", run.name)] = (run.end_time - run.start_time).total_seconds()
    return out


def report(children: int, rows: list[dict[str, float]], sweep_wall: float, spent: dict[str, float]) -> str:
    """The '## Sweep orchestration' section of docs/benchmarks.md: medians over the children after the first."""
    first, steady = rows[0], rows[1:] or rows
    med = medians({k: [r[k] for r in steady] for k in steady[0]})
    med["engine"] = med["overhead"] - med["pipeline"]
    sweep_level = sweep_wall - sum(r["wall"] + r["acquire"] for r in rows)
    verdict = "met" if med["overhead"] <= GOAL_S else "NOT met"
    lines = [
        "## Sweep orchestration",
        "",
        "Orchestration overhead per sweep child = child wall time (the `profile-training` subflow call, "
        "concurrency slot held) minus the child's `train` task (ultralytics setup, the training steps, profiler "
        "export, final validation). A real `sweep` flow on Prefect's test server and a SQLite MLflow store "
        f"runs {children} baseline repeats of YOLO11n (imgsz 64, batch 4, 6 steps, synthetic data, CPU) "
        "under a concurrency limit of 1. Medians over children 2..n (the first pays for cold imports).",
        "",
        f"Command: `.venv/bin/python benchmarks/bench_sweep_overhead.py --children {children} --write-docs`",
        "",
        f"Machine: {os.cpu_count()} shared vCPUs ({platform.processor() or platform.machine()}, other jobs "
        f"running, load average {os.getloadavg()[0]:.1f}), Python {platform.python_version()}, "
        f"{time.strftime('%Y-%m-%d')}.",
        "",
        "| per child (median) | seconds |",
        "|---|---|",
        f"| child wall | {med['wall']:.2f} |",
        f"| train task | {med['train']:.2f} |",
        f"| **overhead = wall - train** (range over children 2..n: {min(r['overhead'] for r in steady):.2f}"
        f"-{max(r['overhead'] for r in steady):.2f}) | **{med['overhead']:.2f}** |",
        f"| of which prepare task (dataset check, env fingerprint, MLflow run + params) | {med['prepare']:.2f} |",
        f"| of which analyze task | {med['analyze']:.2f} |",
        f"| of which track task (MLflow metrics + artifact upload) | {med['track']:.2f} |",
        f"| of which Prefect subflow/task engine (rest) | {med['engine']:.2f} |",
        f"| slot acquire (uncontended, outside child wall) | {med['acquire']:.2f} |",
        "",
        "Each row is the median of its own column, so wall - train need not equal the median overhead; the "
        "'Prefect engine' row is median overhead minus the median prepare + analyze + track.",
        "",
        f"First child: wall {first['wall']:.2f} s, overhead {first['overhead']:.2f} s. Sweep-level cost (plan, "
        f"parent run, collecting {len(rows)} children's step times from MLflow, bootstrap, report, chart, "
        f"artifacts): {sweep_level:.2f} s once per sweep: "
        + ", ".join(f"{k} {v:.2f}" for k, v in sorted(spent.items(), key=lambda kv: -kv[1]))
        + f", rest (flow engine start, parent run creation; not broken down further) "
        f"{sweep_level - sum(spent.values()):.2f}.",
        "",
        f"Goal (<= {GOAL_S:.0f} s overhead per child on CPU): **{verdict}** ({med['overhead']:.2f} s).",
    ]
    return "\n".join(lines)


def write_docs(text: str) -> None:
    """Replace (or append) the section in docs/benchmarks.md."""
    docs = ROOT / "docs" / "benchmarks.md"
    current = docs.read_text() if docs.exists() else "# Benchmarks\n"
    pattern = re.compile(r"^## Sweep orchestration\n.*?(?=^## |\Z)", re.S | re.M)
    if pattern.search(current):
        current = pattern.sub(text + "\n\n", current)
    else:
        current = current.rstrip("\n") + "\n\n" + text + "\n"
    docs.write_text(current)
    print(f"\nwrote {docs}")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--children", type=int, default=6)
    parser.add_argument(
        "--write-docs", action="store_true", help="replace '## Sweep orchestration' in docs/benchmarks.md"
    )
    return parser


def main() -> int:
    args = build_parser().parse_args()
    isolate(Path(tempfile.mkdtemp(prefix="bench-sweep-")))
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import GlobalConcurrencyLimitCreate
    from prefect.testing.utilities import prefect_test_harness

    from yolo_mlops import sweeps
    from yolo_mlops.config import SweepRequest, build_run_spec
    from yolo_mlops.flows.sweep import sweep
    from yolo_mlops.run import gpu_lock, preflight

    spent: dict[str, float] = {}

    def timed(module, name, label):
        original = getattr(module, name)

        def wrapper(*a, **kw):
            t = time.perf_counter()
            try:
                return original(*a, **kw)
            finally:
                spent[label] = spent.get(label, 0.0) + time.perf_counter() - t

        setattr(module, name, wrapper)

    import yolo_mlops.flows.sweep as sweep_module

    for label, name in (
        ("collect", "collect"),
        ("compare", "compare"),
        ("markdown", "markdown"),
        ("log_report", "log_report"),
        ("plan", "plan_sweep"),
    ):
        timed(sweeps, name, label)
    timed(gpu_lock, "check_limit", "check_limit")

    class _SweepPreflight:  # the sweep flow's view of `preflight`: time its own check only; patching
        def __getattr__(self, name):  # preflight.check would also time every child's prepare task
            return getattr(preflight, name)

    sweep_module.preflight = _SweepPreflight()
    timed(sweep_module.preflight, "check", "check_inputs")
    timed(sweep_module, "create_table_artifact", "prefect_artifacts")
    timed(sweep_module, "create_markdown_artifact", "prefect_artifacts")

    # the tests' tiny workload for 6 steps, with shapes and memory recorded (the profiler's defaults)
    base = build_run_spec(
        workloads.tiny(max_steps=6, experiment="bench-sweep", profiler={"wait": 0, "warmup": 1, "active": 1})
    )
    with prefect_test_harness(server_startup_timeout=180):
        with get_client(sync_client=True) as client:
            client.create_global_concurrency_limit(GlobalConcurrencyLimitCreate(name="bench-slot", limit=1))
        with Stopwatch() as watch:
            result = sweep(SweepRequest(base=base, variants=[], repeats=args.children, concurrency_limit="bench-slot"))
        sweep_wall = watch.seconds
        rows = []
        for child in result.children:
            tasks = _task_durations(child["flow_run_id"])
            train = tasks.get("train", float("nan"))
            rows.append(
                {
                    "wall": child["wall_s"],
                    "acquire": child["acquire_s"],
                    "train": train,
                    "overhead": child["wall_s"] - train,
                    "pipeline": sum(tasks.get(k, 0.0) for k in ("prepare", "analyze", "track")),
                    **{k: tasks.get(k, float("nan")) for k in ("prepare", "analyze", "track")},
                }
            )
    text = report(args.children, rows, sweep_wall, spent)
    print(text)
    if args.write_docs:
        write_docs(text)
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main())
