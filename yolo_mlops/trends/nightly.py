"""One night of the benchmark suite, judged: each series' verdict, its confirmation, its record on the runs.

The `benchmark` flow runs the suite's profiled runs; everything it decides about them lives here, as plain
functions over an MLflow client:

- `judge_night`: the verdict of every series that tonight's runs belong to (change points, drift, version
  boundaries, detection power), logged on tonight's runs as tags, metrics and the series' picture and report.
  A new regression can be held back for confirmation runs and judged again over them (`confirm`).
- `Night`: what a night ran so far (its runs by experiment and configuration, failures, notes).
- the confirmation rounds as data: `awaiting_confirmation` (the series to re-measure), `confirmation_round`
  (what the second judging looks at), `with_confirmations` (the night's verdicts); the flow makes the runs.
- `repeats_needed`: `repeats="auto"`, the runs a configuration needs tonight to see the suite's target shift.
- `markdown` and `failure_message`: what the flow publishes and what it fails with.
"""

from __future__ import annotations

import tempfile
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from yolo_mlops import names
from yolo_mlops.config import BenchmarkSuite, RunSpec
from yolo_mlops.render import markdown_table
from yolo_mlops.tracking import queries, writes
from yolo_mlops.trends import confirm, operators, power, trend_report
from yolo_mlops.trends.attribution import Attribution, change_point_attributions
from yolo_mlops.trends.commit_range import BisectRange, bisect_range, candidate_range
from yolo_mlops.trends.history import HistoryRun, load_series_of
from yolo_mlops.trends.trend import (
    DetectionSettings,
    SeriesTrend,
    SeriesVerdict,
    Status,
    is_operator,
    series_trend,
    verdict,
)

if TYPE_CHECKING:
    from yolo_mlops.tracking.connection import MlflowClient


@dataclass
class JudgedSeries:
    series: str
    label: str
    status: Status
    runs_tonight: list[str]
    history_runs: int
    new_changes: list[str]  # one line per new change point: metric, magnitude, run, what changed, attribution
    plot_run_id: str  # the run whose trends/series.png shows the series (tonight's last in it)
    confirm_metrics: list[str] = field(default_factory=list)  # metrics whose new regression awaits confirmation
    confirmation: str = ""  # what the confirmation runs showed: confirmed or dismissed, with how many runs
    confirmation_runs: list[str] = field(default_factory=list)
    min_detectable_pct: dict[str, float] = field(default_factory=dict)  # per metric: smallest step seen (at `power`)
    bisect: list[BisectRange] = field(default_factory=list)  # new regressions whose runs ran different commits
    notes: list[str] = field(default_factory=list)
    machine: str | None = None  # the machine the series runs on (its runs' env.machine): where to bisect it


@dataclass
class Night:
    """What one night of the suite ran so far: its runs by experiment (the unit judged), the configuration each
    run ran (by index into the suite), the failures to report and a note per configuration (repeats='auto')."""

    night_id: str  # the benchmark flow run: tag BENCHMARK_NIGHT of every run
    runs_by_experiment: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))
    config_of: dict[str, tuple[int, RunSpec]] = field(default_factory=dict)  # run id -> (suite index, spec ran)
    failures: list[str] = field(default_factory=list)
    notes: dict[int, str] = field(default_factory=dict)  # suite index -> note

    def tagged(self, spec: RunSpec, extra_tags: dict[str, str] | None = None) -> RunSpec:
        """The configuration as tonight runs it: a benchmark run of this night."""
        return spec.model_copy(
            update={
                "run_kind": "benchmark",
                "tags": {**spec.tags, names.BENCHMARK_NIGHT: self.night_id, **(extra_tags or {})},
            }
        )

    def ran(self, index: int, spec: RunSpec, run_id: str) -> None:
        self.runs_by_experiment[spec.experiment].append(run_id)
        self.config_of[run_id] = (index, spec)

    def runs_of(self, index: int) -> list[str]:
        return [run_id for run_id, (i, _) in self.config_of.items() if i == index]

    def spec_of(self, judged: JudgedSeries) -> RunSpec:
        """The configuration a judged series ran tonight (its confirmation runs re-run it)."""
        return self.config_of[judged.runs_tonight[0]][1]

    def confirmation_repeats(self, judged: JudgedSeries, suite: BenchmarkSuite) -> int:
        """Runs that re-measure a judged series: `confirm_repeats`, and under repeats='auto' at least as many as
        the series ran tonight (the runs its noise needed to see the target shift): the confirmation test, at
        `confirm_pvalue` with the night's offset allowed for, must not be what misses the step (fewer confirmation
        runs than auto runs miss more of the target steps: docs/trends.md, "Confirmation")."""
        if suite.confirm_repeats == 0 or suite.repeats != "auto":
            return suite.confirm_repeats
        return max(suite.confirm_repeats, len(judged.runs_tonight))

    def add_notes(self, judged: list[JudgedSeries]) -> None:
        """Each series gets the notes of the configurations its runs ran."""
        for j in judged:
            indices = {self.config_of[r][0] for r in j.runs_tonight if r in self.config_of}
            j.notes += sorted({self.notes[i] for i in indices if self.notes.get(i)})


