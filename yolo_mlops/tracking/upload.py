"""A run folder as the record of what its MLflow run should hold, and `upload`: send it to the store later.

Every profiled run keeps, in its local folder, what the tracking store should receive, written *before*
the store is asked to take it:

    tracking.json     tracking URI, experiment, run id, run name, tags, params (written once the run exists)
    run_record.json   final status and reason, summary metrics, per-step histories, tags, params, and the
                      timestamp every metric row carries (so re-sending a row is a no-op in the store)
    tables/*.json     key_averages tables (pandas 'split' JSON), sent as MLflow tables
    upload_pending    why the store missed part of the run (JSON); removed by a complete upload
    error.log         the traceback of a failed or interrupted run (the user was shown one line)
    uploaded          written after the store holds everything: `upload` has nothing left to do

`upload(folder)` sends params, tags, metrics, histories, artifacts, tables and the final status to the
recorded run (creating it, and recording the new id, if the store does not have it). It is idempotent: metric rows
carry their recorded timestamps (MLflow drops exact duplicates), artifacts overwrite themselves, tables are
sent only when absent (MLflow appends to an existing table), and a complete upload leaves `uploaded`.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from yolo_mlops import names
from yolo_mlops.errors import ConfigError

if TYPE_CHECKING:
    from mlflow.tracking import MlflowClient

TRACKING_JSON = "tracking.json"
RUN_RECORD_JSON = "run_record.json"
TABLES_DIR = "tables"
UPLOAD_PENDING = "upload_pending"
UPLOADED = "uploaded"
ERROR_LOG = "error.log"  # traceback of a run that failed (the user saw one line)


@dataclass
class TrackingInfo:
    tracking_uri: str
    experiment: str
    run_id: str | None
    run_name: str | None = None
    tags: dict[str, str] = field(default_factory=dict)
    params: dict[str, str] = field(default_factory=dict)


@dataclass
class UploadRecord:
    status: str  # FINISHED | FAILED | KILLED: the status the run ends with once the store has it all
    reason: str = ""  # one line; goes to the yolo_mlops.error tag of a FAILED/KILLED run
    metrics: dict[str, float] = field(default_factory=dict)
    histories: dict[str, list[tuple[int, float]]] = field(default_factory=dict)
    tags: dict[str, str] = field(default_factory=dict)
    params: dict[str, str] = field(default_factory=dict)
    timestamp_ms: int = field(default_factory=lambda: int(time.time() * 1000))


def _write_json(path: Path, data: object) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True))
    tmp.replace(path)  # never a half-written record


def write_tracking_info(folder: Path, info: TrackingInfo) -> None:
    _write_json(folder / TRACKING_JSON, asdict(info))


def read_tracking_info(folder: Path) -> TrackingInfo:
    path = folder / TRACKING_JSON
    if not path.is_file():
        raise ConfigError(f"{folder} is not a yolo-mlops run folder (no {TRACKING_JSON})")
    try:
        return TrackingInfo(**json.loads(path.read_text()))
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"{path} is not readable: {exc}") from None


def write_record(folder: Path, record: UploadRecord) -> None:
    _write_json(folder / RUN_RECORD_JSON, asdict(record))


def read_record(folder: Path) -> UploadRecord | None:
    path = folder / RUN_RECORD_JSON
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text())
        data["histories"] = {k: [(int(s), float(v)) for s, v in pts] for k, pts in data["histories"].items()}
        return UploadRecord(**data)
    except (ValueError, KeyError, TypeError, AttributeError) as exc:  # a damaged or partial record
        raise ConfigError(
            f"{path} is not readable ({type(exc).__name__}: {exc}); the run cannot be uploaded from it"
        ) from None


def mark_pending(folder: Path, status: str, reason: str, failures: list[str]) -> None:
    _write_json(
        folder / UPLOAD_PENDING,
        {
            "status": status,
            "reason": reason,
            "failures": failures,
            "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        },
    )
    (folder / UPLOADED).unlink(missing_ok=True)


def mark_uploaded(folder: Path) -> None:
    (folder / UPLOADED).write_text(time.strftime("%Y-%m-%dT%H:%M:%SZ\n", time.gmtime()))
    (folder / UPLOAD_PENDING).unlink(missing_ok=True)


def pending_reason(folder: Path) -> str | None:
    path = folder / UPLOAD_PENDING
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text()).get("reason") or "upload pending"
    except ValueError:
        return "upload pending"


# sending ----------------------------------------------------------------------------------------------------


def upload_artifacts(mlflow: MlflowClient, run_id: str, folder: Path) -> None:
    """Everything the run wrote, in the contract's layout (re-sending overwrites the same paths)."""
    from yolo_mlops.tracking import writes

    for name in names.RUN_FOLDERS:
        writes.log_folder(mlflow, run_id, folder / name, name)
    for name in (names.ENV_JSON, names.RUN_SPEC_YAML):
        if (folder / name).exists():
            writes.log_file(mlflow, run_id, folder / name)
    ultra = folder / names.ULTRALYTICS_DIR
    for name in names.ULTRALYTICS_FILES:
        if (ultra / name).exists():
            writes.log_file(mlflow, run_id, ultra / name, names.ULTRALYTICS_DIR)


