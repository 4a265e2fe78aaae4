"""Data-parallel training end to end: real 2-rank YOLO11n jobs over gloo on CPU (the twin of a multi-GPU NCCL
job), started by torchrun through the profile-training flow (real Prefect server), one MLflow run per job in a
real SQLite store. Faults are planted by this test's own code in one rank (tests/run/ddp_plants.py)."""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path
from typing import Any

import mlflow
import pytest

from yolo_mlops.config import build_run_spec

pytestmark = pytest.mark.slow

PLANTS = Path(__file__).parent  # ddp_plants.py
PLANTED_WAIT_MS = 2 * 500.0  # ddp_plants: 2 images per rank and step, 0.5 s each


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
def job(prefect_server, mlflow_client):
    result = _run(_spec("two-ranks"))
    return result, mlflow_client.get_run(result.run_id)


@pytest.fixture(scope="module")
def no_sync_job(prefect_server, mlflow_client):
    result = _run(_spec("two-ranks-no-sync", ddp={"no_sync_accumulation": True}))
    return result, mlflow_client.get_run(result.run_id)


def test_one_run_holds_both_ranks(job, tmp_path):
    result, run = job
    assert run.info.status == "FINISHED"
    params, metrics = run.data.params, run.data.metrics
    assert params["ddp.world_size"] == "2" and params["ddp.backend_used"] == "gloo"
    assert params["ddp.applied.find_unused_parameters"] == "True"
    for rank in (0, 1):
        assert metrics[f"rank{rank}/perf/step_time_ms_p50"] > 0
        assert metrics[f"rank{rank}/comm/collective_pct"] > 0
    # the headline is the slowest rank's (DDP moves at its pace), throughput the sum of the ranks'
    slowest = int(metrics["perf/slowest_rank"])
    assert metrics["perf/step_time_ms_p50"] == metrics[f"rank{slowest}/perf/step_time_ms_p50"]
    assert metrics["perf/step_time_ms_p50"] == max(metrics[f"rank{r}/perf/step_time_ms_p50"] for r in (0, 1))
    assert metrics["perf/images_per_s"] == pytest.approx(sum(metrics[f"rank{r}/perf/images_per_s"] for r in (0, 1)))
    local = Path(mlflow.artifacts.download_artifacts(run_id=result.run_id, dst_path=str(tmp_path)))
    for rank in (0, 1):
        (trace,) = (local / "profiler" / f"rank{rank}").glob("*.pt.trace.json.gz")
        info = json.loads(gzip.decompress(trace.read_bytes()))["distributedInfo"]
        assert (info["rank"], info["world_size"], info["backend"]) == (rank, 2, "gloo")
        assert (local / "profiler" / f"rank{rank}" / "key_averages_self_cpu.txt").is_file()
        assert (local / "profiler" / f"rank{rank}" / "key_averages_self_cpu.json").is_file()
        assert len((local / "analysis" / f"rank{rank}" / "step_times.csv").read_text().splitlines()) == 1 + 8
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
    """ultralytics all-reduces every micro-batch; no_sync on all but the last cuts the collectives per optimizer
    step by the accumulate factor (2 here), as counted in both ranks' traces."""
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


def test_a_slow_rank_is_named_with_its_cause(prefect_server, mlflow_client, monkeypatch):
    monkeypatch.syspath_prepend(str(PLANTS))  # the launcher hands its sys.path to the ranks
    monkeypatch.setenv("YOLO_MLOPS_RANK_SETUP", "ddp_plants:slow_data_on_rank1")
    result = _run(_spec("straggler"))
    metrics = mlflow_client.get_run(result.run_id).data.metrics
    assert metrics["comm/waited_for_rank"] == 1
    comm_dir = Path(mlflow.artifacts.download_artifacts(run_id=result.run_id, artifact_path="analysis"))
    comm = json.loads((comm_dir / "trace_analysis.json").read_text())["communication"]
    wait_ms = {r["rank"]: r["wait_time_us"] / r["steps"] / 1000 for r in comm["ranks"]}
    # rank 0 waits inside its collectives for about the time rank 1 spends on its slowed data
    assert 0.5 * PLANTED_WAIT_MS < wait_ms[0] - wait_ms[1] < 1.5 * PLANTED_WAIT_MS, wait_ms
    straggler = next(f for f in result.findings if f.rule == "ddp_straggler")
    assert straggler.evidence["rank"] == "1" and "data loading" in straggler.evidence["cause"]
    assert "workers_8" in straggler.recommended_variants


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
