"""Only yolo_mlops/tracking/ (and the MLflow seam it calls, compat/mlflow.py) talks to MLflow: no other module
imports mlflow or calls a client method on the handle `connection.client()` returns (the flows and library pass
that handle to the functions of `tracking.writes`, `tracking.queries` and `tracking.run_end`), and none reads
MLflow's own run objects (`run.data.params`, `run.info.status`, `mlflow.entities`): queries hand out
`queries.RunRecord`."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CLIENT_METHODS = (
    "get_run",
    "search_runs",
    "create_run",
    "log_batch",
    "log_artifact",
    "log_artifacts",
    "log_text",
    "log_table",
    "set_terminated",
    "download_artifacts",
    "get_experiment_by_name",
    "create_experiment",
    "set_tag",
    "log_metric",
    "log_param",
)
IMPORT = re.compile(r"^\s*(import mlflow|from mlflow)", re.M)
CALL = re.compile(r"\bmlflow\.(" + "|".join(CLIENT_METHODS) + r")\(")
# MLflow's Run entity read outside tracking: its `data` (params, metrics, tags) or `info` (ids, status, times)
ENTITY = re.compile(
    r"\.data\.(params|metrics|tags)\b|\.info\.(run_id|run_uuid|status|experiment_id|artifact_uri|"
    r"start_time|end_time|run_name|lifecycle_stage)\b|\bmlflow\.entities\b"
)


def offenders(files: list[Path], root: Path) -> list[str]:
    found = []
    for path in files:
        text = path.read_text()
        if IMPORT.search(text) or CALL.search(text) or ENTITY.search(text):
            found.append(str(path.relative_to(root)))
    return found


def test_no_module_outside_tracking_calls_mlflow():
    seam = REPO / "yolo_mlops" / "compat" / "mlflow.py"
    files = [
        p for p in (REPO / "yolo_mlops").rglob("*.py") if "tracking" not in p.relative_to(REPO).parts and p != seam
    ]
    files += list((REPO / "flows").glob("*.py"))
    assert offenders(files, REPO) == []


def test_the_check_sees_a_direct_call_an_import_and_an_entity_read(tmp_path):
    planted = {
        "bad.py": "def f(mlflow, run_id):\n    return mlflow.get_run(run_id)\n",
        "imports.py": "from mlflow.tracking import MlflowClient\n",
        "params.py": "def f(run):\n    return run.data.params.get('train.batch')\n",
        "metrics.py": "def f(stored):\n    return dict(stored.data.metrics)\n",
        "status.py": "def f(run):\n    return run.info.status == 'RUNNING'\n",
        "entities.py": "def f(x):\n    import yolo_mlops\n    return isinstance(x, mlflow.entities.Run)\n",
        "fine.py": "from yolo_mlops.tracking import connection, queries\n\n"
        "def f(run_id):\n    run = queries.find_run(connection.client(), run_id)\n"
        "    return run.params, run.metrics, run.status, run.info_text\n",
    }
    for name, text in planted.items():
        (tmp_path / name).write_text(text)
    found = offenders(sorted(tmp_path / name for name in planted), tmp_path)
    assert found == sorted(name for name in planted if name != "fine.py")
