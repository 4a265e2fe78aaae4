"""Trace analysis entry point: load -> per-rank analyses -> `TraceAnalysis` (model.py; its JSON is
`TraceAnalysis.to_json`, its text report render_text.py)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from yolo_mlops.analysis import gpu as gpu_mod
from yolo_mlops.analysis.communication import RankCollectives, combine, rank_collectives
from yolo_mlops.analysis.host import (
    CategoryTime,
    Steps,
    categories_by_name,
    find_steps,
    host_category_times,
    host_event_mask,
    top_host_ops,
)
from yolo_mlops.analysis.idle_attribution import gpu_idle_by_cause, step_time_by_phase
from yolo_mlops.analysis.memory import MemoryProfile, memory_profile
from yolo_mlops.analysis.model import (
    GpuSummary,
    HostOp,
    RankAnalysis,
    RankSpread,
    StepSummary,
    StepTimeStats,
    TraceAnalysis,
)
from yolo_mlops.analysis.step_activity import boundary_steps, step_activities
from yolo_mlops.analysis.trace_loader import (
    RankTrace,
    TraceError,
    find_trace_files,
    in_rank_order,
    load_trace_file,
)
from yolo_mlops.analysis.worker_pool import WorkerPool, cores
from yolo_mlops.labels import PHASE_LABEL_PREFIX

GPU_WINDOW_HTA = "all but the last ProfilerStep (as HTA)"
GPU_WINDOW_ALL = "whole trace (fewer than 2 ProfilerSteps)"


def analyze_rank(trace: RankTrace) -> RankAnalysis:
    """One rank's analyses. The trace's memory events are handed to the memory profile (RankTrace.take_memory),
    so the trace keeps none of them afterwards."""
    host = host_event_mask(trace)
    steps = find_steps(trace, host)
    category_by_name = categories_by_name(trace.names)
    category_times = host_category_times(trace, host, steps, category_by_name)
    total_step_us = float(steps.duration.sum())
    host_summary = [
        CategoryTime(category, float(v[0].sum()), _pct(float(v[0].sum()), total_step_us), int(v[1].sum()))
        for category, v in category_times.items()
    ]

    window_end = float(np.ceil(steps.start[-1])) if steps.count >= 2 else None
    # before the activities are selected, so their peaks do not add up; the trace's memory events go with it
    memory = memory_profile(trace.take_memory(), steps)
    all_acts = gpu_mod.select_gpu_activities(trace)
    step_summaries = _step_summaries(all_acts, steps, category_times, memory)
    window_acts = all_acts if window_end is None else gpu_mod.keep_launched_before(all_acts, window_end)
    del all_acts  # the rest reads the window
    breakdown = gpu_mod.temporal_breakdown(window_acts)
    has_gpu = breakdown is not None
    device_name, device_memory, capability = _device_properties(trace)
    gpu_summary = None
    if breakdown is not None:
        gpu_summary = GpuSummary.from_breakdown(breakdown, window_acts.count)
        gpu_summary.reduced_precision_kernel_pct = gpu_mod.kernel_time_share_pct(
            window_acts, trace.names, gpu_mod.is_reduced_precision_kernel
        )
        gpu_summary.layout_conversion_kernel_pct = gpu_mod.kernel_time_share_pct(
            window_acts, trace.names, gpu_mod.is_layout_conversion_kernel
        )
        if gpu_summary.layout_conversion_kernel_pct is not None:
            durations = float((window_acts.end - window_acts.start).sum())
            gpu_summary.layout_conversion_time_us = gpu_summary.layout_conversion_kernel_pct / 100 * durations

    # the steps the GPU window covers (HTA drops the last one when there are two or more)
    window_steps = steps.count - 1 if window_end is not None else steps.count
    window_step_us = float(steps.duration[:window_steps].sum()) if steps.count else 0.0
    return RankAnalysis(
        rank=trace.rank,
        path=trace.path,
        event_count=trace.event_count,
        device_name=device_name if has_gpu else None,
        device_memory_total_bytes=device_memory if has_gpu else None,
        device_compute_capability=capability if has_gpu else None,
        step_time=_step_time_stats(steps),
        host=host_summary,
        gpu=gpu_summary,
        gpu_window=(GPU_WINDOW_HTA if window_end is not None else GPU_WINDOW_ALL) if has_gpu else None,
        kernel_types=gpu_mod.kernel_type_breakdown(window_acts) if has_gpu else [],
        idle_breakdown=gpu_mod.idle_breakdown(window_acts) if has_gpu else [],
        top_kernels=gpu_mod.top_kernels(window_acts, trace.names) if has_gpu else [],
        top_host_ops=[HostOp(*op) for op in top_host_ops(trace, host)],
        memory=memory,
        steps=step_summaries,
        gpu_idle_by_cause=gpu_idle_by_cause(
            trace, host, steps, window_acts, window_steps, window_step_us, category_by_name
        )
        if has_gpu
        else [],
        step_by_phase=step_time_by_phase(trace, host, steps, category_by_name),
        window_steps=window_steps,
        window_step_us=window_step_us,
        boundary_steps=boundary_steps(step_activities(trace, host, steps)),
    )


def _step_summaries(
    all_acts: gpu_mod.GpuActivities, steps: Steps, category_times: dict[str, np.ndarray], memory: MemoryProfile | None
) -> list[StepSummary]:
    launch_step = steps.index_of(all_acts.launch_ts)
    launch_step += 1  # 0: launched outside every step; shifted in place, the order is the same
    # Group activities by step once (a stable sort, or none when they are launched in step order: then each
    # step's are a slice), instead of one full-length mask per step; a step's group starts after the
    # activities of the steps before it and of none.
    bounds = np.cumsum(np.bincount(launch_step, minlength=steps.count + 1))
    order = None if gpu_mod.in_order(launch_step) else np.argsort(launch_step, kind="stable")
    del launch_step
    summaries = []
    for i in range(steps.count):
        group = slice(bounds[i], bounds[i + 1])
        step_acts = all_acts.subset(group if order is None else order[group])
        breakdown = gpu_mod.temporal_breakdown(step_acts)
        summaries.append(
            StepSummary(
                step=int(steps.number[i]),
                start_us=float(steps.start[i]),
                duration_us=float(steps.duration[i]),
                host_us={c: float(v[0][i]) for c, v in category_times.items()},
                gpu=GpuSummary.from_breakdown(breakdown, step_acts.count) if breakdown else None,
                peak_allocated_bytes=memory.step_peak_allocated_bytes[i] if memory else None,
                peak_reserved_bytes=memory.step_peak_reserved_bytes[i] if memory else None,
            )
        )
    return summaries


def _step_time_stats(steps: Steps) -> StepTimeStats | None:
    if steps.count == 0:
        return None
    d = steps.duration
    return StepTimeStats(
        count=steps.count,
        total_us=float(d.sum()),
        mean_us=float(d.mean()),
        median_us=float(np.median(d)),
        min_us=float(d.min()),
        max_us=float(d.max()),
    )


def _device_properties(trace: RankTrace) -> tuple[str | None, float | None, float | None]:
    """Name, memory and compute capability of the GPU this rank's kernels ran on (pid = device id)."""
    if not trace.device_properties:
        return None, None, None
    gpu = trace.gpu_mask()
    device_id = trace.pids[int(trace.pid_id[gpu].min())] if gpu.any() else None
    chosen = next((d for d in trace.device_properties if str(d.get("id")) == device_id), trace.device_properties[0])
    memory = chosen.get("totalGlobalMem")
    major, minor = chosen.get("computeMajor"), chosen.get("computeMinor")
    capability = float(f"{major}.{minor}") if isinstance(major, int) and isinstance(minor, int) else None
    return chosen.get("name"), float(memory) if isinstance(memory, (int, float)) else None, capability


