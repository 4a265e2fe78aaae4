"""Stragglers judged step by step, stalls apart, and collectives by kind, on hand-built 2-rank gloo traces whose
answer is known by construction: rank 1's forward pass is slower in every step, and rank 0 saves a checkpoint at
an epoch boundary inside the window (the case where summing each step's longest wait named rank 0)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from yolo_mlops.analysis import analyze_traces
from yolo_mlops.analysis.collectives import GRADIENT_ALL_REDUCE
from yolo_mlops.analysis.diagnosis import DiagnosisInput, diagnose
from yolo_mlops.analysis.metrics import headline_metrics
from yolo_mlops.analysis.render_text import render_text

STEP_US = 3_000_000.0  # every ProfilerStep: 3 s
FORWARD_US = 100_000.0
SLOW_FORWARD_US = 400_000.0  # rank 1's: 300 ms more in every step
CHECKPOINT_US = 2_000_000.0  # rank 0 at the epoch boundary: more than the 6 steps' 300 ms together
BUCKET_US = 30_000.0  # backward compute until DDP's bucket is ready
TRANSFER_US = 20_000.0


def _span(name: str, ts: float, dur: float, tid: int = 1, cat: str = "user_annotation") -> dict:
    return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur}


def _job(
    folder: Path,
    steps: int = 6,
    boundary: int | None = 3,
    labelled: bool = True,
    no_sync: bool = False,
    slow_data: bool = False,
) -> list[Path]:
    """Two rank traces of `steps` profiled steps (ProfilerStep#10...). Step `boundary` holds an epoch boundary:
    the last step's data wait, the epoch's end (rank 0 saves a checkpoint; both ranks then broadcast the stop flag,
    rank 1 waiting for rank 0), then the new epoch's data wait. Every step: data wait, forward (rank 1 slower),
    backward with one gradient all-reduce that ends on both ranks after the later rank's bucket was ready, and an
    optimizer step every second step (accumulate 2). `slow_data`: rank 1's data wait is the slow part instead of
    its forward. `labelled` False: a trace written before the epoch_end and
    checkpoint labels (the boundary shows as two data waits). `no_sync`: the all-reduce only on optimizer steps."""
    forward = {0: FORWARD_US, 1: FORWARD_US if slow_data else SLOW_FORWARD_US}
    data = {0: 5_000.0, 1: 5_000.0 + (SLOW_FORWARD_US - FORWARD_US if slow_data else 0.0)}
    checkpoint = {0: CHECKPOINT_US, 1: 0.0}
    events: dict[int, list[dict]] = {0: [], 1: []}
    for i in range(steps):
        t0 = i * STEP_US
        start = {r: t0 for r in (0, 1)}
        if i == boundary:
            broadcast_end = t0 + 2_000 + max(checkpoint.values()) + 1_000 + 2_000
            for r in (0, 1):
                ev = events[r]
                ev.append(_span("yolo_mlops/data_wait", t0, 1_000))
                if labelled:
                    ev.append(_span("yolo_mlops/epoch_end", t0 + 1_000, broadcast_end + 500 - t0 - 1_000))
                if checkpoint[r] and labelled:
                    ev.append(_span("yolo_mlops/checkpoint", t0 + 2_000, checkpoint[r]))
                issued = t0 + 2_000 + checkpoint[r] + 1_000
                ev.append(_span("c10d::broadcast_", issued, 10, cat="cpu_op"))
                ev.append(_span("gloo:broadcast", issued, broadcast_end - issued, tid=7))
                start[r] = broadcast_end + 500
        optimizer = i % 2 == 1
        ready = {r: start[r] + data[r] + forward[r] + BUCKET_US for r in (0, 1)}
        for r in (0, 1):
            ev = events[r]
            s = start[r]
            ev.append(_span(f"ProfilerStep#{10 + i}", t0, STEP_US))
            ev.append(_span("yolo_mlops/data_wait", s, data[r]))
            ev.append(_span("yolo_mlops/forward_loss", s + data[r], forward[r]))
            backward_start = s + data[r] + forward[r]
            end = max(ready.values()) + TRANSFER_US
            ev.append(
                _span("autograd::engine::evaluate_function: ConvBackward0", backward_start, BUCKET_US, cat="cpu_op")
            )
            if optimizer or not no_sync:
                ev.append(_span("c10d::allreduce_", ready[r], 10, cat="cpu_op"))
                ev.append(_span("gloo:all_reduce", ready[r], end - ready[r], tid=8))
            else:
                end = ready[r]
            ev.append(_span("yolo_mlops/backward", backward_start, end + 1_000 - backward_start))
            if optimizer:
                ev.append(_span("yolo_mlops/optimizer_step", end + 1_000, 5_000))
    paths = []
    for r in (0, 1):
        trace = {"distributedInfo": {"backend": "gloo", "rank": r, "world_size": 2}, "traceEvents": events[r]}
        path = folder / f"rank{r}.json"
        path.write_text(json.dumps(trace))
        paths.append(path)
    return paths


def test_the_straggler_is_judged_step_by_step_and_the_boundary_stall_apart(tmp_path):
    analysis = analyze_traces(_job(tmp_path))
    comm = analysis.communication
    assert comm is not None and comm.matched_collectives == 7  # 6 all-reduces and the boundary's broadcast
    by_rank = {r.rank: r for r in comm.ranks}
    # what summing each step's longest wait saw: rank 0 waited less in all, so it looked like the straggler
    assert (by_rank[0].wait_time_us or 0.0) < (by_rank[1].wait_time_us or 0.0)
    assert comm.boundary_steps == [13] and comm.steady_steps == 5
    straggler = comm.straggler
    assert straggler is not None and comm.waited_for_rank == 1
    assert (straggler.steps_held, straggler.steady_steps) == (5, 5)
    assert straggler.median_lead_ms == pytest.approx((SLOW_FORWARD_US - FORWARD_US) / 1000)
    assert straggler.extra_ms["forward_loss"] == pytest.approx((SLOW_FORWARD_US - FORWARD_US) / 1000)
    (stall,) = comm.stalls
    assert (stall.step, stall.rank, stall.boundary, stall.activity) == (13, 0, True, "checkpoint")
    assert stall.lead_ms == pytest.approx((CHECKPOINT_US - (SLOW_FORWARD_US - FORWARD_US)) / 1000, rel=0.01)
    assert stall.activity_ms == pytest.approx(CHECKPOINT_US / 1000)
    finding = next(f for f in diagnose(DiagnosisInput(analysis=analysis)) if f.rule == "ddp_straggler")
    assert finding.evidence["rank"] == "1" and "own compute" in str(finding.evidence["cause"])
    assert "its forward pass and loss: +300 ms/step" in str(finding.evidence["cause"])
    assert "step 13 (epoch boundary): rank 0" in str(finding.evidence["stalls_apart"])
    assert finding.saving is not None and finding.saving.ms_per_step == pytest.approx(300.0)
    metrics = headline_metrics(analysis)
    assert metrics["comm/waited_for_rank"] == 1 and metrics["comm/straggler_steps_pct"] == 100.0
    assert metrics["comm/stalls"] == 1 and metrics["comm/stall_lead_ms_max"] == pytest.approx(stall.lead_ms)
    assert metrics["trace/epoch_boundary_steps_count"] == 1
    text = render_text(analysis)
    assert "ProfilerStep#13 held an epoch boundary" in text and "saving a checkpoint" in text


def test_a_boundary_without_its_labels_is_still_seen(tmp_path):
    """Traces written before the epoch_end label: the step with two data waits holds the boundary, and what the
    rank did there is the epoch's end."""
    comm = analyze_traces(_job(tmp_path, labelled=False)).communication
    assert comm is not None and comm.boundary_steps == [13] and comm.waited_for_rank == 1
    (stall,) = comm.stalls
    assert (stall.rank, stall.activity) == (0, "epoch_end")


def test_no_straggler_on_too_few_steady_steps(tmp_path):
    """One steady step beside the boundary: no straggler is judged; both held steps are stalls, each named with
    what its rank did more than its peer."""
    analysis = analyze_traces(_job(tmp_path, steps=2, boundary=1))
    comm = analysis.communication
    assert comm is not None and comm.steady_steps == 1
    assert comm.straggler is None and comm.waited_for_rank is None
    assert [(s.step, s.rank, s.activity) for s in comm.stalls] == [(10, 1, "forward_loss"), (11, 0, "checkpoint")]
    assert "No straggler is judged on fewer than 2 steady steps" in render_text(analysis)


def test_calls_per_optimizer_step_count_gradient_all_reduces_only(tmp_path):
    """The boundary's broadcast is counted apart: gradient all-reduces per optimizer step are 2 with an
    all-reduce on every micro-batch and 1 with no_sync on all but the last, the accumulation factor."""
    (tmp_path / "plain").mkdir()
    (tmp_path / "no_sync").mkdir()
    plain = analyze_traces(_job(tmp_path / "plain")).communication
    no_sync = analyze_traces(_job(tmp_path / "no_sync", no_sync=True)).communication
    assert plain is not None and no_sync is not None
    for rank in plain.ranks:
        assert rank.calls_by_kind == {GRADIENT_ALL_REDUCE: 6, "broadcast": 1}
        assert (rank.optimizer_steps, rank.synced_steps, rank.calls_per_optimizer_step) == (3, 6, 2.0)
        assert rank.other_calls_per_step == pytest.approx(1 / 6)
    for rank in no_sync.ranks:
        assert rank.calls_by_kind == {GRADIENT_ALL_REDUCE: 3, "broadcast": 1}
        assert (rank.synced_steps, rank.calls_per_optimizer_step) == (3, 1.0)


def test_a_straggler_slow_on_its_data_is_named_by_it(tmp_path):
    analysis = analyze_traces(_job(tmp_path, slow_data=True))
    finding = next(f for f in diagnose(DiagnosisInput(analysis=analysis)) if f.rule == "ddp_straggler")
    assert finding.evidence["rank"] == "1" and "its data loading (300 ms/step more" in str(finding.evidence["cause"])
    assert "workers_8" in finding.recommended_variants
