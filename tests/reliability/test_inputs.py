"""Bad input a user can fix: one line, exit code 2, no traceback, checked before any MLflow run or run folder
exists. Each test is one row of docs/reliability.md ("Bad input and busy machine")."""

from __future__ import annotations

import importlib.util
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
import yaml
from reliability_cli import TINY, Finished, cli_env, mlflow_runs, run_folders, start_cli
from short_runs import short_run

from yolo_mlops.compat import versions

pytestmark = pytest.mark.timeout(600)


def _dataset(root: Path, images: int = 8) -> Path:
    """A small real dataset in the user's layout (copied from the synthetic generator)."""
    from yolo_mlops.run.datasets import synthetic_dataset

    built = synthetic_dataset(root / "gen", train_images=images, val_images=4, image_size=64)
    folder = root / "user-data"
    shutil.copytree(built.yaml_path.parent, folder)
    spec = yaml.safe_load((folder / "data.yaml").read_text())
    spec["path"] = str(folder)
    (folder / "data.yaml").write_text(yaml.safe_dump(spec))
    return folder / "data.yaml"


@dataclass(frozen=True)
class Case:
    folder: Path
    env: dict[str, str]
    home: Path
    done: Finished


def _setup_bad_yaml(folder: Path) -> tuple[list[str], dict[str, str]]:
    data = _dataset(folder)
    data.write_text(data.read_text() + "names: [a, b\ntrain: : x\n")
    return ["--data", str(data)], {}


def _setup_text_pt(folder: Path) -> tuple[list[str], dict[str, str]]:
    (folder / "best.pt").write_text("this is a text file, not weights\n")
    return ["--model", str(folder / "best.pt")], {}


def _setup_folder_uri(folder: Path) -> tuple[list[str], dict[str, str]]:
    return [], {"MLFLOW_TRACKING_URI": str(folder / "mlruns")}


def _setup_postgres_uri(folder: Path) -> tuple[list[str], dict[str, str]]:
    return [], {"MLFLOW_TRACKING_URI": "postgresql://mlflow:secret@127.0.0.1:5432/mlflow"}


def _setup_garbage_sqlite(folder: Path) -> tuple[list[str], dict[str, str]]:
    (folder / "garbage.db").write_text("not a database\n")
    return [], {"MLFLOW_TRACKING_URI": f"sqlite:///{folder / 'garbage.db'}"}


# MLflow refuses a folder as its store from 3.13 (unless MLFLOW_ALLOW_FILE_STORE); an older client uses it as asked
FILE_STORE_REFUSED = versions.version_at_least("mlflow", "3.13")
_FILE_STORE_SKIP = pytest.mark.skipif(not FILE_STORE_REFUSED, reason="MLflow before 3.13 uses a folder store as asked")

_CASES = {
    "bad_yaml": _setup_bad_yaml,
    "text_pt": _setup_text_pt,
    **({"folder_uri": _setup_folder_uri} if FILE_STORE_REFUSED else {}),
    "postgres_uri": _setup_postgres_uri,
    "garbage_sqlite": _setup_garbage_sqlite,
}


@pytest.fixture(scope="module")
def bad_input(tmp_path_factory) -> dict[str, Case]:
    """Every bad-input command of this module, started at once (each pays for importing torch) and awaited."""
    started = {}
    for name, setup in _CASES.items():
        folder = tmp_path_factory.mktemp(name)
        home = folder / "home"
        argv, env_changes = setup(folder)
        env = {**cli_env(folder, home), **env_changes}
        env.pop("MLFLOW_ALLOW_FILE_STORE", None)
        started[name] = (folder, env, home, start_cli(env, "profile", *TINY, *argv, merge_output=False))
    cases = {}
    for name, (folder, env, home, process) in started.items():
        out, err = process.communicate(timeout=300)
        cases[name] = Case(folder, env, home, Finished(process.returncode, out, err))
    return cases


def _assert_one_line_and_nothing_created(case: Case, fragment: str) -> str:
    done = case.done
    assert done.code == 2, done.err[-2000:]
    assert "Traceback" not in done.err + done.out
    assert len(done.error_lines) == 1 and fragment in done.error_lines[0], done.err[-2000:]
    assert mlflow_runs(case.env) == []
    assert run_folders(case.home) == []
    return done.error_lines[0]


def test_dataset_yaml_that_is_not_yaml(bad_input):
    case = bad_input["bad_yaml"]
    line = _assert_one_line_and_nothing_created(
        case, f"dataset YAML {case.folder / 'user-data' / 'data.yaml'} is not valid YAML: "
    )
    assert "(line " in line


def test_pt_file_that_is_not_a_checkpoint(bad_input):
    case = bad_input["text_pt"]
    _assert_one_line_and_nothing_created(case, f"model {case.folder / 'best.pt'} is not a PyTorch checkpoint")


