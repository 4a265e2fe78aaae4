"""Only yolo_mlops/tracking/ talks to MLflow: no other module imports mlflow or calls a client method on the
handle `connection.client()` returns (the flows and library pass that handle to the functions of
`tracking.writes`, `tracking.queries` and `tracking.run_end`)."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CLIENT_METHODS = ("get_run", "search_runs", "create_run", "log_batch", "log_artifact", "log_artifacts",
                  "log_text", "log_table", "set_terminated", "download_artifacts", "get_experiment_by_name",
                  "create_experiment", "set_tag", "log_metric", "log_param")
IMPORT = re.compile(r"^\s*(import mlflow|from mlflow)", re.M)
CALL = re.compile(r"\bmlflow\.(" + "|".join(CLIENT_METHODS) + r")\(")


def offenders(files: list[Path], root: Path) -> list[str]:
    found = []
    for path in files:
        text = path.read_text()
        if IMPORT.search(text) or CALL.search(text):
            found.append(str(path.relative_to(root)))
    return found


def test_no_module_outside_tracking_calls_mlflow():
    files = [p for p in (REPO / "yolo_mlops").rglob("*.py") if "tracking" not in p.relative_to(REPO).parts]
    files += list((REPO / "flows").glob("*.py"))
    assert offenders(files, REPO) == []


def test_the_check_sees_a_direct_call_and_an_import(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("def f(mlflow, run_id):\n    return mlflow.get_run(run_id)\n")
    imports = tmp_path / "imports.py"
    imports.write_text("from mlflow.tracking import MlflowClient\n")
    fine = tmp_path / "fine.py"
    fine.write_text("from yolo_mlops.tracking import connection, queries\n\n"
                    "def f(run_id):\n    return queries.experiment_of(connection.client(), run_id)\n")
    assert offenders([bad, imports, fine], tmp_path) == ["bad.py", "imports.py"]
