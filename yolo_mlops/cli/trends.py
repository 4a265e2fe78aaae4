"""`yolo-mlops trends`: the series of an experiment with their latest status, or one series' history,
change points, what changed and operator attribution; `--plot FILE` writes the picture."""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict
from pathlib import Path

from yolo_mlops import names
from yolo_mlops.errors import ConfigError
from yolo_mlops.render import figure_path_problem

DEFAULT_EXPERIMENT = names.BENCHMARK_EXPERIMENT


def cmd_trends(args: argparse.Namespace) -> int:
    from yolo_mlops.tracking import connection
    from yolo_mlops.trends import history, power, trend_report
    from yolo_mlops.trends.attribution import change_point_attributions
    from yolo_mlops.trends.trend import DetectionSettings, series_trend

    _check_args(args)
    settings = DetectionSettings(max_pvalue=args.max_pvalue)
    mlflow = connection.checked_client()
    if args.series is None:
        grouped = history.load_experiment_series(mlflow, args.experiment, args.across_machines)
        # the watched metrics of every series; its operator series are judged with --series (and each night)
        _print_all_series([series_trend(runs, settings, operators=False) for runs in grouped.values()], args)
        return 0
    key, runs = history.load_one_series(mlflow, args.experiment, args.series, args.across_machines)
    if len(runs) < 2:
        raise ConfigError(f"series {key} has one run ({runs[0].run_id}): no history to analyze yet")
    trend = series_trend(runs, settings)
    wanted = [args.metric] if args.metric else None
    if args.metric and trend.metric(args.metric) is None:
        raise ConfigError(f"no run of series {key} logged {args.metric}")
    attributions = change_point_attributions(mlflow, trend)
    detectable = power.for_trend(trend, _repeats(trend, args.repeats))
    if args.format == "json":
        print(json.dumps(_series_json(trend, attributions, detectable, wanted, args.repeats), indent=2, default=str))
    else:
        print(trend_report.series_report(trend, attributions, wanted, detectable))
    if args.plot is not None:
        trend_report.plot_series(trend, args.plot, wanted)
        print(f"\nplot: {args.plot}")
    return 0


def _check_args(args: argparse.Namespace) -> None:
    """Every argument judged before any store is opened: one line for each mistake."""
    from yolo_mlops.trends import bounds
    from yolo_mlops.trends.trend import WATCHED_BY_NAME, is_operator

    if args.metric and args.metric not in WATCHED_BY_NAME and not is_operator(args.metric):
        raise ConfigError(
            f"--metric {args.metric!r} is not watched; one of: {', '.join(WATCHED_BY_NAME)}, or an operator "
            f"series {names.OP_HOST_PREFIX}<operator> / {names.OP_DEVICE_PREFIX}<operator>"
        )
    problem = None if args.plot is None else figure_path_problem(args.plot)
    if problem is not None:
        raise ConfigError(f"--plot {args.plot}: {problem}")
    bounds.check_pvalue("--max-pvalue", args.max_pvalue)
    if args.repeats is not None and args.repeats < 1:
        raise ConfigError(f"--repeats {args.repeats}: must be >= 1")
    if args.plot is not None and args.series is None:
        raise ConfigError("--plot needs --series KEY (one picture per series)")


