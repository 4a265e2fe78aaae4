"""End to end: `yolo-mlops profile --config` -> Prefect flow (real test server) -> real YOLO11n training on
CPU -> real torch.profiler trace -> one MLflow run in a real SQLite store."""

from __future__ import annotations

import csv
import gzip
import json
from pathlib import Path

import mlflow
import pytest
import yaml
from workloads import tiny

from yolo_mlops import cli

pytestmark = pytest.mark.slow

ACTIVE_STEPS = 2


@pytest.fixture(scope="module")
def profiled_run(prefect_server, mlflow_client, tmp_path_factory):
    config = tmp_path_factory.mktemp("cfg") / "run.yaml"
    # the tiny workload over 2 epochs, validated, its stacks recorded; --max-steps below sets its length
    profiler = {"wait": 1, "warmup": 1, "active": ACTIVE_STEPS, "with_stack": True}
    workload = tiny(max_steps=None, epochs=2, val=True, experiment="e2e", profiler=profiler)
    config.write_text(yaml.safe_dump(workload))
    assert cli.main(["profile", "--config", str(config), "--max-steps", "6", "--run-name", "e2e"]) == 0
    runs = mlflow_client.search_runs([mlflow_client.get_experiment_by_name("e2e").experiment_id])
    assert len(runs) == 1
    return runs[0]


def test_run_finished_with_contract_tags_and_params(profiled_run):
    run = profiled_run
    assert run.info.status == "FINISHED"
    tags, params = run.data.tags, run.data.params
    assert tags["yolo_mlops.run_kind"] == "profile" and tags["yolo_mlops.variant"] == "baseline"
    assert len(tags["yolo_mlops.series"]) == 16
    assert len(tags["mlflow.source.git.commit"]) == 40
    assert tags["yolo_mlops.profiler_activities"] == "cpu"
    # no GPU here: the run says so, and logs no gpu/* number at all (never zeros as if measured)
    assert tags["yolo_mlops.nvml_backend"] == "none" and "CPU" in tags["yolo_mlops.nvml_reason"]
    assert not [k for k in run.data.metrics if k.startswith("gpu/")]
    assert params["train.imgsz"] == "64" and params["train.max_steps"] == "6"
    assert params["profiler.active"] == str(ACTIVE_STEPS)
    for key in ("env.torch", "env.ultralytics", "env.cudnn", "env.torch_cuda", "env.device_name"):
        assert params[key]


def test_metrics_are_present_and_plausible(profiled_run, mlflow_client):
    m = profiled_run.data.metrics
    assert m["perf/steps_total"] == 6
    assert 0 < m["perf/step_time_ms_p50"] <= m["perf/step_time_ms_p90"] < 60_000
    assert 0 <= m["perf/data_wait_pct"] < 100
    # images/s must agree with the step times it was derived from (batch 4, steady steps)
    assert m["perf/images_per_s"] == pytest.approx(4000 / m["perf/step_time_ms_mean"], rel=1e-6)
    assert {"train/box_loss", "train/cls_loss", "train/dfl_loss"} <= m.keys()
    assert "val/mAP50-95" in m
    assert profiled_run.data.tags["yolo_mlops.analysis_status"] == "ok"
    assert m["trace/step_time_ms_mean"] > 0 and "trace/gpu_idle_pct" not in m  # CPU trace: no GPU numbers
    history = mlflow_client.get_metric_history(profiled_run.info.run_id, "perf/step_time_ms")
    assert sorted(h.step for h in history) == list(range(6))
    losses = mlflow_client.get_metric_history(profiled_run.info.run_id, "train/box_loss")
    assert len(losses) == 6 and len({h.value for h in losses}) > 1  # one real value per step
    # cross-check with ultralytics' own bookkeeping: its epoch-1 train/box_loss is the mean of that epoch's steps
    results = Path(
        mlflow.artifacts.download_artifacts(run_id=profiled_run.info.run_id, artifact_path="ultralytics/results.csv")
    )
    epoch1 = next(csv.DictReader(results.read_text().splitlines()))
    per_step = [h.value for h in sorted(losses, key=lambda h: h.step)]
    assert float(epoch1["train/box_loss"]) == pytest.approx(sum(per_step[:4]) / 4, rel=1e-3, abs=1e-5)