def save_table(folder: Path, name: str, frame) -> None:
    """Keep a key_averages table locally, so `upload` can send it as an MLflow table later."""
    path = folder / TABLES_DIR / f"{name}.json"  # a data-parallel rank's name holds its rank folder
    path.parent.mkdir(parents=True, exist_ok=True)
    frame.to_json(path, orient="split", index=False)


def upload_tables(mlflow: MlflowClient, run_id: str, folder: Path) -> None:
    """Send the saved tables that the run does not hold yet (MLflow appends rows to an existing table)."""
    import pandas as pd

    from yolo_mlops.tracking import writes

    tables = folder / TABLES_DIR
    saved = sorted(tables.rglob("*.json"))  # a data-parallel job's are in rank folders
    if not saved:
        return
    present: set[str] = set()
    for sub in sorted({path.parent for path in saved}):
        present |= {
            a.path
            for a in mlflow.list_artifacts(run_id, names.profiler_file(sub.relative_to(tables).as_posix()).rstrip("/."))
        }
    for path in saved:
        artifact = names.profiler_table(path.relative_to(tables).with_suffix("").as_posix())
        if artifact not in present:
            writes.log_table(mlflow, run_id, pd.read_json(path, orient="split"), artifact)


@dataclass
class UploadResult:
    run_id: str
    status: str
    created: bool  # the run did not exist in the store: it was created and its id recorded
    already: bool  # the folder was marked uploaded: nothing was sent


def upload(folder: Path) -> UploadResult:
    """Send a run folder to its tracking store (see the module docstring); raises ConfigError on bad input."""
    from yolo_mlops.tracking import connection, queries, run_end, writes

    folder = Path(folder)
    info = read_tracking_info(folder)
    record = read_record(folder)
    if (folder / UPLOADED).is_file() and record is not None:
        return UploadResult(info.run_id or "", record.status, created=False, already=True)
    connection.bound_http_retries()
    from mlflow.tracking import MlflowClient

    mlflow = MlflowClient(tracking_uri=info.tracking_uri)
    if not connection.server_reachable(info.tracking_uri):
        raise ConfigError(f"MLflow tracking server {info.tracking_uri} is unreachable; {folder} stays pending")
    created = False
    existing = None if info.run_id is None else queries.find_run(mlflow, info.run_id)
    if existing is None:
        run_id = info.run_id = writes.create_run(mlflow, info.experiment, info.run_name, info.tags, info.params)
        write_tracking_info(folder, info)  # recorded before anything else: a retry goes to this run
        created = True
    else:
        run_id = existing.run_id
    if record is None:  # the run ended before it recorded anything (e.g. killed during preparation)
        record = UploadRecord(status="FAILED", reason=pending_reason(folder) or "the run recorded no result")
    logged = dict(info.params) if existing is None else existing.params  # params are written once only
    params = {k: v for k, v in record.params.items() if k not in logged}
    tags = dict(record.tags)
    if record.status != "FINISHED" and record.reason:
        tags[names.ERROR] = record.reason[: names.TAG_MAX_CHARS]
    writes.log_values(
        mlflow,
        run_id,
        params=params,
        metrics=record.metrics,
        tags=tags,
        histories=record.histories,
        timestamp_ms=record.timestamp_ms,
    )
    upload_artifacts(mlflow, run_id, folder)
    upload_tables(mlflow, run_id, folder)
    run_end.end_run(mlflow, run_id, record.status)
    mark_uploaded(folder)
    return UploadResult(run_id, record.status, created=created, already=False)
