"""The steps of one profiled run as plain functions over plain data; `flows/` wraps each in a Prefect task.

prepare(spec)  -> PreparedRun   preflight checks, dataset, env fingerprint, creates the MLflow run
train(prep)    -> TrainingOutcome
analyze(prep, outcome) -> RunAnalysis
track(prep, outcome, analysis) -> RunResult
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import yaml

from yolo_mlops import names
from yolo_mlops.analysis import DiagnosisInput, Finding, analyze_traces, diagnose, headline_metrics, write_report
from yolo_mlops.analysis.communication import CommunicationAnalysis
from yolo_mlops.analysis.diagnosis import headline as findings_headline
from yolo_mlops.analysis.document import Block, Heading, Paragraph, Table
from yolo_mlops.analysis.operators import operator_metrics
from yolo_mlops.config import RunSpec, boundary_steps, data_home, steps_per_epoch, window_inside_epoch
from yolo_mlops.config.params import spec_params
from yolo_mlops.nvml import NvmlSummary, align, step_history, summarise, write_timeline
from yolo_mlops.profiling import memory_holders
from yolo_mlops.profiling.job_pace import job_pace
from yolo_mlops.profiling.memory_holders import MemoryByHolder
from yolo_mlops.profiling.step_timer import PerfSummary, StepTimes, perf_summary
from yolo_mlops.run import preflight
from yolo_mlops.run.datasets import DatasetInfo, synthetic_dataset
from yolo_mlops.run.environment import Environment, capture_environment, data_identity, series_key
from yolo_mlops.run.preflight import Preflight
from yolo_mlops.run.training import TrainingOutcome, TrainingPlan, ultralytics_args
from yolo_mlops.tracking import connection, queries, run_end, upload, writes

if TYPE_CHECKING:
    from yolo_mlops.tracking.connection import MlflowClient

_BACKEND_USED = "ddp_backend_used"  # carried from analyze to track, where it becomes the param
DISCARD_FIRST_STEPS = 1  # the first step pays for lazy init (allocator, cuDNN, data workers): not steady state


@dataclass(frozen=True)
class PreparedRun:
    spec: RunSpec
    plan: TrainingPlan
    dataset: DatasetInfo
    env: Environment
    series_key: str
    run_id: str
    experiment_id: str


@dataclass
class RunAnalysis:
    metrics: dict[str, float]  # under their MLflow names: what track() logs and analysis/metrics.json holds
    histories: dict[str, list[tuple[int, float]]]  # metric -> (training step, value)
    tags: dict[str, str] = field(default_factory=dict)
    findings: list[Finding] = field(default_factory=list)  # largest estimated saving first
    report_markdown: str | None = None
    perf: PerfSummary | None = None  # the step timer's summary; None without steps
    gpu: NvmlSummary | None = None  # what the NVML sampler measured (the slowest rank's); None without samples
    rank_gpu: dict[int, NvmlSummary] = field(default_factory=dict)  # a data-parallel job's, per rank
    memory: MemoryByHolder | None = None  # torch's peak-memory split; None when it was not measured


@dataclass(frozen=True)
class RunResult:
    """A finished run: its identity, the typed summaries the report is built from, and what was logged."""

    run_id: str
    experiment_id: str
    run_url: str
    metrics: dict[str, float]  # every metric logged, under its MLflow name (what the UI and `compare` show)
    findings: list[Finding]  # largest estimated saving first
    trace_files: list[str]
    report_markdown: str | None = None
    perf: PerfSummary | None = None
    gpu: NvmlSummary | None = None
    memory: MemoryByHolder | None = None


# prepare ------------------------------------------------------------------------------------------------------


def resolve_dataset(spec: RunSpec, checked: Preflight) -> DatasetInfo:
    """The user's inspected dataset, or the synthetic one (built once, then reused from the cache)."""
    if checked.dataset is not None:
        return checked.dataset
    return synthetic_dataset(data_home() / "datasets", train_images=spec.synthetic_images, seed=spec.seed)