def test_trace_holds_profiled_steps_and_phase_labels(profiled_run, tmp_path):
    run_id = profiled_run.info.run_id
    local = Path(mlflow.artifacts.download_artifacts(run_id=run_id, artifact_path="profiler", dst_path=str(tmp_path)))
    traces = sorted(local.glob("*.pt.trace.json.gz"))
    assert len(traces) == 1
    events = json.loads(gzip.decompress(traces[0].read_bytes()))["traceEvents"]
    names = {e.get("name", "") for e in events}
    assert len({n for n in names if n.startswith("ProfilerStep#")}) == ACTIVE_STEPS
    for label in ("data_wait", "preprocess", "forward_loss", "backward"):
        assert f"yolo_mlops/{label}" in names
    assert "aten::convolution" in names
    for name in ("key_averages_self_cpu", "key_averages_memory", "key_averages_by_shape"):
        assert "Name" in (local / f"{name}.txt").read_text()


def test_tables_are_mlflow_tables_with_rows(profiled_run, mlflow_client):
    table = mlflow_client.load_table(
        profiled_run.info.experiment_id,
        "profiler/key_averages_self_cpu.json",
        run_ids=[profiled_run.info.run_id],
        extra_columns=["run_id"],
    )
    assert len(table) > 10
    # torch's self time of the ProfilerStep* wrapper is its duration less its children's, and the Python frames
    # of the callback that calls profiler.step() straddle the step's ends (with_stack): near 0, seen at -1.6 ms
    operators = table[~table["name"].str.startswith("ProfilerStep")]
    assert (operators["self_cpu_time_us"] >= 0).all() and table["self_cpu_time_us"].max() > 0
    assert set(table["run_id"]) == {profiled_run.info.run_id}


def test_artifacts_follow_the_layout(profiled_run, mlflow_client):
    run_id = profiled_run.info.run_id
    top = {a.path for a in mlflow_client.list_artifacts(run_id)}
    assert {"profiler", "analysis", "env.json", "run_spec.yaml", "ultralytics"} <= top
    analysis = {a.path.split("/")[-1] for a in mlflow_client.list_artifacts(run_id, "analysis")}
    assert {"report.md", "report.html", "trace_analysis.json", "findings.json", "step_times.csv"} <= analysis
    assert {a.path for a in mlflow_client.list_artifacts(run_id, "ultralytics")} >= {
        "ultralytics/results.csv",
        "ultralytics/args.yaml",
    }


def test_memory_split_by_holder_recorded_with_stacks(profiled_run, mlflow_client):
    run_id, m = profiled_run.info.run_id, profiled_run.data.metrics
    assert profiled_run.data.tags["yolo_mlops.memory_by_holder"] == "recorded"
    holders = {k: v for k, v in m.items() if k.startswith("memory/peak_") and k != "memory/peak_total_mib"}
    assert len(holders) == 8 and sum(holders.values()) == pytest.approx(m["memory/peak_total_mib"], rel=1e-9)
    # yolo11n at nc=3 holds 9.88 MiB of float32 parameters, all live at any point of a training step (the
    # profiler counts a little more as parameter in an ultralytics run: 11.1 MiB here), never a second copy
    assert 9.88 <= m["memory/peak_parameter_mib"] < 2 * 9.88
    assert "profiler/memory_timeline.gz" in {a.path for a in mlflow_client.list_artifacts(run_id, "profiler")}
    for name, heading in (("report.md", "## Peak memory by holder"), ("report.html", "Peak memory by holder</h2>")):
        report = Path(mlflow.artifacts.download_artifacts(run_id=run_id, artifact_path=f"analysis/{name}"))
        assert heading in report.read_text(), name


def test_run_needed_no_internet_and_opened_no_second_run(profiled_run, blocked_connections, mlflow_client):
    assert blocked_connections == []
    experiments = {e.name for e in mlflow_client.search_experiments()}
    assert not any("ultralytics" in name.lower() for name in experiments)  # its MLflow callback stayed off


def test_prefect_summary_artifact_links_the_run(profiled_run):
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

    with get_client(sync_client=True) as client:
        artifacts = client.read_artifacts(
            artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=["profile-run-summary"]))
        )
    assert any(profiled_run.info.run_id in (a.data or "") for a in artifacts)
    with get_client(sync_client=True) as client:
        reports = client.read_artifacts(
            artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=["profile-run-report"]))
        )
    assert reports and reports[0].data is not None and "Step" in reports[0].data