def first_round_counts(suite: BenchmarkSuite) -> list[int]:
    """Runs per configuration before any is judged: `repeats`, or 2 each when repeats='auto' (its history and
    those two then say how many more it needs, `repeats_needed`)."""
    return [suite.repeats if isinstance(suite.repeats, int) else 2] * len(suite.runs)


@dataclass(frozen=True)
class JudgingRound:
    """Which look at tonight's runs a judging is. The first: a new regression is held back for confirmation
    where `confirm_repeats` > 0. The confirmation's: `confirmations` (series -> its confirmation runs) and
    `suspects` (series -> the metrics to confirm), only those series judged again."""

    confirm_repeats: int = 0
    confirmations: dict[str, list[str]] | None = None
    suspects: dict[str, list[str]] | None = None


def awaiting_confirmation(first: list[JudgedSeries]) -> list[JudgedSeries]:
    """The series of a first round whose new regression is re-measured before it alerts."""
    return [j for j in first if j.confirm_metrics]


def confirmation_round(pending: list[JudgedSeries], runs: dict[str, list[str]]) -> JudgingRound:
    """The second look: the series awaiting confirmation, judged over their confirmation runs (series -> ids)."""
    return JudgingRound(confirmations=runs, suspects={j.series: j.confirm_metrics for j in pending})


def with_confirmations(first: list[JudgedSeries], again: list[JudgedSeries]) -> list[JudgedSeries]:
    """The night's verdicts: a series judged again replaces its first verdict, the others keep theirs."""
    by_series = {j.series: j for j in again}
    return [by_series.get(j.series, j) for j in first]


def judge_night(
    mlflow: MlflowClient,
    experiment: str,
    run_ids: list[str],
    settings: DetectionSettings,
    judging: JudgingRound = JudgingRound(),
) -> list[JudgedSeries]:
    """Verdict of every series that tonight's runs belong to, logged on each of tonight's runs. In the first
    round, a series whose new regression awaits confirmation is returned unlogged with `confirm_metrics`; the
    confirmation round judges only those series over tonight's and the confirmation runs and logs them."""
    confirm_repeats, confirmations, suspects = judging.confirm_repeats, judging.confirmations, judging.suspects
    tonight = set(run_ids)
    judged = []
    for key, runs in sorted(load_series_of(mlflow, experiment, run_ids).items()):
        tonights_runs = [r.run_id for r in runs if r.run_id in tonight]
        if not tonights_runs or (confirmations is not None and key not in confirmations):
            continue  # a series no run of tonight belongs to: judged on the nights it runs
        trend = series_trend(runs, settings)
        extra: list[str] = []
        outcome: confirm.Confirmation | None = None
        pending: tuple[str, ...] = ()
        if confirmations is not None:
            extra = confirmations[key]
            night_verdict, outcome = confirm.judge(trend, set(tonights_runs), set(extra), tuple((suspects or {})[key]))
        else:
            night_verdict = verdict(trend, tonight)
            pending = confirm.needs_confirmation(night_verdict) if confirm_repeats > 0 else ()
        found = change_point_attributions(mlflow, trend)
        detectable = power.for_trend(trend, len(tonights_runs), settings.max_pvalue)
        if not pending:
            log_on_runs(mlflow, tonights_runs + extra, trend, night_verdict, found, detectable, outcome, tonights_runs)
        judged.append(
            JudgedSeries(
                series=key,
                label=trend.label,
                status=night_verdict.status,
                runs_tonight=tonights_runs,
                history_runs=len(runs),
                new_changes=_change_lines(trend, night_verdict, found, detectable),
                plot_run_id=(tonights_runs + extra)[-1],
                confirm_metrics=list(pending),
                confirmation=outcome.summary() if outcome else "",
                confirmation_runs=extra,
                min_detectable_pct={d.metric: round(d.shift_pct, 3) for d in detectable},
                bisect=[r for c in night_verdict.new_changes if (r := bisect_range(c)) is not None]
                + [r for c in night_verdict.new_candidates if (r := candidate_range(c)) is not None],
                machine=next((r.machine for r in reversed(runs) if r.machine), None),
            )
        )
    return judged


