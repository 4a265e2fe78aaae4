"""`yolo-mlops compare A B`: per-step operator / kernel / phase diff of two MLflow runs or two trace files.

Run ids: self times from the runs' key_averages tables and phases from their trace analysis, normalised per
profiled step; the diff is logged as an MLflow table on run B. Trace files: yolo_mlops.analysis of each trace
(host operators with inclusive time, kernels, phases), per step. Runs of different series may be compared;
the output says so first.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from yolo_mlops.errors import ConfigError


def cmd_compare(args: argparse.Namespace) -> int:
    import dataclasses

    if args.top < 1:
        raise ConfigError(f"--top {args.top}: must be at least 1")
    a, b = args.a, args.b
    as_files = [Path(x).exists() for x in (a, b)]
    if a == b or (all(as_files) and Path(a).resolve() == Path(b).resolve()):
        raise ConfigError(
            f"compare: A and B are the same {'trace file' if all(as_files) else 'run'} ({a}): "
            "a diff of one run against itself shows nothing; give two different runs or traces"
        )
    if args.rank is not None and args.rank < 0:
        raise ConfigError(f"--rank {args.rank}: a rank is 0 or more")
    if all(as_files):
        result, warning, run_b = _compare_traces(a, b, args.rank), None, None
    elif any(as_files):
        raise ConfigError(
            f"compare needs two trace files or two MLflow run ids; {a if as_files[0] else b} "
            f"is a file and {b if as_files[0] else a} is not"
        )
    else:
        result, warning = _compare_runs(a, b, args.rank)
        run_b = b
    shown = dataclasses.replace(result, contributions=result.contributions[: args.top])
    if args.format == "json":
        print(json.dumps({"a": a, "b": b, "warning": warning, **shown.to_dict()}, indent=2))
    else:
        from yolo_mlops.trends.report import attribution_text

        if warning:
            print(warning + "\n")
        print(f"A = {a}\nB = {b}")
        print(attribution_text(shown, indent=""))
    if run_b is not None and result.contributions:
        _log_diff(run_b, result)
        import sys

        # stderr: with --format json, stdout holds only the JSON document
        print(f"diff logged on run {run_b} as MLflow table {_table_name()}", file=sys.stderr)
    return 0


def _table_name() -> str:
    from yolo_mlops import names

    return names.COMPARE_TABLE


def _compare_traces(a: str, b: str, rank: int | None = None):
    """Each trace's first rank, or `rank` of a folder of rank traces (a data-parallel job's)."""
    import dataclasses

    from yolo_mlops.analysis import TraceError, analyze_traces
    from yolo_mlops.trends.attribution import attribute, profile_from_trace

    profiles = []
    for path in (a, b):
        try:
            analysis = analyze_traces(path)
        except TraceError as exc:
            raise ConfigError(str(exc)) from None
        if rank is not None:
            chosen = [r for r in analysis.ranks if r.rank == rank]
            if not chosen:
                held = ", ".join(str(r.rank) for r in analysis.ranks)
                raise ConfigError(f"--rank {rank}: {path} has no rank {rank} (rank(s) it holds: {held})")
            analysis = dataclasses.replace(analysis, ranks=chosen)
        if not analysis.ranks or not analysis.ranks[0].steps:
            raise ConfigError(f"{path}: no profiled steps (ProfilerStep spans) to normalise by")
        profiles.append(profile_from_trace(path, analysis))
    # The trace analysis keeps only each trace's top host operators and kernels: one missing from a side's
    # list is unknown there, not zero, so only those listed on both sides are compared (phases are complete).
    both = set(profiles[0].entries) & set(profiles[1].entries)
    profiles = [
        dataclasses.replace(p, entries={k: v for k, v in p.entries.items() if k[0] == "phase" or k in both})
        for p in profiles
    ]
    return attribute(profiles[:1], profiles[1:], top=None)


def _compare_runs(a: str, b: str, rank: int | None = None):
    from yolo_mlops.tracking import connection, queries
    from yolo_mlops.trends.attribution import attribute, profile_from_run
    from yolo_mlops.trends.history import record_from_stored

    mlflow = connection.checked_client()
    records = []
    statuses: dict[str, str] = {}
    for run_id in (a, b):
        run = queries.find_run(mlflow, run_id)
        if run is None:
            raise ConfigError(f"no MLflow run {run_id!r} in {connection.tracking_uri()}")
        record = record_from_stored(run)
        if record is None:
            raise ConfigError(f"run {run_id} is not a yolo-mlops profiled run (no series tag or params)")
        if rank is not None:
            world = run.logged.world_size
            if world == 0:
                raise ConfigError(
                    f"run {run_id} has no rank {rank}: it is a single-process run "
                    "(--rank picks a rank of a data-parallel job)"
                )
            if rank >= world:
                raise ConfigError(f"run {run_id} has no rank {rank}: its job had ranks 0 to {world - 1}")
        records.append(record)
        statuses[record.run_id] = run.status
        # its tables are read from its artifacts (and the diff is logged on B's): that store answers first
        connection.check_artifact_store(run.artifact_uri, f"artifacts of run {run_id}")
    warning = None
    if records[0].series != records[1].series:
        warning = (
            f"WARNING: DIFFERENT SERIES - A is {records[0].label} [{records[0].series}], "
            f"B is {records[1].label} [{records[1].series}]; the diff mixes workload or hardware changes"
        )
    profiles = {r.run_id: profile_from_run(mlflow, r.run_id, r.profiled_steps, r.step_time_ms, rank) for r in records}
    # a run that did not finish is named first: its missing tables are why, not the age of the other's layout
    for r in sorted(records, key=lambda r: statuses[r.run_id] == "FINISHED"):
        status = statuses[r.run_id]
        if profiles[r.run_id] is not None:
            continue
        if status != "FINISHED":
            why = "is still RUNNING" if status == "RUNNING" else f"ended {status} before its profiler window closed"
            raise ConfigError(f"run {r.run_id} {why} (no key_averages tables): nothing to compare per operator")
        raise ConfigError(
            f"run {r.run_id} has no key_averages tables (logged before they existed?): nothing to compare per operator"
        )
    found = [p for p in (profiles[r.run_id] for r in records) if p is not None]
    return attribute(found[:1], found[1:], top=None), warning


def _log_diff(run_id: str, result) -> None:
    import pandas as pd

    from yolo_mlops import names
    from yolo_mlops.tracking import connection, writes

    frame = pd.DataFrame(
        [
            {
                "kind": c.kind,
                "name": c.name,
                "a_ms_per_step": c.before_ms,
                "b_ms_per_step": c.after_ms,
                "delta_ms_per_step": c.delta_ms,
                "share_of_step_delta_pct": c.share_pct,
            }
            for c in result.contributions
        ]
    )
    writes.log_table(connection.client(), run_id, frame, names.COMPARE_TABLE)


def register(sub) -> None:
    p = sub.add_parser("compare", help="per-step operator/kernel/phase diff of two runs (MLflow ids) or traces")
    p.add_argument("a", help="MLflow run id or trace file (the baseline)")
    p.add_argument("b", help="MLflow run id or trace file (compared with A)")
    p.add_argument("--top", type=int, default=20, help="rows shown (default 20); the logged table has all")
    p.add_argument(
        "--rank",
        type=int,
        help="data-parallel jobs: compare this rank's tables (default: each job's "
        "slowest rank, the one its perf/* headline is over)",
    )
    p.add_argument("--format", choices=["text", "json"], default="text")
    p.set_defaults(handler=cmd_compare)
