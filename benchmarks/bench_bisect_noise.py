"""Run-to-run noise of real profiled CPU runs: step time against one operator's time per step.

Each run is a process of its own, as in a bisection (`python -P yolo_mlops/bisect/commit_process.py spec.yaml`, a
temporary SQLite MLflow store), of the tiny workload of tests/bisect/test_bisect.py (YOLO11n, 64 px, batch 4,
synthetic data, CPU) at several lengths, the lengths interleaved run by run so the machine's drift falls on
all of them alike. For every run: `perf/step_time_ms_p50` (the steady steps outside the profiler window) and
the host self time per profiled step of every operator (`trends.attribution.profile_from_run`, the figure a
bisection decides on). Printed per length: the run-to-run sd of log step time, and for the operators that
take the most time, the sd of their ms/step divided by the mean step time (the noise of a figure made of that
operator, in the units of a step-time shift) and the sd of their log (their own relative noise).

    .venv/bin/python benchmarks/bench_bisect_noise.py --runs 8 --lengths 10:1,24:8,48:16 --json out.json

`--stores GLOB` reads runs already recorded instead (e.g. the MLflow stores of test sessions run with
YOLO_MLOPS_KEEP_TEST_DIR=1, `'/tmp/yolo-mlops-tests-*/mlflow.db'`): runs grouped by experiment, workload params
and bisect commit, groups of 4 runs or more, the same figures per group.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import yaml
from harness import interleave

REPO = Path(__file__).resolve().parents[1]
COMMIT_PROCESS = REPO / "yolo_mlops" / "bisect" / "commit_process.py"


def spec(steps: int, active: int) -> dict:
    return dict(
        imgsz=64,
        batch=4,
        max_steps=steps,
        workers=0,
        device="cpu",
        synthetic_images=16,
        val=False,
        experiment="bisect-noise",
        profiler={"wait": 0, "warmup": 1, "active": active, "record_shapes": False, "profile_memory": False},
    )


def one_run(home: Path, fields: dict, index: int) -> str:
    path = home / f"spec-{index:03d}.yaml"
    path.write_text(yaml.safe_dump(fields))
    env = {**os.environ, "YOLO_MLOPS_HOME": str(home)}
    env.pop("MLFLOW_TRACKING_URI", None)
    done = subprocess.run(
        [sys.executable, "-P", str(COMMIT_PROCESS), str(path)],
        env=env,
        cwd=home,
        capture_output=True,
        text=True,
        timeout=1200,
    )
    marks = [line for line in done.stdout.splitlines() if line.startswith("BISECT_RUN_ID=")]
    if done.returncode != 0 or not marks:
        raise RuntimeError(f"run {index} failed ({done.returncode}): {(done.stdout + done.stderr)[-2000:]}")
    return marks[0].split("=", 1)[1].strip()


def measure(runs: int, lengths: list[tuple[int, int]], home: Path, out: Path | None = None) -> dict:
    os.environ["YOLO_MLOPS_HOME"] = str(home)
    from yolo_mlops import names
    from yolo_mlops.tracking import connection
    from yolo_mlops.trends.attribution import profile_from_run

    records: dict[str, list[dict]] = {f"{s}:{a}": [] for s, a in lengths}
    index = 0
    for _, (steps, active) in interleave(lengths, runs, order="same"):
        run_id = one_run(home, spec(steps, active), index)
        index += 1
        mlflow = connection.client()
        run = mlflow.get_run(run_id)
        step_ms = run.data.metrics[names.STEP_TIME_P50]
        profile = profile_from_run(mlflow, run_id, active, step_ms)
        ops = {name: ms for (kind, name), ms in profile.entries.items() if kind == "operator"} if profile else {}
        records[f"{steps}:{active}"].append(
            {
                "run_id": run_id,
                "step_ms": step_ms,
                "operators": ops,
                "profiled_steps": profile.steps if profile else None,
            }
        )
        print(
            f"run {index}: {steps} steps, {active} profiled: step {step_ms:.2f} ms, {len(ops)} operators",
            flush=True,
        )
        if out is not None:  # after every run: an interrupted measurement keeps what it measured
            out.write_text(json.dumps(records, indent=1))
    return records


def recorded(pattern: str, min_runs: int = 4) -> dict[str, list[dict]]:
    """Groups of recorded runs of one workload at one commit, from the SQLite MLflow stores `pattern` names."""
    import glob
    import sqlite3
    from collections import defaultdict

    from mlflow.tracking import MlflowClient

    from yolo_mlops import names
    from yolo_mlops.trends.attribution import profile_from_run

    out: dict[str, list[dict]] = {}
    for db in sorted(glob.glob(pattern)):
        try:
            rows = (
                sqlite3.connect(db)
                .execute(
                    "select r.run_uuid, e.name from runs r join experiments e on r.experiment_id = e.experiment_id "
                    "where r.status = 'FINISHED'"
                )
                .fetchall()
            )
        except sqlite3.Error:
            continue
        client = MlflowClient(tracking_uri=f"sqlite:///{db}")
        groups: dict[tuple, list] = defaultdict(list)
        for run_id, experiment in rows:
            run = client.get_run(run_id)
            step = run.data.metrics.get(names.STEP_TIME_P50)
            p = run.data.params
            if step is None:
                continue
            key = (
                experiment,
                p.get("train.max_steps"),
                p.get("profiler.active"),
                p.get("train.variant"),
                p.get("train.batch"),
                p.get("train.imgsz"),
                run.data.tags.get(names.BISECT_COMMIT),
                run.data.tags.get(names.SERIES),
            )
            groups[key].append((run_id, step, p))
        for key, runs in groups.items():
            if len(runs) < min_runs:
                continue
            found = []
            for run_id, step, p in runs:
                try:
                    steps = int(p.get("profiler.active", 1)) * int(p.get("profiler.repeat", 1))
                except ValueError:
                    steps = None
                profile = profile_from_run(client, run_id, steps, step)
                if profile is not None:
                    ops = {name: ms for (kind, name), ms in profile.entries.items() if kind == "operator"}
                    found.append({"run_id": run_id, "step_ms": step, "operators": ops})
            if len(found) >= min_runs:
                out[f"{db.split('/')[-2]} {key[0]} {key[1]}:{key[2]} {(key[6] or '')[:10]}"] = found
    return out


def summary(records: dict[str, list[dict]], top: int = 8) -> str:
    lines = []
    for length, runs in records.items():
        step = np.array([r["step_ms"] for r in runs])
        sd_step = float(np.std(np.log(step), ddof=1))
        lines.append(
            f"\n{length} (steps:profiled), {len(runs)} runs: step time p50 {np.mean(step):.2f} ms, "
            f"run-to-run sd of log step time {100 * sd_step:.2f}%"
        )
        names_ = {n for r in runs for n in r["operators"]}
        rows = []
        for name in names_:
            if len(runs) < 2:
                break
            ms = np.array([r["operators"].get(name, 0.0) for r in runs])
            if ms.min() <= 0:
                continue
            in_step = float(np.std(ms, ddof=1) / step.mean())  # noise of the figure, in step-time units
            rows.append((float(ms.mean()), name, in_step, float(np.std(np.log(ms), ddof=1))))
        rows.sort(reverse=True)
        lines.append(
            "| operator | ms/step | share of step | sd / step time | sd of log (own) | "
            "figure noise / step-time noise, op 10x slower |"
        )
        lines.append("|---|---|---|---|---|---|")
        for mean, name, in_step, own in rows[:top]:
            share = mean / step.mean()
            # the figure of an operator made 10x slower (its noise scaled with it): the noise of the bad side
            ratio = 10 * share * own / sd_step
            lines.append(
                f"| {name} | {mean:.3f} | {100 * share:.2f}% | {100 * in_step:.3f}% | {100 * own:.1f}% | {ratio:.3f} |"
            )
    return "\n".join(lines)


def overall(records: dict[str, list[dict]], quiet_below: float, quiet_step_ms: float, top: int = 6) -> str:
    """The top operators' own sd of log time, pooled over the groups whose step time varied less than
    quiet_below (a machine not busy with others' work), and the figure noise it means (1.67 x: an operator
    made 10x slower that carries a shift of 1.5 step-time sds), from groups of a quiet machine: step time sd
    below quiet_below and step time below quiet_step_ms."""
    own, steps = [], []
    for runs in records.values():
        step = np.array([r["step_ms"] for r in runs])
        sd_step = float(np.std(np.log(step), ddof=1))
        if sd_step >= quiet_below or step.mean() >= quiet_step_ms:
            continue
        steps.append(sd_step)
        ops = {n for r in runs for n in r["operators"]}
        rows = []
        for name in ops:
            ms = np.array([r["operators"].get(name, 0.0) for r in runs])
            if ms.min() > 0:
                rows.append((float(ms.mean()), float(np.std(np.log(ms), ddof=1))))
        own += [sd for _, sd in sorted(rows, reverse=True)[:top]]
    if not own:
        return f"no group with a step-time sd below {quiet_below:g} and a step below {quiet_step_ms:g} ms"
    q = np.percentile(own, [25, 50, 75, 90])
    return (
        f"\n{len(steps)} groups with step-time sd below {100 * quiet_below:g}% and step below "
        f"{quiet_step_ms:g} ms (their sd "
        f"{100 * min(steps):.1f}-{100 * max(steps):.1f}%): the top {top} operators' own sd of log time, "
        f"{len(own)} values: quartiles {100 * q[0]:.1f}% / {100 * q[1]:.1f}% / {100 * q[2]:.1f}%, 90th "
        f"percentile {100 * q[3]:.1f}%; figure noise (1.67 x) {1.67 * q[1]:.3f} at the median, "
        f"{1.67 * q[3]:.3f} at the 90th percentile"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=8, help="runs per length")
    parser.add_argument("--lengths", default="10:1,24:8,48:16", help="max_steps:profiled active steps, ...")
    parser.add_argument("--json", help="write every run's figures here")
    parser.add_argument("--from-json", help="summarise a file written by --json instead of running")
    parser.add_argument("--stores", help="summarise recorded runs of these SQLite MLflow stores (a glob)")
    parser.add_argument(
        "--quiet-below",
        type=float,
        default=0.06,
        help="with --stores: the overall line pools groups whose sd of log step time is below this",
    )
    parser.add_argument(
        "--quiet-step-ms",
        type=float,
        default=100.0,
        help="with --stores: ... and whose step time is below this (a planted 500 ms sleep makes "
        "step time steady while everything else in the step is as noisy as the machine)",
    )
    args = parser.parse_args()
    if args.stores:
        records = recorded(args.stores)
        print(summary(records, top=6))
        print(overall(records, args.quiet_below, args.quiet_step_ms))
        return
    if args.from_json:
        records = json.loads(Path(args.from_json).read_text())
    else:
        lengths = [
            (int(steps), int(profiled)) for steps, profiled in (item.split(":") for item in args.lengths.split(","))
        ]
        with tempfile.TemporaryDirectory(prefix="bisect-noise-") as tmp:
            records = measure(
                args.runs,
                lengths,
                Path(tmp),
                Path(args.json) if args.json else None,
            )
    print(summary(records))


if __name__ == "__main__":
    main()