def prepare(spec: RunSpec) -> PreparedRun:
    checked = preflight.check(spec)
    spec, window = place_window(spec, checked)
    dataset, device, steps = resolve_dataset(spec, checked), checked.device, checked.steps
    env = capture_environment(device)
    key = series_key(spec, env, data_identity(dataset.yaml_path, dataset.synthetic), device)
    output_dir = data_home() / "runs" / f"{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}"
    output_dir.mkdir(parents=True)
    plan = TrainingPlan(
        spec=spec,
        data_yaml=dataset.yaml_path,
        device=device,
        output_dir=output_dir,
        steps_expected=steps,
        epochs=checked.epochs,
    )
    mlflow = connection.client()
    tags = {
        names.RUN_KIND: spec.run_kind,
        names.VARIANT: spec.variant,
        names.SERIES: key,
        names.DEVICE_TYPE: env.device_type,
        names.PROFILER_ACTIVITIES: "cpu,cuda" if plan.device != "cpu" else "cpu",
        names.DATASET: "synthetic" if dataset.synthetic else "user",
        **spec.tags,
    }
    tags[names.PROFILER_WINDOW] = window[: names.TAG_MAX_CHARS]
    if env.git_commit:
        tags[names.GIT_COMMIT_TAG] = env.git_commit
    if spec.parent_run_id:
        tags[names.PARENT_RUN_TAG] = spec.parent_run_id
    params = run_params(spec, plan, env)
    try:
        run_id = writes.create_run(mlflow, spec.experiment, spec.run_name, tags, params)
    except BaseException:
        output_dir.rmdir()  # still empty: a store that refuses the run leaves no run folder behind
        raise
    experiment_id = queries.experiment_of(mlflow, run_id)
    # the folder records where its run lives: `yolo-mlops upload` can send what the store missed there later
    upload.write_tracking_info(
        output_dir, upload.TrackingInfo(connection.tracking_uri(), spec.experiment, run_id, spec.run_name, tags, params)
    )
    (output_dir / names.ENV_JSON).write_text(env.to_json())
    (output_dir / names.RUN_SPEC_YAML).write_text(yaml.safe_dump(spec.model_dump(mode="json"), sort_keys=False))
    return PreparedRun(spec, plan, dataset, env, key, run_id, experiment_id)


