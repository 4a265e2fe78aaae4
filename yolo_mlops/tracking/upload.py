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
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING

from yolo_mlops import names
from yolo_mlops.errors import ConfigError

if TYPE_CHECKING:
    from mlflow.tracking import MlflowClient

    from yolo_mlops.tracking.queries import RunRecord

TRACKING_JSON = "tracking.json"
RUN_RECORD_JSON = "run_record.json"
TABLES_DIR = "tables"
UPLOAD_PENDING = "upload_pending"
UPLOADED = "uploaded"
ERROR_LOG = "error.log"  # traceback of a run that failed (the user saw one line)
TERMINAL_STATUSES = ("FINISHED", "FAILED", "KILLED")


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
    """The folder's tracking.json, every field checked (ConfigError naming the field): `upload` trusts it to
    create or resume a run, so a damaged one must fail before the store is touched."""
    path = folder / TRACKING_JSON
    if not path.is_file():
        raise ConfigError(f"{folder} is not a yolo-mlops run folder (no {TRACKING_JSON})")
    data = _json_object(path)
    missing = [name for name in ("tracking_uri", "experiment", "run_id") if name not in data]
    unknown = sorted(set(data) - {f.name for f in fields(TrackingInfo)})
    if missing or unknown:
        said = [f"lacks {', '.join(missing)}"] if missing else []
        said += [f"has unknown field(s) {', '.join(unknown)}"] if unknown else []
        raise ConfigError(f"{path} {' and '.join(said)}: not a run folder's record, or damaged")
    problems = [
        _expect(data, "tracking_uri", str, required=True),
        _expect(data, "experiment", str, required=True),
        _expect(data, "run_id", str),
        _expect(data, "run_name", str),
        _mapping_of_text(data, "tags"),
        _mapping_of_text(data, "params"),
    ]
    _refuse(path, problems)
    return TrackingInfo(**{**data, **_as_text(data, "tags", "params")})