@_FILE_STORE_SKIP
def test_tracking_uri_that_is_a_plain_folder(bad_input):
    case = bad_input["folder_uri"]
    line = _assert_one_line_and_nothing_created(case, "is a folder (MLflow's file store)")
    assert f"sqlite:///{case.folder / 'mlruns' / 'mlflow.db'}" in line
    assert not (case.folder / "mlruns").exists()


def test_postgresql_tracking_uri_without_its_driver(bad_input):
    if importlib.util.find_spec("psycopg") is not None:
        pytest.skip("psycopg is installed here")
    line = _assert_one_line_and_nothing_created(bad_input["postgres_uri"], "No module named 'psycopg'")
    assert "secret" not in line and "postgresql://mlflow:***@" in line  # the password is masked


def test_sqlite_store_that_is_not_a_database(bad_input):
    case = bad_input["garbage_sqlite"]
    assert case.done.code == 2 and "Traceback" not in case.done.err
    assert len(case.done.error_lines) == 1
    assert "cannot be read: file is not a database" in case.done.error_lines[0]
    assert (case.folder / "garbage.db").read_text() == "not a database\n" and run_folders(case.home) == []


@pytest.mark.parametrize(
    "kind, fragment",
    [
        ("state_dict", "is a PyTorch file but not an ultralytics checkpoint"),
        ("truncated", "is not a PyTorch checkpoint"),
        ("corrupted", "is a damaged checkpoint"),
    ],
)
def test_other_pt_files_that_are_not_checkpoints(tmp_path, kind, fragment):
    from yolo_mlops.errors import ConfigError
    from yolo_mlops.run.preflight import _check_checkpoint

    model = tmp_path / "best.pt"
    torch.save({"conv.weight": torch.ones(64, 64, 3, 3)}, model)
    data = bytearray(model.read_bytes())
    if kind == "truncated":
        model.write_bytes(bytes(data[:2000]))
    elif kind == "corrupted":
        data[len(data) // 2] ^= 0xFF  # inside the tensor bytes: the archive's CRC no longer matches
        model.write_bytes(bytes(data))
    with pytest.raises(ConfigError, match=f"model {model} {fragment}"):
        _check_checkpoint(model)


@pytest.mark.parametrize(
    "uri, fragment",
    [
        pytest.param("file://{tmp}/mlruns", "is a folder (MLflow's file store)", marks=_FILE_STORE_SKIP),
        ("mysql://mlflow:secret@127.0.0.1/mlflow", "needs the mysql driver 'mysqldb'"),
    ],
)
def test_other_tracking_uris_that_cannot_be_served(tmp_path, monkeypatch, uri, fragment):
    from yolo_mlops.errors import ConfigError
    from yolo_mlops.tracking import connection

    monkeypatch.delenv("MLFLOW_ALLOW_FILE_STORE", raising=False)
    if "mysql" in uri and importlib.util.find_spec("MySQLdb") is not None:
        pytest.skip("mysqlclient is installed here")
    with pytest.raises(ConfigError, match=re.escape(fragment)):
        connection.check_reachable(uri.format(tmp=tmp_path))


def test_checkpoint_check_accepts_an_ultralytics_checkpoint_and_executes_nothing(tmp_path):
    """The check reads pickle opcodes only: a checkpoint with an ultralytics model passes, and a pickle that
    would run code when loaded is rejected without running it."""
    from ultralytics.nn.tasks import DetectionModel

    from yolo_mlops.errors import ConfigError
    from yolo_mlops.run.preflight import _check_checkpoint

    good = tmp_path / "good.pt"
    torch.save({"model": DetectionModel("yolo11n.yaml", nc=3, verbose=False), "epoch": 0}, good)
    _check_checkpoint(good)

    marker = tmp_path / "ran"

    class Evil:
        def __reduce__(self):
            return (Path.touch, (marker,))

    evil = tmp_path / "evil.pt"
    torch.save({"model": Evil()}, evil)
    with pytest.raises(ConfigError, match="not an ultralytics checkpoint"):
        _check_checkpoint(evil)
    assert not marker.exists()


def test_max_steps_alone_sets_epochs(tmp_path, monkeypatch):
    """64 images / batch 16 = 4 steps per epoch: --max-steps 6 means 6 steps in 2 epochs (the default profiler
    window needs 5); with --epochs 1 as well it means at most 6 steps within 1 epoch, and the window does not fit."""
    from yolo_mlops.cli import build_parser, spec_from_args
    from yolo_mlops.errors import ConfigError
    from yolo_mlops.run import preflight

    monkeypatch.setenv("YOLO_MLOPS_HOME", str(tmp_path / "home"))
    parse = build_parser().parse_args
    checked = preflight.check(spec_from_args(parse(["profile", "--device", "cpu", "--max-steps", "6"])))
    assert (checked.epochs, checked.steps) == (2, 6)
    checked = preflight.check(spec_from_args(parse(["profile", "--device", "cpu", "--max-steps", "8"])))
    assert (checked.epochs, checked.steps) == (2, 8)
    checked = preflight.check(spec_from_args(parse(["profile", "--device", "cpu", "--epochs", "3"])))
    assert (checked.epochs, checked.steps) == (3, 12)
    with pytest.raises(ConfigError, match=r"needs 5 steps but the run has only 4 .*1 epochs, max_steps 6"):
        preflight.check(spec_from_args(parse(["profile", "--device", "cpu", "--epochs", "1", "--max-steps", "6"])))
    # demo's own 3 epochs give way to --max-steps: 8 steps per epoch (64 images / batch 8 on a CPU-only
    # machine, 128 / 16 with a GPU), so 40 steps take 5 epochs
    from yolo_mlops.cli.run import demo_defaults

    demo = spec_from_args(parse(["demo", "--device", "cpu", "--max-steps", "40"]), demo_defaults())
    checked = preflight.check(demo)
    assert (checked.epochs, checked.steps) == (5, 40)


def test_new_experiments_open_in_the_training_view(mlflow_client):
    from yolo_mlops import names
    from yolo_mlops.tracking import writes

    experiment = mlflow_client.get_experiment(writes.experiment_id(mlflow_client, "kind-check"))
    assert experiment.tags[names.EXPERIMENT_KIND] == "custom_model_development"


@pytest.mark.slow
def test_store_refusing_the_run_leaves_no_run_folder(tmp_path, monkeypatch, mlflow_client):
    """A deleted experiment passes every input check but MLflow refuses a run in it: the folder goes too."""
    from mlflow.exceptions import MlflowException

    from yolo_mlops.config import build_run_spec
    from yolo_mlops.run import pipeline
    from yolo_mlops.tracking import writes

    monkeypatch.setenv("YOLO_MLOPS_HOME", str(tmp_path / "home"))
    mlflow_client.delete_experiment(writes.experiment_id(mlflow_client, "deleted-experiment"))
    spec = build_run_spec(short_run(max_steps=2, experiment="deleted-experiment"))
    with pytest.raises(MlflowException):
        pipeline.prepare(spec)
    assert run_folders(tmp_path / "home") == []


@pytest.mark.slow
def test_corrupt_image_and_out_of_range_class_are_counted(tmp_path, mlflow_client, capsys, monkeypatch):
    """ultralytics drops a corrupt image and a label with class 7 (nc=3) with warnings; the run says so."""
    from yolo_mlops import names
    from yolo_mlops.config import build_run_spec
    from yolo_mlops.run import pipeline
    from yolo_mlops.tracking import run_end

    monkeypatch.setenv("YOLO_MLOPS_HOME", str(tmp_path / "home"))
    data = _dataset(tmp_path, images=8)
    folder = data.parent
    (folder / "images" / "train" / "00001.png").write_bytes(b"\x89PNG\r\n\x1a\n garbage")
    (folder / "labels" / "train" / "00002.txt").write_text("7 0.5 0.5 0.2 0.2\n")
    spec = build_run_spec(
        {
            "data": str(data),
            "imgsz": 64,
            "batch": 2,
            "workers": 0,
            "device": "cpu",
            "max_steps": 2,
            "val": False,
            "experiment": "skipped-images",
            "profiler": {"wait": 0, "warmup": 1, "active": 1},
        }
    )
    prepared = pipeline.prepare(spec)
    with run_end.run_guard(mlflow_client, prepared.run_id):
        outcome = pipeline.train(prepared)
        analysis = pipeline.analyze(prepared, outcome)
        pipeline.track(prepared, outcome, analysis)
    run = mlflow_client.get_run(prepared.run_id)
    assert run.data.metrics[names.TRAIN_IMAGES_SKIPPED] == 2
    assert run.data.metrics[names.TRAIN_IMAGES_USED] == 6
    warnings = run.data.tags[names.DATA_WARNINGS]
    assert "00001.png" in warnings and "00002.png" in warnings
    printed = [line for line in capsys.readouterr().out.splitlines() if "skipped 2 of 8 training images" in line]
    assert len(printed) == 1


def test_http_tracking_uri_checked_with_one_health_request(tmp_path):
    """No server on the port: unreachable; something that is not `mlflow server` (404 on /health): refused
    up front; once a run is under way, any answer below 500 counts as a live server."""
    import socket
    import threading
    from http.server import HTTPServer, SimpleHTTPRequestHandler

    from yolo_mlops.errors import ConfigError
    from yolo_mlops.tracking import connection

    with socket.socket() as probe:  # a port nothing listens on once the probe closes
        probe.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{probe.getsockname()[1]}"
    with pytest.raises(ConfigError, match=r"is unreachable: connection refused"):
        connection.check_reachable(closed)
    assert not connection.server_reachable(closed)

    handler = lambda *a: SimpleHTTPRequestHandler(*a, directory=str(tmp_path))  # noqa: E731
    server = HTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        uri = f"http://127.0.0.1:{server.server_port}"
        with pytest.raises(ConfigError, match=r"answered /health with HTTP 404: not an MLflow server"):
            connection.check_reachable(uri)
        assert connection.server_reachable(uri)
    finally:
        server.shutdown()
        server.server_close()