def place_window(spec: RunSpec, checked: Preflight) -> tuple[RunSpec, str]:
    """The spec with its profiler window inside one epoch where the run allows it, and where the window lies.

    The profiler step of an epoch's first batch also holds the work between the epochs (validation, the
    checkpoint, the next epoch's start, a data-parallel job's closing collectives): a window holding it measures
    that too, and on a data-parallel job one rank's epoch-end work there reads as a stall. The window moves later
    (`profiler.skip_first`) until none of its recorded steps is such a step, as long as it still ends within the
    run; the placement depends only on the spec and the dataset, so a run made again from its run_spec.yaml is
    placed alike. When no placement fits, the window stays where it was asked and the line says which steps hold
    a boundary (the trace analysis names them too)."""
    world = spec.world_size
    per_epoch = steps_per_epoch(-(-checked.train_images // world), spec.batch // world)
    p = spec.profiler
    window = (p.wait, p.warmup, p.active, p.repeat)
    first = window_inside_epoch(p.skip_first, *window, per_epoch, checked.steps)

    def recorded(skip_first: int) -> str:
        start = skip_first + p.wait + p.warmup
        return f"steps {start}-{start + p.active - 1}" if p.repeat == 1 else f"{p.repeat} cycles from step {start}"

    if first is None:
        held = boundary_steps(p.skip_first, *window, per_epoch, checked.steps)
        return spec, (
            f"{recorded(p.skip_first)} hold the epoch boundary at step(s) {', '.join(map(str, held))}: epochs of "
            f"{per_epoch} steps leave no room for the window inside one epoch within {checked.steps} steps"
        )
    if first == p.skip_first:
        return spec, f"{recorded(first)}, inside one epoch (epochs of {per_epoch} steps)"
    print(
        f"profiler window moved {first - p.skip_first} step(s) later (skip_first {p.skip_first} -> {first}) to lie "
        f"inside one epoch (epochs of {per_epoch} steps)"
    )
    placed = spec.model_copy(update={"profiler": p.model_copy(update={"skip_first": first})})
    return placed, (
        f"{recorded(first)}, inside one epoch (epochs of {per_epoch} steps): moved {first - p.skip_first} step(s) "
        f"later than asked ({recorded(p.skip_first)} held the epoch boundary)"
    )


def run_params(spec: RunSpec, plan: TrainingPlan, env: Environment) -> dict[str, str]:
    return {**spec_params(spec, ultralytics_args(plan), plan.steps_expected), **env.as_params()}


# train ------------------------------------------------------------------------------------------------------


def train(prepared: PreparedRun) -> TrainingOutcome:
    from yolo_mlops.run import training

    plan = prepared.plan
    if plan.spec.data_parallel:
        from yolo_mlops.run import ddp

        outcome = job_outcome(ddp.train_job(plan))
    else:
        outcome = training.train(plan)
    _analysis_dir(prepared)  # the folder the step times go to
    if outcome.ranks:  # the job's pace: what sweeps, the nightly and compare read of a data-parallel job
        outcome.steps.save_csv(plan.output_dir / names.STEP_TIMES_CSV)
    for rank in outcome.ranks or [outcome]:
        rank_plan = replace(plan, rank=rank.rank)
        rank.steps.save_csv(rank_plan.rank_path(names.ANALYSIS_DIR) / names.file_name(names.STEP_TIMES_CSV))
        for table in rank.tables:
            name = table.name if rank.rank is None else f"{names.rank_folder(rank.rank)}/{table.name}"
            (rank_plan.rank_path(names.PROFILER_DIR) / f"{table.name}.txt").write_text(table.text)
            upload.save_table(plan.output_dir, name, table.frame)
    return outcome


def job_outcome(ranks: list[TrainingOutcome]) -> TrainingOutcome:
    """A data-parallel job as one outcome: rank 0's losses, validation, settings and memory (rank 0 logs them in
    ultralytics too), the job's pace as its step times (each step its slowest rank's, with every rank's images:
    profiling/job_pace.py), every rank's traces; `ranks` keeps each rank's own. `slowest_rank` is the rank with
    the largest median steady step (its GPU's figures are the job's gpu/*)."""

    def median_step(outcome: TrainingOutcome) -> float:
        summary = perf_summary(outcome.steps, DISCARD_FIRST_STEPS)
        return summary.step_time_ms_p50 if summary is not None else 0.0

    slowest = max(ranks, key=median_step)
    first = ranks[0]
    return replace(
        first,
        steps=job_pace([r.steps for r in ranks]),
        trace_files=[f for r in ranks for f in r.trace_files],
        tables=[],
        profiler_export_s=max(r.profiler_export_s for r in ranks),
        rank=None,
        ranks=ranks,
        slowest_rank=slowest.rank,
    )


def _analysis_dir(prepared: PreparedRun) -> Path:
    folder = prepared.plan.output_dir / names.ANALYSIS_DIR
    folder.mkdir(exist_ok=True)
    return folder


# analyze ----------------------------------------------------------------------------------------------------


def analyze(prepared: PreparedRun, outcome: TrainingOutcome) -> RunAnalysis:
    perf = perf_summary(outcome.steps, DISCARD_FIRST_STEPS)  # a data-parallel job's: its pace, all its images
    rank_metrics, rank_histories = _per_rank_perf(outcome)
    metrics = perf.as_metrics() if perf is not None else {}
    metrics.update(rank_metrics)
    metrics[names.PROFILER_EXPORT_S] = outcome.profiler_export_s
    metrics.update({name: values[-1] for name, values in outcome.step_losses.items() if values})
    metrics.update(outcome.val_metrics)
    per_step: tuple[tuple[str, Iterable[float]], ...] = (
        (names.STEP_TIME_MS, outcome.steps.step_ms),
        (names.DATA_WAIT_MS, outcome.steps.data_wait_ms),
        *outcome.step_losses.items(),
    )
    histories = {name: list(enumerate(values)) for name, values in per_step}
    histories.update(rank_histories)
    result = RunAnalysis(metrics=metrics, histories=histories, perf=perf)
    _count_images(outcome, result)
    _summarise_nvml(prepared, outcome, result)
    _memory_by_holder(outcome, result)
    _operator_metrics(prepared, outcome, result)
    tags = result.tags
    try:
        _analyze_trace(prepared, outcome, result)
        tags[names.ANALYSIS_STATUS] = names.ANALYSIS_OK
    except Exception as exc:  # a broken trace must not lose the run: record why and keep the measurements
        tags[names.ANALYSIS_STATUS] = names.ANALYSIS_FAILED
        tags[names.ANALYSIS_ERROR] = f"{type(exc).__name__}: {exc}"[: names.TAG_MAX_CHARS]
    (_analysis_dir(prepared) / names.file_name(names.METRICS_JSON)).write_text(
        json.dumps(metrics, indent=2, sort_keys=True)
    )
    return result


def _per_rank_perf(outcome: TrainingOutcome) -> tuple[dict[str, float], dict[str, list[tuple[int, float]]]]:
    """A data-parallel job's perf/* per rank (`rank<r>/perf/*`) and each rank's step-time and data-wait history."""
    metrics: dict[str, float] = {}
    histories: dict[str, list[tuple[int, float]]] = {}
    for rank in outcome.ranks:
        assert rank.rank is not None
        summary = perf_summary(rank.steps, DISCARD_FIRST_STEPS)
        if summary is not None:
            metrics.update({names.rank_metric(rank.rank, k): v for k, v in summary.as_metrics().items()})
        for name, values in ((names.STEP_TIME_MS, rank.steps.step_ms), (names.DATA_WAIT_MS, rank.steps.data_wait_ms)):
            histories[names.rank_metric(rank.rank, name)] = list(enumerate(values.tolist()))
        if rank.gradient_bytes is not None and rank.rank == 0:
            metrics[names.COMM_GRADIENT_MIB] = rank.gradient_bytes / 2**20
    if outcome.slowest_rank is not None:
        metrics[names.SLOWEST_RANK] = float(outcome.slowest_rank)
    return metrics, histories


def _allreduce_per_optimizer_step(outcome: TrainingOutcome, comm: CommunicationAnalysis, result: RunAnalysis) -> None:
    """Gradient bytes all-reduced per optimizer step: every gradient once per step that synchronised (the trace
    shows which), over the optimizer steps of the window. Rank 0's: DDP synchronises every rank alike."""
    first = next((r for r in comm.ranks if r.rank == 0), None)
    gradient_bytes = next((r.gradient_bytes for r in outcome.ranks if r.rank == 0 and r.gradient_bytes), None)
    if first is None or not first.optimizer_steps or gradient_bytes is None:
        return
    result.metrics[names.COMM_ALLREDUCE_MIB_PER_OPTIMIZER_STEP] = (
        gradient_bytes / 2**20 * first.synced_steps / first.optimizer_steps
    )


def _count_images(outcome: TrainingOutcome, result: RunAnalysis) -> None:
    """A benchmark on fewer images than the user thinks is a wrong number: say how many were skipped."""
    counts = outcome.train_images
    if counts is None:
        return
    result.metrics[names.TRAIN_IMAGES_USED] = float(counts.used)
    result.metrics[names.TRAIN_IMAGES_SKIPPED] = float(counts.skipped)
    if counts.skipped:
        reasons = [m for m in counts.messages if "ignoring" in m] or list(counts.messages)
        result.tags[names.DATA_WARNINGS] = "\n".join(reasons)[: names.TAG_MAX_CHARS]
        print(
            f"warning: ultralytics skipped {counts.skipped} of {counts.found} training images (corrupt image "
            f"or label; tag {names.DATA_WARNINGS})" + (f", e.g. {reasons[0]}" if reasons else "")
        )


def _summarise_nvml(prepared: PreparedRun, outcome: TrainingOutcome, result: RunAnalysis) -> None:
    """gpu/* metrics, per-step GPU history and the nvml/ timeline; only what the sampler really measured."""
    result.tags[names.NVML_BACKEND] = outcome.nvml.backend
    if outcome.nvml.reasons:
        result.tags[names.NVML_REASON] = "; ".join(outcome.nvml.reasons)[: names.TAG_MAX_CHARS]
    for rank in outcome.ranks or [outcome]:  # a data-parallel rank sampled its own GPU: rank<r>/gpu/*, nvml/rank<r>/
        if not len(rank.nvml):
            continue
        steps = rank.steps
        aligned = align(rank.nvml, steps.start_ns, steps.end_ns, steps.profiled)
        summary = summarise(aligned, steps.images)
        headline = rank.rank is None or rank.rank == outcome.slowest_rank  # the job's gpu/* are its slowest rank's
        if rank.rank is not None:
            result.rank_gpu[rank.rank] = summary
            result.metrics.update({names.rank_metric(rank.rank, k): v for k, v in summary.as_metrics().items()})
        if headline:
            result.gpu = summary
            result.metrics.update(summary.as_metrics())
            for step, name, value in step_history(aligned):
                result.histories.setdefault(name, []).append((step, value))
        folder = replace(prepared.plan, rank=rank.rank).rank_path(names.NVML_DIR)
        write_timeline(aligned, folder)


def _operator_metrics(prepared: PreparedRun, outcome: TrainingOutcome, result: RunAnalysis) -> None:
    """op/*: the operators that make up most of the profiled step, ms per step (analysis/operators.py), from the
    key_averages tables; of the slowest rank in a data-parallel job (its perf/* headline's). None without tables:
    the run's operator series then have a gap, never a zero."""
    chosen = next((r for r in outcome.ranks if r.rank == outcome.slowest_rank), outcome) if outcome.ranks else outcome
    frames = {t.name: t.frame for t in chosen.tables}
    profiler = prepared.spec.profiler
    result.metrics.update(
        operator_metrics(
            frames.get(names.KEY_AVERAGES_SELF_CPU),
            frames.get(names.KEY_AVERAGES_SELF_DEVICE),
            profiler.active * profiler.repeat,
        )
    )


def _memory_by_holder(outcome: TrainingOutcome, result: RunAnalysis) -> None:
    """memory/* metrics only when torch's memory profiler measured them; the tag says either way."""
    result.tags[names.MEMORY_BY_HOLDER] = outcome.memory_by_holder_status[: names.TAG_MAX_CHARS]
    if outcome.memory_by_holder is not None:
        result.memory = outcome.memory_by_holder
        result.metrics.update(outcome.memory_by_holder.metrics())


def _analyze_trace(prepared: PreparedRun, outcome: TrainingOutcome, result: RunAnalysis) -> None:
    """Trace breakdown, diagnosis and report of the last profiler cycle (the most warmed-up one)."""
    result.tags[names.CUDA_MEMORY_SNAPSHOT] = outcome.memory_snapshot
    if not outcome.trace_files:
        raise FileNotFoundError("the profiler wrote no trace (training ended before the window closed?)")
    folder = _analysis_dir(prepared)
    # the last (most warmed-up) cycle; of every rank in a data-parallel job
    trace = analyze_traces(
        [r.trace_files[-1] for r in outcome.ranks if r.trace_files] if outcome.ranks else outcome.trace_files[-1]
    )
    if trace.communication is not None:
        result.tags[_BACKEND_USED] = trace.communication.backend
        _allreduce_per_optimizer_step(outcome, trace.communication, result)
    if trace.warnings:
        result.tags[names.ANALYSIS_WARNINGS] = "\n".join(trace.warnings)[: names.TAG_MAX_CHARS]
    (folder / names.file_name(names.TRACE_ANALYSIS_JSON)).write_text(trace.to_json())
    result.metrics.update(headline_metrics(trace))
    perf = result.perf
    gpu = result.gpu or NvmlSummary(outcome.nvml.backend)  # None fields: not measured
    findings = diagnose(
        DiagnosisInput(
            analysis=trace,
            data_wait_pct=perf.data_wait_pct if perf is not None else None,
            device_type=prepared.env.device_type,
            amp=outcome.applied.mixed_precision,
            cudnn_benchmark=outcome.applied.cudnn_benchmark,
            gpu_memory_total_gib=gpu.mem_total_gib,
            peak_memory_gib=gpu.mem_used_gib_max,
            sm_util_pct=gpu.sm_util_pct_mean,
            dram_util_pct=gpu.dram_bw_util_pct_mean,
            batch_size=prepared.spec.batch,
            workers=prepared.spec.workers,
            step_time_ms=perf.step_time_ms_mean if perf is not None else None,
            rank_sm_clock_mhz={
                rank: clock
                for rank, gpu_of_rank in result.rank_gpu.items()
                if (clock := gpu_of_rank.sm_clock_mhz_mean) is not None
            },
        )
    )
    result.findings = findings
    result.metrics[names.FINDINGS_COUNT] = float(len(findings))
    (folder / names.file_name(names.FINDINGS_JSON)).write_text(json.dumps([f.to_dict() for f in findings], indent=2))
    nvml_plot = prepared.plan.output_dir / names.NVML_TIMELINE_PNG
    headline = {**(perf.as_metrics() if perf is not None else {}), names.PROFILER_EXPORT_S: outcome.profiler_export_s}
    sections: list[Block] = (
        []
        if result.memory is None
        else [
            Heading(memory_holders.SECTION_TITLE),
            Paragraph(memory_holders.SECTION_TEXT),
            Table(memory_holders.TABLE_HEADERS, memory_holders.table_rows(result.memory)),
        ]
    )
    write_report(
        folder, trace, findings, extra=headline, nvml_plot=nvml_plot if nvml_plot.exists() else None, sections=sections
    )
    result.report_markdown = (folder / names.file_name(names.REPORT_MD)).read_text()


# track ------------------------------------------------------------------------------------------------------


def track(prepared: PreparedRun, outcome: TrainingOutcome, analysis: RunAnalysis) -> RunResult:
    mlflow = connection.client()
    run_id = prepared.run_id
    tags = outcome.applied.tags()
    tags.update(analysis.tags)
    params = {}
    if len(outcome.nvml):  # GPM needs a minimum gap between samples, so the interval may differ from the asked one
        params[names.SAMPLER_EFFECTIVE_INTERVAL] = f"{outcome.nvml.interval_s * 1000:g}"
    if outcome.ranks:
        backend = analysis.tags.pop(_BACKEND_USED, None)
        if backend:
            params[names.DDP_BACKEND_PARAM] = backend
        params.update({f"{names.DDP_APPLIED_PREFIX}{k}": str(v) for k, v in (outcome.ddp_applied or {}).items()})
    # a metric with a per-step history gets no extra summary point: MLflow shows its last step as its value
    summary = {k: v for k, v in analysis.metrics.items() if k not in analysis.histories}
    record = upload.UploadRecord(
        status="FINISHED", metrics=summary, histories=analysis.histories, tags=tags, params=params
    )
    upload.write_record(prepared.plan.output_dir, record)  # first: if the store fails now, `upload` sends it
    writes.log_values(
        mlflow,
        run_id,
        metrics=summary,
        histories=analysis.histories,
        tags=tags,
        params=params,
        timestamp_ms=record.timestamp_ms,
    )
    upload_run_folder(mlflow, prepared)
    for rank in outcome.ranks or [outcome]:
        folder = "" if rank.rank is None else f"{names.rank_folder(rank.rank)}/"
        for table in rank.tables:
            writes.log_table(mlflow, run_id, table.frame, names.profiler_table(folder + table.name))
    return RunResult(
        run_id=run_id,
        experiment_id=prepared.experiment_id,
        run_url=queries.run_url(run_id, prepared.experiment_id),
        metrics=analysis.metrics,
        findings=analysis.findings,
        trace_files=[p.relative_to(prepared.plan.output_dir).as_posix() for p in outcome.trace_files],
        report_markdown=analysis.report_markdown,
        perf=analysis.perf,
        gpu=analysis.gpu,
        memory=analysis.memory,
    )


def upload_run_folder(mlflow: MlflowClient, prepared: PreparedRun) -> None:
    """Everything the run wrote, in the contract's layout; also used to salvage a failed run."""
    upload.upload_artifacts(mlflow, prepared.run_id, prepared.plan.output_dir)


def captured_step_times(folder: Path) -> StepTimes | None:
    """The step times written so far (between epochs, and when training ended or was interrupted); a last
    line cut short (a full disk) is left out."""
    path = folder / names.STEP_TIMES_CSV
    if not path.is_file():  # a data-parallel job's: rank 0's
        path = folder / names.rank_path(names.STEP_TIMES_CSV, 0)
    if not path.is_file():
        return None
    lines = path.read_text(errors="replace").splitlines()
    if not lines:
        return None
    whole = [line for line in lines[1:] if line.count(",") == lines[0].count(",") and not line.endswith(",")]
    if not whole:
        return None
    return StepTimes.from_rows(np.loadtxt(whole, delimiter=",", ndmin=2, dtype=np.float64))


class RunSalvage:
    """The end of a profiled run that did not finish (run_end.Salvage): a one-line reason, a local record of
    what the store should hold (perf/* from the step times so far), the uploads, and the folder's markers."""

    def __init__(self, mlflow: MlflowClient, prepared: PreparedRun) -> None:
        self.mlflow, self.prepared = mlflow, prepared
        self.folder = prepared.plan.output_dir
        self._record: upload.UploadRecord | None = None

    def reason(self, exc: BaseException, status: str) -> str:
        times = captured_step_times(self.folder)
        progress = f"after {len(times) if times is not None else 0} of {self.prepared.plan.steps_expected} steps"
        signal_name = run_end.interruption_signal(exc)
        if signal_name:
            return f"{'interrupted' if signal_name == 'SIGINT' else 'terminated'} by {signal_name} {progress}"
        return f"{run_end.failure_line(exc, self.mlflow.tracking_uri)} ({progress})"

    def record(self, status: str, reason: str) -> None:
        existing = upload.read_record(self.folder)
        if existing is not None and existing.status == "FINISHED":
            self._record = existing  # training and analysis completed; only the store missed (part of) it
            return
        record = upload.UploadRecord(status=status, reason=reason)
        times = captured_step_times(self.folder)
        if times is not None:
            perf = perf_summary(times, DISCARD_FIRST_STEPS)
            record.metrics = perf.as_metrics() if perf is not None else {}
            record.histories = {
                names.STEP_TIME_MS: list(enumerate(times.step_ms.tolist())),
                names.DATA_WAIT_MS: list(enumerate(times.data_wait_ms.tolist())),
            }
        self._record = record
        upload.write_record(self.folder, record)

    def steps(self, status: str, reason: str):
        record = self._record
        steps = []
        if record is not None and (record.metrics or record.histories or record.tags):
            summary = {k: v for k, v in record.metrics.items() if k not in record.histories}
            steps.append(
                (
                    "metrics",
                    lambda: writes.log_values(
                        self.mlflow,
                        self.prepared.run_id,
                        metrics=summary,
                        histories=record.histories,
                        tags=record.tags,
                        timestamp_ms=record.timestamp_ms,
                    ),
                )
            )
        steps.append(("artifacts", lambda: upload_run_folder(self.mlflow, self.prepared)))
        steps.append(("tables", lambda: upload.upload_tables(self.mlflow, self.prepared.run_id, self.folder)))
        return steps

    def ended(self, end, exc: BaseException | None) -> None:
        if end.pending or end.failures:  # the store misses part of the run: `yolo-mlops upload` finishes it
            upload.mark_pending(self.folder, end.status, end.reason, end.failures)
        else:
            upload.mark_uploaded(self.folder)
        if exc is not None:  # the user gets one line; the whole story stays with the run
            import traceback

            (self.folder / upload.ERROR_LOG).write_text("".join(traceback.format_exception(exc)))


def summary_markdown(result: RunResult, spec: RunSpec) -> str:
    metrics = result.metrics
    rows = [(k, metrics[k]) for k in sorted(metrics) if k.startswith(names.HEADLINE_PREFIXES)]
    lines = [
        f"# Profiled run `{result.run_id}`",
        "",
        f"Model `{spec.model}`, imgsz {spec.imgsz}, batch {spec.batch}, variant `{spec.variant}`.",
        "",
        f"MLflow run: [{result.run_url}]({result.run_url})",
        "",
        "| metric | value |",
        "|---|---|",
    ]
    lines += [f"| `{k}` | {v:.4g} |" for k, v in rows]
    if result.findings:
        lines += ["", "## Findings", "", findings_headline(result.findings), ""] + [
            f"- {f.line()}" for f in result.findings
        ]
    if result.memory is not None:
        lines += ["", memory_holders.markdown_section(result.memory)]
    lines += ["", "Traces: " + ", ".join(f"`{t}`" for t in result.trace_files)]
    return "\n".join(lines)
