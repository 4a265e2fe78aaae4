"""The MLflow names a demo-sized profiled run writes: tag keys, param keys, metric keys and artifact paths.

`python tests/tracking/demo_run_names.py OUT.json` runs one tiny CPU run (YOLO11n, 64 px, 6 steps, fake NVML
backend so the gpu/* and nvml/ names appear) through `yolo_mlops.cli.main(["profile", ...])` against a
throwaway MLflow store and Prefect test server, and writes the sorted, normalised names as JSON.
`test_names_unchanged.py` runs the same run in-process and compares against `demo_run_names.json`.
Only the public CLI and the MLflow client are used, so the script runs against any version of the package.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import yaml

ACTIVE_STEPS = 2
MAX_STEPS = 6
RUN_CONFIG = {
    "imgsz": 64,
    "batch": 4,
    "epochs": 2,
    "workers": 0,
    "device": "cpu",
    "synthetic_images": 16,
    "nvml": {"backend": "fake", "interval_ms": 20},
    "profiler": {"wait": 1, "warmup": 1, "active": ACTIVE_STEPS},
}

# Run-specific parts of artifact paths, replaced by a placeholder:
# torch's tensorboard_trace_handler names traces "<host>_<pid>.<epoch ms>.pt.trace.json.gz".
_NORMALISE = ((re.compile(r"^(profiler/).+_\d+\.\d+(\.pt\.trace\.json\.gz)$"), r"\1<host>_<pid>.<ms>\2"),)


def normalise_path(path: str) -> str:
    for pattern, replacement in _NORMALISE:
        path = pattern.sub(replacement, path)
    return path


def artifact_paths(client, run_id: str, path: str | None = None) -> list[str]:
    out: list[str] = []
    for info in client.list_artifacts(run_id, path):
        out.extend(artifact_paths(client, run_id, info.path) if info.is_dir else [info.path])
    return out


def normalise_metric(metric: str) -> str:
    """An operator's metric (`op/cpu/<operator>`, `op/device/<operator>`) names whatever the run's profile held:
    one placeholder per kind."""
    for kind in ("op/cpu/", "op/device/"):
        if metric.startswith(kind):
            return kind + "operator"
    return metric


def run_names(client, run_id: str) -> dict[str, list[str]]:
    run = client.get_run(run_id)
    return {
        "tags": sorted(run.data.tags),
        "params": sorted(run.data.params),
        "metrics": sorted({normalise_metric(m) for m in run.data.metrics}),
        "artifacts": sorted({normalise_path(p) for p in artifact_paths(client, run_id)}),
    }


def write_config(folder: Path, experiment: str) -> Path:
    config = folder / "run.yaml"
    config.write_text(yaml.safe_dump({**RUN_CONFIG, "experiment": experiment}))
    return config


def profile_args(config: Path) -> list[str]:
    return ["profile", "--config", str(config), "--max-steps", str(MAX_STEPS), "--run-name", "names"]


def _main(out: Path) -> int:
    import os
    import tempfile

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: isolation.py
    from isolation import isolate

    home = Path(tempfile.mkdtemp(prefix="demo-run-names-"))
    isolate(home)

    from mlflow.tracking import MlflowClient
    from prefect.testing.utilities import prefect_test_harness

    from yolo_mlops import cli

    with prefect_test_harness(server_startup_timeout=300):
        assert cli.main(profile_args(write_config(home, "names"))) == 0
    client = MlflowClient(tracking_uri=os.environ["MLFLOW_TRACKING_URI"])
    experiment = client.get_experiment_by_name("names")
    assert experiment is not None
    runs = client.search_runs([experiment.experiment_id])
    assert len(runs) == 1, runs
    out.write_text(json.dumps(run_names(client, runs[0].info.run_id), indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(_main(Path(sys.argv[1])))
