"""Bad input fails before training with one clear line; nothing is left RUNNING in MLflow."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from refusals import Refusal
from short_runs import short_run

from yolo_mlops import cli


def _run_cli(capsys, *argv: str) -> tuple[int, str]:
    code = cli.main(
        [
            "profile",
            "--device",
            "cpu",
            "--imgsz",
            "64",
            "--batch",
            "4",
            "--workers",
            "0",
            "--experiment",
            "bad-input",
            *argv,
        ]
    )
    return code, capsys.readouterr().err.strip()


def _runs(mlflow_client):
    experiment = mlflow_client.get_experiment_by_name("bad-input")
    return [] if experiment is None else mlflow_client.search_runs([experiment.experiment_id])


def _case(case: str, argv: tuple[str, ...], says: str) -> Refusal:
    """A bad `profile` flag: the command line _run_cli builds around `argv` (CPU, small run, its own experiment)."""
    return Refusal(case, "profile " + " ".join(argv), (says,), argv, kept="nothing: no MLflow run")


REFUSALS = [
    _case("model-config-not-found", ("--model", "yolo99z.yaml"), "model config not found: yolo99z.yaml"),
    _case("checkpoint-not-found", ("--model", "/nowhere/best.pt"), "model checkpoint not found"),
    _case("dataset-not-found", ("--data", "/nowhere/data.yaml"), "dataset YAML not found"),
    _case("no-active-step", ("--active", "0"), "profiler.active"),
    _case(
        "window-longer-than-max-steps",
        ("--max-steps", "3", "--wait", "2"),
        "profiler window needs 6 steps (skip_first + (wait + warmup + active) * repeat) but max_steps is 3",
    ),
    _case(
        "window-longer-than-the-run",
        ("--epochs", "1", "--active", "40"),
        "profiler window needs 42 steps but the run has only",
    ),
    _case("gpu-without-cuda", ("--device", "0"), "CUDA is not available"),
    # data-parallel jobs
    _case("one-gpu-twice", ("--device", "0,0"), "device '0,0' names a device twice: one rank per device"),
    _case("cpu-ranks-on-gpus", ("--device", "0,1", "--ranks", "2"), "ddp.ranks (--ranks) is for CPU ranks"),
    _case("nccl-on-cpu", ("--ranks", "2", "--ddp-backend", "nccl"), "ddp backend nccl needs GPUs"),
    _case(
        "batch-not-divisible-by-ranks",
        ("--ranks", "3"),
        "batch 4 does not divide over 3 ranks (ultralytics would train 1 images per rank",
    ),
    _case("zero-ranks", ("--ranks", "0"), "ddp.ranks"),
    _case("more-gpus-than-the-machine", ("--device", "0,1"), "CUDA is not available"),  # here: none at all
]


@pytest.mark.parametrize("refusal", REFUSALS, ids=[r.case for r in REFUSALS])
def test_bad_input_is_one_line_and_creates_no_run(capsys, mlflow_client, refusal):
    code, err = _run_cli(capsys, *refusal.argv)
    assert code == 2
    assert all(says in err for says in refusal.says) and len(err.splitlines()) == 1
    assert _runs(mlflow_client) == []


def test_dataset_yaml_with_missing_paths(capsys, tmp_path: Path, mlflow_client):
    data = tmp_path / "data.yaml"
    data.write_text(
        yaml.safe_dump({"path": str(tmp_path), "train": "images/train", "val": "images/val", "names": ["a"]})
    )
    code, err = _run_cli(capsys, "--data", str(data))
    assert code == 2 and "train path does not exist" in err
    assert _runs(mlflow_client) == []


def test_unreachable_tracking_server(capsys, monkeypatch, mlflow_client):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://127.0.0.1:9")  # discard port: nothing listens
    code, err = _run_cli(capsys)
    assert code == 2 and "unreachable" in err


@pytest.mark.slow
def test_failure_during_training_ends_the_run_failed(prefect_server, mlflow_client):
    """Input only ultralytics can reject (unknown optimizer) fails after the run exists: it must end FAILED."""
    from yolo_mlops.config import build_run_spec
    from yolo_mlops.flows.profile_training import profile_training

    spec = build_run_spec(short_run(max_steps=4, experiment="fails", train_args={"optimizer": "NoSuchOptimizer"}))
    with pytest.raises(Exception):  # noqa: B017 - whatever ultralytics raises; the run's end state is the test
        profile_training(spec)
    runs = mlflow_client.search_runs([mlflow_client.get_experiment_by_name("fails").experiment_id])
    assert [r.info.status for r in runs] == ["FAILED"]
    assert "NoSuchOptimizer" in runs[0].data.tags["yolo_mlops.error"]
    assert "env.json" in {a.path for a in mlflow_client.list_artifacts(runs[0].info.run_id)}


@pytest.mark.slow
def test_corrupt_trace_marks_analysis_failed_but_keeps_the_run(mlflow_client):
    """Analysis of a broken trace is recorded as failed; the run's measurements still land, FINISHED."""
    from yolo_mlops.config import build_run_spec
    from yolo_mlops.run import pipeline
    from yolo_mlops.tracking import run_end

    spec = build_run_spec(short_run(max_steps=3, experiment="corrupt-trace"))
    prepared = pipeline.prepare(spec)
    with run_end.run_guard(mlflow_client, prepared.run_id):
        outcome = pipeline.train(prepared)
        trace = outcome.trace_files[-1]
        trace.write_bytes(trace.read_bytes()[: trace.stat().st_size // 2])  # truncated gzip
        analysis = pipeline.analyze(prepared, outcome)
        pipeline.track(prepared, outcome, analysis)
    run = mlflow_client.get_run(prepared.run_id)
    assert run.info.status == "FINISHED"
    assert run.data.tags["yolo_mlops.analysis_status"] == "failed"
    assert trace.name in run.data.tags["yolo_mlops.analysis_error"]
    assert run.data.metrics["perf/step_time_ms_p50"] > 0


def test_more_gpus_than_the_machine_has(monkeypatch):
    """The GPU is the one piece of hardware tests may fake: a machine of 2 GPUs asked for a third."""
    import torch

    from yolo_mlops.config import build_run_spec
    from yolo_mlops.errors import ConfigError
    from yolo_mlops.run import preflight

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    spec = build_run_spec({"device": "0,1,2", "batch": 6})
    with pytest.raises(ConfigError, match=r"device '0,1,2' names GPU\(s\) \[2\] but this machine has 2 \(0 to 1\)"):
        preflight._check_device("0,1,2", spec)
    preflight._check_device("0,1", build_run_spec({"device": "0,1", "batch": 6}))  # both exist: accepted