def _print_all_series(series: list, args: argparse.Namespace) -> None:
    """Every series of the experiment, newest first: its status and change points, and its detection power."""
    from yolo_mlops.trends import power, trend_report
    from yolo_mlops.trends.trend import latest_status

    series.sort(key=lambda t: -t.runs[-1].start_time_ms)
    detectable_by_series = {t.series: power.for_trend(t, _repeats(t, args.repeats)) for t in series}
    if args.format == "json":
        rows = [
            {
                "series": t.series,
                "label": t.label,
                "runs": len(t.runs),
                "latest_status": latest_status(t),
                "change_points": sum(len(m.changes) for m in t.metrics),
                "drifts": [m.metric for m in t.metrics if m.drift is not None],
                "min_detectable_shift_pct": {d.metric: _finite(d.shift_pct) for d in detectable_by_series[t.series]},
                "repeats": _repeats(t, args.repeats),
            }
            for t in series
        ]
        print(json.dumps(rows, indent=2))
        return
    print(f"{len(series)} series in experiment {args.experiment!r}\n")
    print(trend_report.series_table(series))
    print(
        "\nsmallest step in step time found in one night (90% of nights; noise from the runs since the "
        "last level change):"
    )
    for t in series:
        for d in detectable_by_series[t.series]:
            if d.metric == names.STEP_TIME_P50:
                print(f"- {t.series}: " + trend_report.detectable_line(d))


def _series_json(trend, attributions, detectable, wanted: list[str] | None, repeats: int | None) -> dict:
    """One series as `--format json` writes it: watched metrics and operator series, power, findings, renames."""
    from yolo_mlops.trends import operators, power
    from yolo_mlops.trends.trend import latest_status

    def kept(metric: str) -> bool:
        return not wanted or metric in wanted

    return {
        "series": trend.series,
        "label": trend.label,
        "latest_status": latest_status(trend),
        "min_detectable_shift": [
            {**asdict(d), "shift_pct": _finite(d.shift_pct)} for d in detectable if kept(d.metric)
        ],
        "metrics": [asdict(m) for m in trend.metrics if kept(m.metric)],
        "operators": [asdict(m) for m in trend.operators if kept(m.metric)],
        "operator_min_detectable_shift": [
            {**asdict(d), "shift_pct": _finite(d.shift_pct)}
            for d in power.for_operators(trend, _repeats(trend, repeats))
            if kept(d.metric)
        ],
        "operator_findings": [
            {
                **asdict(f),
                "factor": _finite(f.factor),
                "delta_ms": f.delta_ms,
                "share_pct": f.share_pct,
                "severity": f.severity,
                "below_step_power": f.below_step_power,
            }
            for f in operators.history_findings(trend, _step_power(detectable))
            if kept(f.metric)
        ],
        "renames": [asdict(r) for r in trend.renames],
        "attributions": [{"metric": k[0], "run_id": k[1], **a.to_dict()} for k, a in attributions.items()],
    }


def _repeats(trend, given: int | None) -> int:
    """Runs a night for the detection power: as given, else the runs of the series' newest night (3 without)."""
    if given is not None:
        return given
    night = trend.runs[-1].night
    return sum(r.night == night for r in trend.runs) if night is not None else 3


def _step_power(detectable) -> float | None:
    return next((d.shift_pct for d in detectable if d.metric == names.STEP_TIME_P50), None)


def _finite(value: float) -> float | None:
    return value if value != float("inf") else None


def register(sub) -> None:
    p = sub.add_parser("trends", help="series of an experiment, change points over their history, what changed")
    p.add_argument("--experiment", default=DEFAULT_EXPERIMENT, help=f"MLflow experiment (default {DEFAULT_EXPERIMENT})")
    p.add_argument("--series", help="one series' history and change points (key, or a unique prefix of it)")
    p.add_argument(
        "--metric", help="only this watched metric (e.g. perf/step_time_ms_p50) or operator series (op/cpu/aten::mm)"
    )
    p.add_argument("--plot", type=Path, help="write the series' picture (PNG) to this file")
    p.add_argument("--max-pvalue", type=float, default=0.001, help="significance of a change point (default 0.001)")
    p.add_argument(
        "--across-machines",
        action="store_true",
        help="judge every machine's runs of a workload as one history (a series is one machine's)",
    )
    p.add_argument(
        "--repeats",
        type=int,
        help="runs a night for the smallest detectable step (default: the runs of the series' newest night)",
    )
    p.add_argument("--format", choices=["text", "json"], default="text")
    p.set_defaults(handler=cmd_trends)
