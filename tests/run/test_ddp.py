"""Data-parallel training end to end: real 2-rank YOLO11n jobs over gloo on CPU (the twin of a multi-GPU NCCL
job), started by torchrun through the profile-training flow (real Prefect server), one MLflow run per job in a
real SQLite store. Faults are planted by this test's own code in one rank (tests/run/ddp_plants.py).

The plain job and its no_sync twin are the two children of one sweep of `ddp_no_sync_accumulate` (one repeat):
the sweep is checked for measuring them, the children for what each job records."""

from __future__ import annotations

import gzip
import json
import math
import os
from pathlib import Path
from typing import Any

import mlflow
import pytest

from yolo_mlops.config import SweepRequest, build_run_spec

pytestmark = pytest.mark.slow

PLANTS = Path(__file__).parent  # ddp_plants.py
PLANTED_LEAD_MS = 600.0  # ddp_plants.SLOW_FORWARD_S: rank 1's forward, every step
PLANTED_CHECKPOINT_MS = 4000.0  # ddp_plants.SLOW_CHECKPOINT_S: rank 0's first checkpoint


def _spec(name: str, **overrides):
    settings: dict[str, Any] = {
        # accumulate = round(nbs / batch) = 2 micro-batches per optimizer step; the window's 4 active steps
        # (3 to 6) hold 2 optimizer steps
        "imgsz": 64,
        "batch": 4,
        "max_steps": 8,
        "workers": 0,
        "device": "cpu",
        "synthetic_images": 32,
        "val": False,
        "experiment": "ddp",
        "run_name": name,
        "train_args": {"nbs": 8},
        "profiler": {"wait": 1, "warmup": 1, "active": 4},
        "ddp": {"ranks": 2},
    }
    for key, value in overrides.items():
        settings[key] = {**settings[key], **value} if isinstance(value, dict) and key in settings else value
    return build_run_spec(settings)


def _run(spec):
    from yolo_mlops.flows.profile_training import profile_training

    return profile_training(spec)


@pytest.fixture(scope="module")
def ddp_sweep(prefect_server, mlflow_client):
    """A sweep of the accumulation variant over 2-rank jobs: the baseline job and its no_sync twin, one repeat."""
    from yolo_mlops.flows.sweep import sweep

    return sweep(SweepRequest(base=_spec("ddp-sweep"), variants=["ddp_no_sync_accumulate"], repeats=1, warmup_steps=1))


def _child(ddp_sweep, mlflow_client, variant: str):
    (run_id,) = [c["run_id"] for c in ddp_sweep.children if c["variant"] == variant]
    return run_id, mlflow_client.get_run(run_id)


@pytest.fixture(scope="module")
def job(ddp_sweep, mlflow_client):
    return _child(ddp_sweep, mlflow_client, "baseline")


@pytest.fixture(scope="module")
def no_sync_job(ddp_sweep, mlflow_client):
    return _child(ddp_sweep, mlflow_client, "ddp_no_sync_accumulate")


def test_a_sweep_of_ddp_jobs_measures_them(ddp_sweep):
    """Each child is read at its job's pace (analysis/step_times.csv: the slowest rank per step): measured
    repeats, a speed-up with its confidence interval, a best named from measurements."""
    rows = {r.variant: r for r in ddp_sweep.rows}
    assert (ddp_sweep.failed_children, ddp_sweep.total_children) == (0, 2)
    for row in rows.values():
        # steps 6 and 7: after the first, outside the window (its warm-up step 1, its recorded steps 2 to 5)
        assert (row.status, row.repeats_ok, row.repeats_failed, row.steps) == ("ok", 1, 0, 2), row
    no_sync = rows["ddp_no_sync_accumulate"]
    assert math.isfinite(no_sync.speedup) and no_sync.ci_low <= no_sync.speedup <= no_sync.ci_high
    assert no_sync.verdict in ("faster", "slower", "no measurable difference")
    assert not ddp_sweep.best_evidence.startswith("no best"), ddp_sweep.best_evidence


