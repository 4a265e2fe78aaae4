"""A demo-sized profiled run writes exactly the MLflow names recorded in demo_run_names.json.

The reference was written by `python tests/tracking/demo_run_names.py demo_run_names.json`, run with the
package at commit 16f5716 (the module layout with `yolo_mlops/pipeline.py`, `yolo_mlops/tracking.py` and a
top-level `flows` package) on PYTHONPATH, then rewritten by the same script for the series identity
(tag `yolo_mlops.series` replaces `yolo_mlops.series_key`, which readers still read; param
`env.nvidia_driver`). The same script runs against any version, because it uses only
`yolo_mlops.cli.main(["profile", ...])` and the MLflow client. A name that changes on purpose needs the
reference rewritten with the script, a row in docs/mlflow.md, and a migration or a reader of both names.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from yolo_mlops import cli

pytestmark = pytest.mark.slow

HERE = Path(__file__).parent


def _demo_module():
    spec = importlib.util.spec_from_file_location("demo_run_names", HERE / "demo_run_names.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_demo_run_writes_exactly_the_recorded_names(prefect_server, mlflow_client, tmp_path):
    demo = _demo_module()
    experiment = "names-unchanged"
    assert cli.main(demo.profile_args(demo.write_config(tmp_path, experiment))) == 0
    runs = mlflow_client.search_runs([mlflow_client.get_experiment_by_name(experiment).experiment_id])
    assert len(runs) == 1 and runs[0].info.status == "FINISHED"

    written = demo.run_names(mlflow_client, runs[0].info.run_id)
    recorded = json.loads((HERE / "demo_run_names.json").read_text())
    assert set(written) == set(recorded)
    for kind, names in recorded.items():
        added, missing = sorted(set(written[kind]) - set(names)), sorted(set(names) - set(written[kind]))
        assert not added and not missing, f"{kind}: new {added}, gone {missing}"
    assert len(written["metrics"]) > 50 and any(p.startswith("nvml/") for p in written["artifacts"])


def test_normalisation_keeps_everything_but_the_trace_file_identity():
    demo = _demo_module()
    assert (
        demo.normalise_path("profiler/box-7_123.1764750000123.pt.trace.json.gz")
        == "profiler/<host>_<pid>.<ms>.pt.trace.json.gz"
    )
    assert demo.normalise_path("profiler/key_averages_self_cpu.json") == "profiler/key_averages_self_cpu.json"
