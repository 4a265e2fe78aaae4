"""Collectives of a data-parallel job: HTA's comm/compute overlap on real NCCL traces, both NCCL kernel namings,
a real one-rank NCCL job (no NCCL kernel: the host's calls and message sizes only), and cross-rank waits on
hand-built gloo rank traces whose answer is known by construction."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from yolo_mlops.analysis import analyze_traces, trace_loader
from yolo_mlops.analysis.collectives import FROM_HOST_CALLS, FROM_NCCL_KERNELS
from yolo_mlops.analysis.diagnosis import DiagnosisInput, diagnose
from yolo_mlops.analysis.loading import formats
from yolo_mlops.analysis.loading.columns import ColumnBuilder
from yolo_mlops.analysis.loading.ijson_stream import stream_events_ijson
from yolo_mlops.analysis.loading.msgspec_chunks import decode_events_chunked
from yolo_mlops.analysis.metrics import headline_metrics

NCCL_FIXTURES = ["a100_nccl_rank0.json.gz", "small_comm_rank0.json.gz"]
PCT_TOLERANCE = 0.5  # percentage points
# two steps of a real one-rank NCCL job on an H100 (tests/fixtures/h100_traces/README.md)
ONE_RANK_NCCL = Path(__file__).resolve().parents[1] / "fixtures" / "h100_traces" / "ddp1_nccl_steps13-14.json.gz"
YOLO11N_GRADIENTS = 2_590_409  # trainable parameters of YOLO11n (nc=3), as ultralytics prints them


@pytest.mark.parametrize("name", NCCL_FIXTURES)
def test_nccl_overlap_agrees_with_hta(gpu_traces_dir, hta_reference, name):
    """HTA's kernel breakdown splits communication into rows alone and overlapping compute: the overlapped share
    of communication time is what our exposed time leaves."""
    rows = {r["kernel_type"]: r["sum"] for r in hta_reference[name]["kernel_type_breakdown"]}
    comm_total = sum(v for k, v in rows.items() if "COMMUNICATION" in k)
    overlapped = sum(v for k, v in rows.items() if "COMMUNICATION" in k and "COMPUTATION" in k)
    comm = analyze_traces(gpu_traces_dir / name).communication
    assert comm is not None
    (rank,) = comm.ranks
    assert rank.backend == "nccl" and rank.collective_calls > 0 and rank.found_from == FROM_NCCL_KERNELS
    assert rank.collective_time_us is not None and rank.exposed_time_us is not None
    assert rank.collective_time_us == pytest.approx(comm_total, rel=0.01)
    ours = 100 * (1 - rank.exposed_time_us / rank.collective_time_us)
    assert ours == pytest.approx(100 * overlapped / comm_total, abs=PCT_TOLERANCE)


def test_newer_nccl_kernel_names_are_collectives_too(gpu_traces_dir, tmp_path):
    """NCCL 2.19+ names its kernels ncclDevKernel_* (HTA's straggler code matches only ncclKernel*)."""
    source = gpu_traces_dir / "small_comm_rank0.json.gz"
    renamed = tmp_path / "renamed.json.gz"
    text = gzip.decompress(source.read_bytes()).decode()
    assert "ncclKernel_" in text
    renamed.write_bytes(gzip.compress(text.replace("ncclKernel_", "ncclDevKernel_").encode()))
    before_comm = analyze_traces(source).communication
    after_comm = analyze_traces(renamed).communication
    assert before_comm is not None and after_comm is not None
    before, after = before_comm.ranks[0], after_comm.ranks[0]
    assert (after.collective_calls, after.collective_time_us, after.exposed_time_us) == (
        before.collective_calls,
        before.collective_time_us,
        before.exposed_time_us,
    )


def test_record_param_comms_give_the_kernel_paths_message_sizes(gpu_traces_dir):
    """An NCCL job of two ranks (A100): the window's record_param_comms are its NCCL kernels, one for one, and
    give their bytes; records without args (an older torch) give calls by kernel only, bytes unknown."""
    comm = analyze_traces(gpu_traces_dir / "a100_nccl_rank0.json.gz").communication
    assert comm is not None
    (rank,) = comm.ranks
    assert sum(rank.calls_by_collective.values()) == rank.collective_calls == 14
    assert rank.calls_per_step == 7.0
    assert rank.collective_bytes is not None and rank.collective_bytes == sum(rank.bytes_by_collective.values())
    old = analyze_traces(gpu_traces_dir / "small_comm_rank0.json.gz").communication
    assert old is not None
    assert old.ranks[0].collective_calls > 0 and old.ranks[0].collective_bytes is None


def test_a_one_rank_nccl_job_has_calls_and_bytes_but_no_time():
    """NCCL launches no kernel for a collective over one rank: the real H100 job's trace has GPU kernels and
    none of NCCL's. Its collectives are counted from record_param_comms, their bytes from the records' message
    sizes, and collective, exposed and wait time are not measured: None and no metric, never a 0."""
    analysis = analyze_traces(ONE_RANK_NCCL)
    assert analysis.ranks[0].gpu is not None and analysis.ranks[0].gpu.kernel_count > 0
    comm = analysis.communication
    assert comm is not None
    assert (comm.backend, comm.world_size, comm.matched_collectives) == ("nccl", 1, 0)
    assert comm.note.startswith("world size 1: nccl ran no collective kernel")
    (rank,) = comm.ranks
    assert rank.found_from == FROM_HOST_CALLS
    assert (rank.steps, rank.collective_calls, rank.calls_per_step) == (2, 10, 5.0)
    # every step: DDP's two gradient buckets and its unused-parameter map, then the BatchNorm buffers' broadcast
    assert rank.calls_by_collective == {"allreduce": 6, "broadcast": 4}
    # by kind: the all-reduces issued in the backward phase are the gradient sync, the broadcasts apart; calls
    # per optimizer step count the gradient all-reduces only
    assert rank.calls_by_kind == {"gradient_all_reduce": 6, "broadcast": 4} and rank.other_calls_per_step == 2.0
    assert rank.optimizer_steps == 1 and rank.calls_per_optimizer_step == 6.0
    assert rank.bytes_by_collective["allreduce"] == 2 * (4 * (2_326_633 + 263_776) + 4 * 255)
    assert rank.bytes_by_collective["broadcast"] == 2 * (4 * 15_376 + 8 * 81)
    # what one synchronised backward all-reduces is every gradient once (+ the 255-int map)
    assert rank.bytes_by_collective["allreduce"] / 2 == 4 * YOLO11N_GRADIENTS + 4 * 255
    assert rank.collective_time_us is None and rank.exposed_time_us is None
    assert rank.collective_pct is None and rank.exposed_pct is None and rank.wait_pct is None
    assert rank.collective_ms_by_step == [] and rank.synced_steps == 2
    metrics = headline_metrics(analysis)
    assert rank.collective_bytes is not None
    assert metrics["rank0/comm/calls_per_step"] == metrics["comm/calls_per_step"] == 5.0
    assert metrics["rank0/comm/calls_per_optimizer_step"] == 6.0
    assert metrics["rank0/comm/message_mib_per_step"] == pytest.approx(rank.collective_bytes / 2 / 2**20)
    for unmeasured in ("collective_pct", "exposed_pct", "wait_pct", "wait_spread_pct"):
        assert not [k for k in metrics if k.endswith(f"comm/{unmeasured}")], unmeasured
    assert not [f for f in diagnose(DiagnosisInput(analysis=analysis)) if f.rule.startswith("ddp_")]


def test_collective_records_read_alike_by_every_parser_path(tmp_path):
    """The msgspec blocks and the ijson fallback read the same record_param_comms; NCCL kernels that carry a
    "Collective name" arg too (older torch) are not records."""
    fast = ColumnBuilder()
    with formats.open_binary(ONE_RANK_NCCL) as fh:
        assert decode_events_chunked(formats.read_blocks(fh), fast)
    slow = ColumnBuilder()
    with formats.open_binary(ONE_RANK_NCCL) as fh:
        stream_events_ijson(fh, slow, formats.READ_BUFFER_BYTES)
    assert fast.collectives == slow.collectives
    assert len(fast.collectives) == 16  # 10 collectives and 6 waits on them
    first = fast.collectives[0]
    assert (first.collective, first.in_nelems, first.dtype, first.group_size) == ("broadcast", 15_376, "Float", 1)
    kernel = {"ph": "X", "cat": "kernel", "name": "ncclKernel_AllReduce", "pid": 0, "tid": 7, "ts": 1.0, "dur": 2.0}
    kernel["args"] = {"Collective name": "allreduce", "In msg nelems": 10, "dtype": "Float", "stream": 7}
    path = tmp_path / "kernel.json"
    path.write_text(json.dumps({"traceEvents": [kernel]}))
    assert trace_loader.load_trace_file(path).collective_records == []


def _gloo_rank(path: Path, rank: int, late_us: float, steps: int = 3, peers_late_us: float = 0.0) -> Path:
    """A CPU rank trace: ProfilerSteps of 100 ms on the training thread, backward operators from 10 ms to 50 ms
    (+ late_us), and two all_reduce spans on gloo threads for buckets ready at 30 and 40 ms (+ late_us); each
    ends together on every rank, 20 and 21 ms after the latest rank's bucket was ready (peers_late_us: how late
    the latest of the job is)."""
    events = []
    for i in range(steps):
        t0 = i * 100_000.0
        events.append(
            {
                "ph": "X",
                "cat": "user_annotation",
                "name": f"ProfilerStep#{i}",
                "pid": 1,
                "tid": 1,
                "ts": t0,
                "dur": 100_000.0,
            }
        )
        events.append(
            {
                "ph": "X",
                "cat": "cpu_op",
                "name": "autograd::engine::evaluate_function: ConvBackward0",
                "pid": 1,
                "tid": 1,
                "ts": t0 + 10_000,
                "dur": 40_000.0 + late_us,
            }
        )
        events.append(
            {
                "ph": "X",
                "cat": "user_annotation",
                "name": "yolo_mlops/optimizer_step",
                "pid": 1,
                "tid": 1,
                "ts": t0 + 70_000,
                "dur": 5_000.0,
            }
        )
        for thread, ready, transfer in ((7, 30_000.0, 20_000.0), (8, 40_000.0, 21_000.0)):
            start = t0 + ready + late_us
            end = t0 + ready + max(late_us, peers_late_us) + transfer
            events.append(
                {
                    "ph": "X",
                    "cat": "user_annotation",
                    "name": "gloo:all_reduce",
                    "pid": 1,
                    "tid": thread,
                    "ts": start,
                    "dur": end - start,
                }
            )
    trace = {"distributedInfo": {"backend": "gloo", "rank": rank, "world_size": 2}, "traceEvents": events}
    path.write_text(json.dumps(trace))
    return path


def test_the_rank_the_others_wait_for_and_how_long(tmp_path):
    late_us = 15_000.0
    files = [
        _gloo_rank(tmp_path / "r0.json", 0, 0.0, peers_late_us=late_us),
        _gloo_rank(tmp_path / "r1.json", 1, late_us),
    ]
    comm = analyze_traces(files).communication
    assert comm is not None
    assert comm.backend == "gloo" and comm.world_size == 2 and comm.matched_collectives == 6
    assert comm.waited_for_rank == 1
    by_rank = {r.rank: r for r in comm.ranks}
    # both of rank 0's buckets wait late_us, staggered: its step is held back late_us, not twice that
    assert by_rank[0].wait_time_us is not None
    assert by_rank[0].wait_time_us / 3 == pytest.approx(late_us)
    assert by_rank[1].wait_time_us == pytest.approx(0.0)
    assert by_rank[0].calls_per_optimizer_step == 2.0
    # rank 0: spans 30-65 and 40-76 ms, its backward 10-50 ms: collective 30-76, exposed 50-76 ms per step
    assert by_rank[0].collective_time_us is not None and by_rank[0].exposed_time_us is not None
    assert by_rank[0].collective_time_us / 3 == pytest.approx(46_000.0)
    assert by_rank[0].exposed_time_us / 3 == pytest.approx(26_000.0)
    straggler = next(f for f in diagnose(DiagnosisInput(analysis=analyze_traces(files))) if f.rule == "ddp_straggler")
    assert straggler.evidence["rank"] == "1"
    assert straggler.saving is not None and straggler.saving.ms_per_step == pytest.approx(late_us / 1000)


def test_ranks_in_step_record_no_straggler(tmp_path):
    files = [_gloo_rank(tmp_path / "r0.json", 0, 0.0), _gloo_rank(tmp_path / "r1.json", 1, 0.0)]
    comm = analyze_traces(files).communication
    assert comm is not None
    assert comm.waited_for_rank is None and comm.wait_spread_pct == pytest.approx(0.0)
    assert not [f for f in diagnose(DiagnosisInput(analysis=analyze_traces(files))) if f.rule == "ddp_straggler"]


def test_a_single_process_trace_has_no_communication(cpu_trace_dir):
    assert analyze_traces(cpu_trace_dir).communication is None


def test_ranks_analyzed_in_worker_processes_give_the_same_result(tmp_path):
    files = [
        _gloo_rank(tmp_path / "r0.json", 0, 0.0, peers_late_us=15_000.0),
        _gloo_rank(tmp_path / "r1.json", 1, 15_000.0),
    ]
    alone, parallel = analyze_traces(files, workers=1), analyze_traces(files, workers=2)
    assert parallel.to_json() == alone.to_json()
    with pytest.raises(Exception, match="two traces for rank 0"):
        analyze_traces([files[0], files[0]], workers=2)


def test_more_ranks_than_workers_each_in_a_process_of_its_own(tmp_path):
    """Each trace gets a fresh worker process (max_tasks_per_child=1): the pool replaces its workers five times
    over without losing a trace, in rank order."""
    files = [_gloo_rank(tmp_path / f"r{rank}.json", rank, 15_000.0 if rank == 3 else 0.0) for rank in range(7)]
    alone, parallel = analyze_traces(files, workers=1), analyze_traces(files, workers=2)
    assert [r.rank for r in parallel.ranks] == list(range(7))
    assert parallel.to_json() == alone.to_json()


def test_a_straggler_with_slower_clocks_is_named_by_them(tmp_path):
    """No data wait behind it: the straggler's NVML clocks against its peers' say why it is slow."""
    files = [
        _gloo_rank(tmp_path / "r0.json", 0, 0.0, peers_late_us=15_000.0),
        _gloo_rank(tmp_path / "r1.json", 1, 15_000.0),
    ]
    analysis = analyze_traces(files)

    def straggler(clocks):
        found = diagnose(DiagnosisInput(analysis=analysis, rank_sm_clock_mhz=clocks))
        return next(f for f in found if f.rule == "ddp_straggler")

    slow = straggler({0: 1980.0, 1: 1500.0})
    assert "slower clocks (1500 MHz mean SM clock against its peers' 1980" in slow.evidence["cause"]
    assert slow.evidence["sm_clock_mhz_mean"] == 1500.0
    assert "own compute" in straggler({0: 1980.0, 1: 1975.0}).evidence["cause"]  # clocks alike: not the cause
    assert "own compute" in straggler({}).evidence["cause"]  # CPU ranks: no clocks to read