def test_one_run_holds_both_ranks(job, tmp_path):
    run_id, run = job
    assert run.info.status == "FINISHED"
    params, metrics = run.data.params, run.data.metrics
    assert params["ddp.world_size"] == "2" and params["ddp.backend_used"] == "gloo"
    assert params["ddp.applied.find_unused_parameters"] == "True"
    for rank in (0, 1):
        assert metrics[f"rank{rank}/perf/step_time_ms_p50"] > 0
        assert metrics[f"rank{rank}/comm/collective_pct"] > 0
    # the headline is the job's pace: each step its slowest rank's (no rank's median is above it), with every
    # rank's images (the job's throughput is at most the ranks' summed)
    assert metrics["perf/step_time_ms_p50"] >= max(metrics[f"rank{r}/perf/step_time_ms_p50"] for r in (0, 1))
    assert metrics["perf/images_per_s"] <= sum(metrics[f"rank{r}/perf/images_per_s"] for r in (0, 1)) * (1 + 1e-9)
    assert "inside one epoch" in run.data.tags["yolo_mlops.profiler_window"]
    assert metrics["trace/epoch_boundary_steps_count"] == 0
    local = Path(mlflow.artifacts.download_artifacts(run_id=run_id, dst_path=str(tmp_path)))
    for rank in (0, 1):
        (trace,) = (local / "profiler" / f"rank{rank}").glob("*.pt.trace.json.gz")
        info = json.loads(gzip.decompress(trace.read_bytes()))["distributedInfo"]
        assert (info["rank"], info["world_size"], info["backend"]) == (rank, 2, "gloo")
        assert (local / "profiler" / f"rank{rank}" / "key_averages_self_cpu.txt").is_file()
        assert (local / "profiler" / f"rank{rank}" / "key_averages_self_cpu.json").is_file()
        assert len((local / "analysis" / f"rank{rank}" / "step_times.csv").read_text().splitlines()) == 1 + 8
    assert len((local / "analysis" / "step_times.csv").read_text().splitlines()) == 1 + 8  # the job's pace
    analysis = json.loads((local / "analysis" / "trace_analysis.json").read_text())
    assert [r["rank"] for r in analysis["ranks"]] == [0, 1]
    comm = analysis["communication"]
    assert comm["backend"] == "gloo" and comm["world_size"] == 2 and comm["matched_collectives"] > 0
    for rank in comm["ranks"]:
        # gloo's all_reduce spans were found and measured, step by step
        assert rank["collective_calls"] > 0 and rank["steps"] == 4
        assert 0 < rank["exposed_time_us"] <= rank["collective_time_us"] <= rank["step_time_us"]
        assert len(rank["collective_ms_by_step"]) == 4


def test_no_sync_accumulation_all_reduces_once_per_optimizer_step(job, no_sync_job):
    """ultralytics all-reduces every micro-batch; no_sync on all but the last cuts the gradient all-reduces per
    optimizer step by the accumulate factor (2 here), as counted in both ranks' traces."""
    _, plain = job
    _, no_sync = no_sync_job
    assert no_sync.data.params["ddp.no_sync_accumulation"] == "True"
    for rank in (0, 1):
        name = f"rank{rank}/comm/calls_per_optimizer_step"
        assert plain.data.metrics[name] == 2 * no_sync.data.metrics[name]
        assert no_sync.data.metrics[name] >= 1
    # the bytes follow: every gradient twice per optimizer step without no_sync, once with it
    gradient_mib = no_sync.data.metrics["comm/gradient_mib"]
    assert no_sync.data.metrics["comm/allreduce_mib_per_optimizer_step"] == pytest.approx(gradient_mib)
    assert plain.data.metrics["comm/allreduce_mib_per_optimizer_step"] == pytest.approx(2 * gradient_mib)