def _json_object(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise ConfigError(f"{path} is not readable ({type(exc).__name__}: {exc})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path} is not readable: a JSON object was expected, not {type(data).__name__}")
    return data


def _expect(data: dict, name: str, kind: type[str] | type[int], required: bool = False) -> str | None:
    """A problem with field `name` (text or an integer; None allowed unless `required`), or None."""
    value = data.get(name)
    if value is None:
        return f"{name} is missing" if required else None
    if isinstance(value, bool) or not isinstance(value, kind):
        return f"{name} is {type(value).__name__}, not {'text' if kind is str else 'an integer'}"
    if required and value == "":
        return f"{name} is empty"
    return None


def _mapping_of_text(data: dict, name: str) -> str | None:
    value = data.get(name, {})
    if not isinstance(value, dict):
        return f"{name} is {type(value).__name__}, not a mapping of names to values"
    bad = [k for k, v in value.items() if not isinstance(v, (str, int, float, bool))]
    return f"{name}: {', '.join(map(str, bad[:3]))} not a single value" if bad else None


def _as_text(data: dict, *mappings: str) -> dict[str, dict[str, str]]:
    """The mappings among `mappings` that `data` holds, their values as text (as MLflow stores tags and params)."""
    return {name: {str(k): str(v) for k, v in data[name].items()} for name in mappings if name in data}


def _refuse(path: Path, problems: list[str | None]) -> None:
    found = [p for p in problems if p]
    if found:
        raise ConfigError(f"{path} is damaged: {'; '.join(found)}; nothing was sent")


def write_record(folder: Path, record: UploadRecord) -> None:
    _write_json(folder / RUN_RECORD_JSON, asdict(record))


def read_record(folder: Path) -> UploadRecord | None:
    path = folder / RUN_RECORD_JSON
    if not path.is_file():
        return None
    data = _json_object(path)
    unknown = sorted(set(data) - {f.name for f in fields(UploadRecord)})
    problems: list[str | None] = [f"unknown field(s) {', '.join(unknown)}"] if unknown else []
    status = data.get("status")
    if status not in TERMINAL_STATUSES:
        problems.append(f"status is {status!r}, not one of {', '.join(TERMINAL_STATUSES)}")
    problems += [
        _expect(data, "reason", str),
        _expect(data, "timestamp_ms", int),
        _mapping_of_text(data, "tags"),
        _mapping_of_text(data, "params"),
    ]
    metrics = data.get("metrics", {})
    if not isinstance(metrics, dict) or not all(_is_number(v) for v in metrics.values()):
        problems.append("metrics is not a mapping of names to numbers")
    histories = data.get("histories", {})
    try:
        data["histories"] = {str(k): [(int(s), float(v)) for s, v in pts] for k, pts in histories.items()}
    except (ValueError, TypeError, AttributeError):  # not a mapping of [[step, value], ...] lists
        problems.append("histories is not a mapping of names to [step, value] pairs")
    _refuse(path, problems)
    return UploadRecord(**{**data, **_as_text(data, "tags", "params")})


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


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


def upload_tables(mlflow: MlflowClient, run_id: str, folder: Path, saved: list[Path] | None = None) -> None:
    """Send the saved tables (`saved`: those of them to send; default all) that the run does not hold yet (MLflow
    appends rows to an existing table)."""
    import pandas as pd

    from yolo_mlops.tracking import writes

    tables = folder / TABLES_DIR
    if saved is None:
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
    warnings: list[str] = field(default_factory=list)  # what the folder lacks or holds unreadable (sent as it is)


@dataclass
class FolderCheck:
    """A run folder read and checked whole, before any run is created or resumed."""

    info: TrackingInfo
    record: UploadRecord | None
    tables: list[Path]  # the saved tables that can be read (the others are named in `warnings`)
    warnings: list[str]


def check_folder(folder: Path) -> FolderCheck:
    """Everything `upload` will send, read first: tracking.json and run_record.json field by field (ConfigError
    naming the field), every saved table, and every gzipped trace to its end. What a finished run should hold but
    this folder lacks, and what cannot be read, are warnings: the rest is still worth sending."""
    import gzip
    import zlib

    import pandas as pd

    info = read_tracking_info(folder)
    record = read_record(folder)
    warnings, tables = [], []
    for path in sorted((folder / TABLES_DIR).rglob("*.json")):
        try:
            pd.read_json(path, orient="split")
        except (ValueError, OSError) as exc:
            warnings.append(f"table {path.relative_to(folder)} is unreadable ({_one_line(exc)}): not sent")
            continue
        tables.append(path)
    traces = sorted((folder / names.PROFILER_DIR).rglob("*.json.gz"))
    for path in traces:
        try:
            with gzip.open(path, "rb") as stream:
                while stream.read(1 << 20):  # to the end: a truncated or corrupt file fails its length or CRC
                    pass
        except (OSError, EOFError, zlib.error) as exc:
            warnings.append(f"trace {path.relative_to(folder)} is unreadable ({_one_line(exc)}): sent as it is")
    if record is not None and record.status == "FINISHED":  # what a finished run wrote, if it is not here
        expected = [
            (bool(traces), f"no profiler trace ({names.PROFILER_DIR}/**/*.json.gz)"),
            (bool(tables) or any(w.startswith("table ") for w in warnings), f"no key_averages table ({TABLES_DIR}/)"),
            (
                bool(list(folder.glob(f"{names.ANALYSIS_DIR}/**/step_times.csv"))),
                f"no step times ({names.STEP_TIMES_CSV})",
            ),
        ]
        warnings += [f"{what}: the run will not have it" for present, what in expected if not present]
    return FolderCheck(info, record, tables, warnings)


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())[:160]
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def upload(folder: Path) -> UploadResult:
    """Send a run folder to its tracking store (see the module docstring); raises ConfigError on bad input.

    The whole folder is checked, then the tracking server and the artifact store are asked once each (bounded),
    all before a run is created or resumed. Whatever fails after that, the run is not left RUNNING: it ends
    FAILED with the reason, and the folder stays pending for the next `upload`."""
    from yolo_mlops.tracking import connection, queries

    folder = Path(folder)
    info, record = read_tracking_info(folder), read_record(folder)
    if (folder / UPLOADED).is_file() and record is not None:
        return UploadResult(info.run_id or "", record.status, created=False, already=True)
    checked = check_folder(folder)
    connection.bound_http_retries()
    from mlflow.tracking import MlflowClient

    uri = info.tracking_uri
    mlflow = MlflowClient(tracking_uri=uri)
    silence = connection.server_silence(uri)
    if silence is not None:
        raise ConfigError(f"MLflow tracking server {uri} is unreachable ({silence}); {folder} stays pending")
    existing = None if info.run_id is None else queries.find_run(mlflow, info.run_id)
    if existing is not None:
        connection.check_artifact_store(existing.artifact_uri, f"artifacts of run {existing.run_id}", uri)
    else:
        experiment = mlflow.get_experiment_by_name(info.experiment)
        if experiment is not None and experiment.artifact_location:
            where = f"artifacts of experiment {info.experiment!r}"
            connection.check_artifact_store(experiment.artifact_location, where, uri)
    return _send(mlflow, folder, checked, existing)


