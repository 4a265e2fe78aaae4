"""`yolo-mlops compare A B`: per-step operator / kernel / phase diff of two MLflow runs, two sets of runs, or two
trace files.

Run ids (A and B each one run id, or several joined by commas: a set): self times from the runs' key_averages
tables and phases from their trace analysis, normalised per profiled step, and which operators changed beyond
their own noise (`trends.operators.compare_operators`: each operator's log time, B against A, its noise pooled
within the two sets, or, with one run a side, its run-to-run noise over B's series' history; Holm over the
operators); the diff is logged as an MLflow table on B's (last) run. Trace files: yolo_mlops.analysis of each
trace (host operators with inclusive time, kernels, phases), per step, one trace a side: no noise to judge by.
Runs of different series may be compared; the output says so first.
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
    tests = None
    if all(as_files):
        result, warning, run_b = _compare_traces(a, b, args.rank), None, None
    elif any(as_files):
        raise ConfigError(
            f"compare needs two trace files or two MLflow run ids; {a if as_files[0] else b} "
            f"is a file and {b if as_files[0] else a} is not"
        )
    else:
        set_a, set_b = _run_ids(a), _run_ids(b)
        result, warning, tests = _compare_runs(set_a, set_b, args.rank)
        run_b = set_b[-1]
    shown = dataclasses.replace(result, contributions=result.contributions[: args.top])
    if args.format == "json":
        ops = None if tests is None else [{**dataclasses.asdict(t), "factor": _finite(t.factor)} for t in tests]
        print(json.dumps({"a": a, "b": b, "warning": warning, **shown.to_dict(), "operators": ops}, indent=2))
    else:
        from yolo_mlops.trends.trend_report import attribution_text

        if warning:
            print(warning + "\n")
        print(f"A = {a}\nB = {b}")
        print(attribution_text(shown, indent=""))
        if tests is not None:
            print("\n" + _operator_text(tests, args.top))
    if run_b is not None and result.contributions:
        _log_diff(run_b, result, tests)
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


def _run_ids(arg: str) -> list[str]:
    """One run id, or several joined by commas (a set of runs)."""
    ids = [x.strip() for x in arg.split(",") if x.strip()]
    if not ids:
        raise ConfigError(f"compare: {arg!r} names no run")
    if len(set(ids)) < len(ids):
        raise ConfigError(f"compare: {arg!r} names a run twice")
    return ids


def _compare_runs(set_a: list[str], set_b: list[str], rank: int | None = None):
    from yolo_mlops.tracking import connection, queries
    from yolo_mlops.trends.attribution import attribute, profile_from_run
    from yolo_mlops.trends.history import record_from_stored

    both = sorted(set(set_a) & set(set_b))
    if both:
        raise ConfigError(
            f"compare: run {both[0]} is in both A and B: a run compared with itself shows nothing; give two "
            "different runs or sets"
        )
    mlflow = connection.checked_client()
    records = []
    statuses: dict[str, str] = {}
    for run_id in (*set_a, *set_b):
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
    series = {r.series: r for r in records}
    if len(series) > 1:
        first, *others = series.values()
        warning = (
            f"WARNING: DIFFERENT SERIES - {first.run_id} is {first.label} [{first.series}], "
            + ", ".join(f"{r.run_id} is {r.label} [{r.series}]" for r in others)
            + "; the diff mixes workload or hardware changes"
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
    found_a = [p for p in (profiles[i] for i in set_a) if p is not None]
    found_b = [p for p in (profiles[i] for i in set_b) if p is not None]
    noise = None
    if len(found_a) < 2 or len(found_b) < 2:  # one run a side: each operator's noise from B's series' history
        noise = _history_noise(mlflow, records[-1])
    tests = _operator_tests(found_a, found_b, noise)
    return attribute(found_a, found_b, top=None), warning, tests


def _history_noise(mlflow, record) -> dict[str, tuple[float, int]]:
    """Each operator's run-to-run noise over the FINISHED runs of the record's series (its experiment)."""
    from yolo_mlops.trends import operators
    from yolo_mlops.trends.history import load_series_history
    from yolo_mlops.trends.trend import series_trend

    runs = load_series_history(mlflow, [record.experiment_id], [record.series]) or []
    if len(runs) < 3:
        return {}
    return operators.history_noise(series_trend(runs, operators=True, metrics=()).operators)


def _operator_tests(a, b, noise):
    from yolo_mlops.trends import operators

    return operators.compare_operators(a, b, noise)


def _operator_text(tests, top: int) -> str:
    from yolo_mlops.render import fmt, markdown_table
    from yolo_mlops.trends import operators

    judged = [t for t in tests if t.pvalue is not None]
    beyond = [t for t in tests if t.beyond_noise]
    head = (
        f"operators beyond their own noise: {len(beyond)} of {len(judged)} tested (Holm over them at "
        f"{operators.COMPARE_ALPHA:g}: with nothing changed, any is named with probability at most that)"
    )
    if len(judged) < len(tests):
        head += f"; {len(tests) - len(judged)} without a noise estimate (one run a side and no series history)"
    rows = [
        (
            t.kind,
            t.name[:70],
            fmt(t.a_ms),
            fmt(t.b_ms),
            "new" if t.factor == float("inf") else f"x{t.factor:.3g}",
            fmt(t.noise_pct, ".1f"),
            t.noise_from or "-",
            fmt(t.adjusted, ".2g"),
            "yes" if t.beyond_noise else "no",
        )
        for t in tests[:top]
    ]
    return (
        head
        + "\n"
        + markdown_table(
            ["kind", "name", "A ms/step", "B ms/step", "B/A", "noise %", "noise from", "p (Holm)", "beyond noise"],
            rows,
        )
    )


def _finite(value: float) -> float | None:
    return value if value != float("inf") else None


def _log_diff(run_id: str, result, tests=None) -> None:
    import pandas as pd

    from yolo_mlops import names
    from yolo_mlops.tracking import connection, writes

    judged = {(t.kind, t.name): t for t in tests or []}
    frame = pd.DataFrame(
        [
            {
                "kind": c.kind,
                "name": c.name,
                "a_ms_per_step": c.before_ms,
                "b_ms_per_step": c.after_ms,
                "delta_ms_per_step": c.delta_ms,
                "share_of_step_delta_pct": c.share_pct,
                "noise_pct": t.noise_pct if (t := judged.get((c.kind, c.name))) else None,
                "pvalue_holm": t.adjusted if t else None,
                "beyond_noise": t.beyond_noise if t else None,
            }
            for c in result.contributions
        ]
    )
    writes.log_table(connection.client(), run_id, frame, names.COMPARE_TABLE)


def register(sub) -> None:
    p = sub.add_parser(
        "compare",
        help="per-step operator/kernel/phase diff of two runs or sets of runs (MLflow ids) or traces, and which "
        "operators changed beyond their own noise",
    )
    p.add_argument("a", help="MLflow run id, several joined by commas (a set of runs), or a trace file (the baseline)")
    p.add_argument("b", help="MLflow run id, several joined by commas, or a trace file (compared with A)")
    p.add_argument("--top", type=int, default=20, help="rows shown (default 20); the logged table has all")
    p.add_argument(
        "--rank",
        type=int,
        help="data-parallel jobs: compare this rank's tables (default: each job's "
        "slowest rank, the one its perf/* headline is over)",
    )
    p.add_argument("--format", choices=["text", "json"], default="text")
    p.set_defaults(handler=cmd_compare)