def _change_lines(
    trend: SeriesTrend,
    night_verdict: SeriesVerdict,
    found: dict[tuple[str, str], Attribution],
    detectable: list[power.MinDetectable] = (),  # type: ignore[assignment]
) -> list[str]:
    """One line per new event of the night: change points (operators as findings of their own, with their share of
    the step against the step time's detection power), moved version boundaries, drifts, operator renames."""
    step_power = next((d.shift_pct for d in detectable if d.metric == names.STEP_TIME_P50), None)
    lines = []
    for change in night_verdict.new_changes:
        if is_operator(change.metric):
            line = operators.finding_line(operators.finding(trend, change, step_power))
            if command := trend_report.bisect_command(change):
                line += f"; bisect it: `{command}`"
            lines.append(line)
            continue
        line = trend_report.change_line(change, _unit(trend, change.metric))
        attribution = found.get((change.metric, change.run_id))
        if attribution is not None:
            line += "; moved: " + attribution.summary()
        if command := trend_report.bisect_command(change):
            line += f"; bisect it: `{command}`"
        lines.append(line)
    for c in night_verdict.new_candidates:
        if is_operator(c.metric):
            line = operators.finding_line(operators.finding(trend, c, step_power))
            target = candidate_range(c)
            lines.append(line + (f"; bisect it: `{target.command()}`" if target else ""))
        else:
            lines.append(trend_report.candidate_line(c, _unit(trend, c.metric)))
    lines += [trend_report.drift_line(d, _unit(trend, d.metric)) for d in night_verdict.new_drifts]
    lines += [operators.rename_line(r) for r in night_verdict.new_renames]
    return lines


def _unit(trend: SeriesTrend, metric: str) -> str:
    watched = trend.metric(metric)
    return watched.unit if watched is not None else ""


def log_on_runs(
    mlflow: MlflowClient,
    run_ids: list[str],
    trend: SeriesTrend,
    night_verdict: SeriesVerdict,
    found: dict[tuple[str, str], Attribution],
    detectable=(),
    outcome: confirm.Confirmation | None = None,
    tonight: list[str] | None = None,
) -> None:
    """The night's verdict tags on every run of `run_ids`, the detection power on tonight's, and the series'
    picture and report as artifacts of each."""
    tags: dict[str, str] = {names.TREND: night_verdict.status}
    # an operator series' verdict only when it is not stable: a series judges 20 or more of them
    tags.update(
        {
            names.trend_metric_tag(metric): status
            for metric, status in night_verdict.per_metric.items()
            if status != "stable" or not is_operator(metric)
        }
    )
    if night_verdict.new_changes:
        tags[names.TREND_CHANGE_RUN] = night_verdict.new_changes[0].run_id
    if outcome is not None:
        tags[names.TREND_EVIDENCE] = outcome.summary()[: names.TAG_MAX_CHARS]
    metrics = {
        names.min_detectable_shift_metric(d.metric): d.shift_pct for d in detectable if d.shift_pct < float("inf")
    }
    with tempfile.TemporaryDirectory(prefix="yolo-mlops-trends-") as tmp:
        folder = Path(tmp) / names.TRENDS_DIR
        folder.mkdir()
        trend_report.plot_series(trend, folder / names.file_name(names.TRENDS_PLOT_PNG))
        text = trend_report.series_report(trend, found, detectable=detectable)
        if outcome is not None:
            text += "\n\nConfirmation: " + outcome.summary()
        (folder / names.file_name(names.TRENDS_REPORT_MD)).write_text(text)
        for run_id in run_ids:
            on_tonight = tonight is None or run_id in tonight
            writes.log_values(mlflow, run_id, tags=tags, metrics=metrics if on_tonight else {})
            writes.log_folder(mlflow, run_id, folder, names.TRENDS_DIR)


