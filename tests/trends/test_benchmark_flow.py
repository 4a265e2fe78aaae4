import pytest

pytestmark = pytest.mark.slow


def test_benchmark_flow_tracks_and_judges_each_run(prefect_server, mlflow_client):
    from yolo_mlops.flows.benchmark import BenchmarkSuite, benchmark
    from yolo_mlops.run.config import build_run_spec

    tiny = build_run_spec({"imgsz": 64, "batch": 4, "epochs": 2, "max_steps": 4, "workers": 0, "device": "cpu",
                           "synthetic_images": 8, "experiment": "bench-flow",
                           "profiler": {"wait": 0, "warmup": 1, "active": 1}})
    outcome = benchmark(BenchmarkSuite(runs=[tiny]))
    (run_id, verdicts), = outcome.items()
    run = mlflow_client.get_run(run_id)
    assert run.data.tags["yolo_mlops.run_kind"] == "benchmark"
    assert run.data.tags["yolo_mlops.trend"] == "insufficient_history"  # first run of a new series
    assert {v["metric"] for v in verdicts} == {"perf/step_time_ms_p50", "perf/images_per_s"}