def test_a_compute_straggler_is_named_and_the_epoch_boundary_stall_apart(prefect_server, mlflow_client, monkeypatch):
    """Rank 1's forward is slow in every step; rank 0's first checkpoint is slower still, at the epoch boundary
    inside the window (epochs of 4 steps cannot hold its 5 recorded steps). Summed over the window, rank 1 waited
    longer (the checkpoint) and looked like the rank the others wait for is rank 0; step by step, rank 1 holds
    every steady step back and the boundary step is rank 0's stall, named as its checkpoint."""
    monkeypatch.syspath_prepend(str(PLANTS))  # the launcher hands its sys.path to the ranks
    monkeypatch.setenv("YOLO_MLOPS_RANK_SETUP", "ddp_plants:slow_forward_on_rank1_slow_checkpoint_on_rank0")
    result = _run(_spec("straggler", synthetic_images=16, profiler={"active": 5}))
    run = mlflow_client.get_run(result.run_id)
    metrics = run.data.metrics
    assert "steps 2-6 hold the epoch boundary at step(s) 4" in run.data.tags["yolo_mlops.profiler_window"]
    assert metrics["trace/epoch_boundary_steps_count"] == 1
    assert metrics["comm/waited_for_rank"] == 1
    comm_dir = Path(mlflow.artifacts.download_artifacts(run_id=result.run_id, artifact_path="analysis"))
    comm = json.loads((comm_dir / "trace_analysis.json").read_text())["communication"]
    by_rank = {r["rank"]: r for r in comm["ranks"]}
    assert by_rank[1]["wait_time_us"] > by_rank[0]["wait_time_us"]  # what the summed rule read as rank 0
    assert comm["boundary_steps"] == [4] and comm["steady_steps"] == 4
    straggler = comm["straggler"]
    assert straggler["rank"] == 1 and straggler["steps_held"] >= 3, straggler
    assert 0.5 * PLANTED_LEAD_MS < straggler["median_lead_ms"] < 1.5 * PLANTED_LEAD_MS, straggler
    (stall,) = [s for s in comm["stalls"] if s["boundary"]]
    assert (stall["step"], stall["rank"], stall["activity"]) == (4, 0, "checkpoint"), stall
    assert stall["lead_ms"] > 0.5 * PLANTED_CHECKPOINT_MS, stall
    finding = next(f for f in result.findings if f.rule == "ddp_straggler")
    assert finding.evidence["rank"] == "1" and "own compute" in str(finding.evidence["cause"])
    assert "its forward pass" in str(finding.evidence["cause"]) and "saving a checkpoint" in str(
        finding.evidence["stalls_apart"]
    )
    report = (comm_dir / "report.md").read_text()
    assert "ProfilerStep#4 held an epoch boundary" in report


def test_a_killed_rank_fails_the_job_and_leaves_no_process(prefect_server, mlflow_client, monkeypatch):
    monkeypatch.syspath_prepend(str(PLANTS))  # the launcher hands its sys.path to the ranks
    monkeypatch.setenv("YOLO_MLOPS_RANK_SETUP", "ddp_plants:kill_rank1")
    from yolo_mlops.run.ddp import DdpJobFailed

    with pytest.raises(DdpJobFailed) as failure:
        _run(_spec("killed-rank"))
    # torchrun noticed the death (not a collective's timeout) and stopped the other rank
    assert "rank 1 of 2 ended by signal 9 (SIGKILL)" in str(failure.value)
    runs = mlflow_client.search_runs(
        [mlflow_client.get_experiment_by_name("ddp").experiment_id], "attributes.run_name = 'killed-rank'"
    )
    (run,) = runs
    assert run.info.status == "FAILED"
    assert "rank 1 of 2" in run.data.tags["yolo_mlops.error"]
    assert not _rank_processes()
    # what the ranks recorded before the job stopped is kept: the traces of the window that had closed
    for rank in (0, 1):
        kept = mlflow_client.list_artifacts(run.info.run_id, f"profiler/rank{rank}")
        assert any(a.path.endswith(".pt.trace.json.gz") for a in kept), kept


def _rank_processes() -> list[str]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if "yolo_mlops.run.ddp_rank" in cmdline or ("torch.distributed.run" in cmdline and "ddp_rank" in cmdline):
            found.append(cmdline)
    return found


def test_compare_reads_a_job_per_rank(job, no_sync_job, capsys):
    """Two jobs' operator and phase diff: each job's slowest rank by default, any rank with --rank."""
    from yolo_mlops import cli

    (_, a), (_, b) = job, no_sync_job
    for extra in ([], ["--rank", "1"]):
        assert cli.main(["compare", a.info.run_id, b.info.run_id, "--format", "json", *extra]) == 0
        diff = json.loads(capsys.readouterr().out)
        kinds = {row["kind"] for row in diff["contributions"]}
        assert {"operator", "phase"} <= kinds, kinds
    assert cli.main(["compare", a.info.run_id, b.info.run_id, "--rank", "5"]) == 2  # no such rank: one line
    assert "has no rank 5" in capsys.readouterr().err