def _pct(part: float, whole: float) -> float:
    return 100.0 * part / whole if whole > 0 else 0.0


def rank_spread(ranks: list[RankAnalysis]) -> RankSpread | None:
    means = {r.rank: r.step_time.mean_us for r in ranks if r.step_time is not None}
    if len(means) < 2:
        return None
    slowest = max(means, key=lambda rank: means[rank])
    fastest = min(means, key=lambda rank: means[rank])
    spread = means[slowest] - means[fastest]
    return RankSpread(means, spread, _pct(spread, means[fastest]), slowest, fastest)


# Rank traces of this many bytes on disk in all or more are analyzed in worker processes, one per core: below it,
# starting the workers (each imports numpy and the analysis) costs more than it saves (docs/benchmarks.md, "A
# job's rank traces analyzed together").
PARALLEL_MIN_BYTES = 16 << 20


@dataclass
class _RankResult:
    """What one rank's trace gives, built in the process that loaded it; the trace itself stays there."""

    rank: int
    path: str
    analysis: RankAnalysis
    collectives: RankCollectives | None
    warnings: list[str]
    world_size: int | None = None  # distributedInfo.world_size; None: the trace is of no process group
    backend: str | None = None


def _analyze_file(path: Path, default_rank: int) -> _RankResult:
    trace = load_trace_file(path, default_rank=default_rank)
    if trace.event_count == 0:
        # every complete event was left out (a negative duration each): nothing is left to analyze, as for an
        # empty traceEvents, and a report of 0 events with no finding would read as a clean trace
        raise TraceError(
            f"{path}: no event left to analyze"
            + (f" ({'; '.join(trace.warnings)})" if trace.warnings else " (no complete event with a duration)")
        )
    return _RankResult(
        trace.rank,
        trace.path,
        analyze_rank(trace),
        rank_collectives(trace),
        [*trace.warnings, *_labels_outside_steps(trace)],
        trace.world_size,
        trace.backend,
    )