def _send(mlflow: MlflowClient, folder: Path, checked: FolderCheck, existing: RunRecord | None) -> UploadResult:
    """Create or resume the run and send the folder. A run this call created, or found RUNNING, ends FAILED with
    the reason when sending fails, whatever the failure (a run the store already ended keeps its status)."""
    from yolo_mlops.tracking import connection, run_end, writes

    info = checked.info
    created = existing is None
    run_id = None
    try:
        if existing is None:
            run_id = info.run_id = writes.create_run(mlflow, info.experiment, info.run_name, info.tags, {})
            write_tracking_info(folder, info)  # recorded before anything else: a retry goes to this run
        else:
            run_id = existing.run_id
        status = _send_to(mlflow, run_id, folder, checked, {} if existing is None else existing.params)
    except BaseException as exc:
        if run_id is not None and (created or (existing is not None and existing.status == "RUNNING")):
            reason = f"upload from {folder} did not finish: {run_end.exception_line(exc)}"
            record = checked.record
            mark_pending(folder, record.status if record else "FAILED", reason, ["upload"])
            if connection.server_reachable(info.tracking_uri):  # else each call would wait out its retries
                try:
                    mlflow.set_tag(run_id, names.ERROR, reason[: names.TAG_MAX_CHARS])
                    run_end.end_run(mlflow, run_id, "FAILED")
                except Exception:  # the store refused it: the folder is pending, `upload` finishes the run later
                    pass
        raise
    return UploadResult(run_id, status, created=created, already=False, warnings=checked.warnings)


def _send_to(mlflow: MlflowClient, run_id: str, folder: Path, checked: FolderCheck, logged: Mapping[str, str]) -> str:
    """Params not logged yet (a param is written once only), tags, metrics, histories, artifacts, absent tables,
    the final status; returns it."""
    from yolo_mlops.tracking import run_end, writes

    info, record = checked.info, checked.record
    if record is None:  # the run ended before it recorded anything (e.g. killed during preparation)
        record = UploadRecord(status="FAILED", reason=pending_reason(folder) or "the run recorded no result")
    # the params the run was created with, then those the run added at its end (a created run's own win)
    wanted = {**record.params, **info.params}
    params = {k: v for k, v in wanted.items() if k not in logged}
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
    upload_tables(mlflow, run_id, folder, checked.tables)
    run_end.end_run(mlflow, run_id, record.status)
    mark_uploaded(folder)
    return record.status