def repeats_needed(
    mlflow: MlflowClient, suite: BenchmarkSuite, config_index: int, tonights_runs: list[str]
) -> tuple[int, str]:
    """repeats='auto': the runs configuration `config_index` needs tonight to detect `target_shift_pct` in its
    step time, within `max_repeats`, and a note saying why."""
    cap, target = suite.max_repeats, suite.target_shift_pct
    if cap is None or target is None:
        raise ValueError("repeats='auto' needs target_shift_pct and max_repeats")  # BenchmarkSuite refuses it first
    if not tonights_runs:
        return 0, ""
    grouped = load_series_of(mlflow, suite.runs[config_index].experiment, tonights_runs[:1])
    runs: list[HistoryRun] = next((v for v in grouped.values() if any(r.run_id == tonights_runs[0] for r in v)), [])
    history = [r for r in runs if r.run_id not in tonights_runs]
    if len(history) < 2:
        return cap, f"repeats auto: no step-time history yet, {cap} runs (the cap)"
    step = series_trend(history, DetectionSettings(max_pvalue=suite.max_pvalue), operators=False).metric(
        names.STEP_TIME_P50
    )
    if step is None:
        return cap, f"repeats auto: no step-time history yet, {cap} runs (the cap)"
    recent = power.recent_segment(step)
    found = power.for_values(step.metric, recent, 2, suite.max_pvalue)
    k, reachable = power.repeats_needed(found.noise_pct, len(recent), target, cap, suite.max_pvalue)
    at_k = power.min_detectable_shift(found.noise_pct, len(recent), k, suite.max_pvalue, power.AUTO_POWER)
    if reachable:
        return k, (
            f"repeats auto: {k} runs detect a {at_k:.2f}% step in step time in "
            f"{power.AUTO_POWER:.0%} of nights (target {target:g}%)"
        )
    return k, (
        f"repeats auto: the cap of {k} runs cannot reach the target {target:g}%: the smallest step found "
        f"in one night ({power.AUTO_POWER:.0%} of nights) is {at_k:.2f}% (noise {found.noise_pct:.2f}%, "
        f"{len(recent)} runs of history)"
    )


def _pct(value: float | None) -> str:
    return "-" if value is None or value == float("inf") else f"{value:.2f}%"


def markdown(judged: list[JudgedSeries], failures: list[str], fleet_sections: list[str]) -> str:
    """The night's Prefect artifact: a verdict table, notes and failures, then the fleet view."""
    rows = [
        (
            f"`{j.series}`",
            j.label,
            f"**{j.status}**",
            len(j.runs_tonight),
            j.history_runs,
            "<br>".join(j.new_changes) or "-",
            j.confirmation or "-",
            _pct(j.min_detectable_pct.get(names.STEP_TIME_P50)),
            f"[picture]({queries.artifact_url(j.plot_run_id, names.TRENDS_PLOT_PNG)})",
        )
        for j in judged
    ]
    table = markdown_table(
        [
            "series",
            "workload",
            "verdict",
            "runs tonight",
            "runs in history",
            "new change points",
            "confirmation",
            "min. detectable step (step time)",
            "plot",
        ],
        rows,
    )
    notes = [f"- {j.series}: {n}" for j in judged for n in j.notes]
    return "\n".join(
        [
            "# Benchmark trends",
            "",
            table,
            "",
            *notes,
            *[f"- FAILED: {f}" for f in failures],
            "",
            "## Fleet",
            "",
            *fleet_sections,
        ]
    )


def failure_message(regressions: list[JudgedSeries], failures: list[str]) -> str:
    """What the night fails with: each new regression with its evidence and notes (the repeats it ran, the
    bisection started), then each run that failed."""
    return "; ".join(
        [
            f"new regression in {j.label} [{j.series}]: "
            f"{' | '.join([*j.new_changes, j.confirmation or 'not re-measured', *j.notes])}"
            for j in regressions
        ]
        + [f"failed run: {f}" for f in failures]
    )