def analyze_traces(path: str | Path | list[Path], workers: int | None = None) -> TraceAnalysis:
    """Analyze one trace file, a directory of per-rank traces, or a list of rank traces (a data-parallel
    job's, one per rank folder). Raises TraceError on bad input.

    Several traces of PARALLEL_MIN_BYTES or more in all are analyzed in `workers` processes of the analysis
    layer's pool (analysis/worker_pool.py; default: one per core), each loading one trace: wall time falls with
    the cores, and each worker's memory is that of its trace, not of all of them."""
    files, source = _trace_files(path)
    if workers is None:
        big = sum(f.stat().st_size for f in files) >= PARALLEL_MIN_BYTES
        workers = min(len(files), cores()) if big else 1
    if workers > 1 and len(files) > 1:
        # each trace in a process of its own (worker_pool.py): a worker's peak is that of its own trace
        with WorkerPool(workers, len(files)) as pool:
            futures = [pool.submit(_analyze_file, f, i) for i, f in enumerate(files)]
            results = [future.result() for future in futures]
    else:
        results = [_analyze_file(f, i) for i, f in enumerate(files)]
    ordered = in_rank_order(results, source)
    _check_one_job(ordered, source)
    ranks = [r.analysis for r in ordered]
    return TraceAnalysis(
        source=source,
        ranks=ranks,
        spread=rank_spread(ranks),
        communication=combine([r.collectives for r in ordered]),
        warnings=[w for r in ordered for w in r.warnings],
    )


def _check_one_job(results: list[_RankResult], source: str) -> None:
    """Several traces are read as the ranks of one data-parallel job: refused when their `distributedInfo`
    says they are not (one trace of a process group beside one of none, different world sizes or backends).
    Their spread and cross-rank waits would otherwise compare unrelated runs."""
    if len(results) < 2:
        return

    def described(result: _RankResult) -> str:
        if result.world_size is None:
            return f"{Path(result.path).name} (no process group: a single-process trace)"
        return f"{Path(result.path).name} (rank {result.rank} of {result.world_size}, {result.backend or '?'})"

    first = results[0]
    for other in results[1:]:
        if (other.world_size, other.backend) != (first.world_size, first.backend):
            raise TraceError(
                f"{source}: the traces are not of one job: {described(first)}, {described(other)}; "
                "analyze them one at a time"
            )


def _trace_files(path: str | Path | list[Path]) -> tuple[list[Path], str]:
    if isinstance(path, list):
        files = [Path(p) for p in path]
        for file in files:
            if not file.is_file():
                raise TraceError(f"{file}: no such trace file")
        return files, str(files[0].parent.parent) if files else ""
    path = Path(path)
    if path.is_dir():
        files = find_trace_files(path)
        if not files:
            raise TraceError(f"{path}: directory holds no trace files (*.json, *.json.gz)")
        return files, str(path)
    if path.is_file():
        return [path], str(path)
    raise TraceError(f"{path}: no such file or directory")


def _labels_outside_steps(trace: RankTrace) -> list[str]:
    """Phase labels that start outside every ProfilerStep: their time is in no step's breakdown."""
    host = host_event_mask(trace)
    steps = find_steps(trace, host)
    if steps.count == 0:
        return []
    labels = [i for i, name in enumerate(trace.names) if name.startswith(PHASE_LABEL_PREFIX)]
    events = np.flatnonzero(host & trace.name_mask(labels))
    outside = events[steps.index_of(trace.ts[events]) < 0]
    if not outside.size:
        return []
    first = int(outside[0])
    return [
        f"{Path(trace.path).name}: {outside.size} phase label event(s) outside every ProfilerStep left out of "
        f"the step breakdown, e.g. {trace.names[int(trace.name_id[first])]!r} at {trace.ts[first]:.0f} us"
    ]
