"""The end of a run against the real SQLite store: no failing step skips another, and `upload` of a folder
whose run never reached the store creates it once."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from yolo_mlops.tracking import connection, run_end, upload, writes


class Salvage:
    """A run owner whose local record and first upload step fail (as on a full disk)."""

    def __init__(self, mlflow, run_id: str, folder: Path) -> None:
        self.mlflow, self.run_id, self.folder = mlflow, run_id, folder
        self.ended_with: run_end.RunEnd | None = None

    def reason(self, exc: BaseException, status: str) -> str:
        return f"{run_end.exception_line(exc)} (after 3 of 10 steps)"

    def record(self, status: str, reason: str) -> None:
        raise OSError(28, "No space left on device", str(self.folder / "run_record.json"))

    def steps(self, status: str, reason: str):
        def fails() -> None:
            raise OSError(28, "No space left on device")

        def logs() -> None:
            writes.log_values(self.mlflow, self.run_id, metrics={"perf/steps_total": 3.0})

        return [("artifacts", fails), ("metrics", logs)]

    def ended(self, end: run_end.RunEnd, exc: BaseException | None) -> None:
        self.ended_with = end


def test_failing_steps_skip_nothing_and_the_status_is_always_set(mlflow_client, tmp_path):
    run_id = writes.create_run(mlflow_client, "end-of-run", None, {}, {})
    salvage = Salvage(mlflow_client, run_id, tmp_path)
    with pytest.raises(OSError) as raised:
        with run_end.run_guard(mlflow_client, run_id, salvage):
            raise OSError(28, "No space left on device", "/data/runs/x/last.pt")
    run = mlflow_client.get_run(run_id)
    assert run.info.status == "FAILED"
    assert (
        run.data.tags["yolo_mlops.error"]
        == "OSError: [Errno 28] No space left on device: '/data/runs/x/last.pt' (after 3 of 10 steps)"
    )
    assert run.data.metrics["perf/steps_total"] == 3.0  # logged after the failing artifact step
    end = salvage.ended_with
    assert end is not None
    assert not end.pending and [f.split(":")[0] for f in end.failures] == ["run folder", "artifacts"]
    assert run_end.ended_by(raised.value) is end  # the exception carries its run's end


def test_the_cli_finds_the_run_an_exception_ended(mlflow_client):
    run_id = writes.create_run(mlflow_client, "end-of-run", None, {}, {})
    try:  # an exception raised while handling it leads back to the same run (the CLI's one line uses this)
        try:
            with run_end.run_guard(mlflow_client, run_id):
                raise OSError(28, "No space left on device")
        except OSError:
            raise KeyboardInterrupt from None
    except KeyboardInterrupt as later:
        ended = run_end.ended_by(later)
        assert later.__context__ is not None and ended is not None and ended.run_id == run_id
    assert run_end.ended_by(RuntimeError("unrelated")) is None


def test_interrupt_ends_killed_and_other_failures_failed(mlflow_client):
    for exc, status in ((KeyboardInterrupt(), "KILLED"), (RuntimeError("boom"), "FAILED")):
        run_id = writes.create_run(mlflow_client, "end-of-run", None, {}, {})
        with pytest.raises(type(exc)):
            with run_end.run_guard(mlflow_client, run_id):
                raise exc
        run = mlflow_client.get_run(run_id)
        assert run.info.status == status
        expected = "KeyboardInterrupt" if status == "KILLED" else "RuntimeError: boom"
        assert run.data.tags["yolo_mlops.error"] == expected


def test_upload_creates_a_run_that_never_existed_once(mlflow_client, tmp_path):
    folder = tmp_path / "run"
    (folder / "analysis").mkdir(parents=True)
    (folder / "analysis" / "step_times.csv").write_text("step,step_ms\n0,1.5\n1,1.25\n")
    upload.write_tracking_info(
        folder,
        upload.TrackingInfo(
            connection.tracking_uri(),
            "never-tracked",
            None,
            "late",
            {"yolo_mlops.run_kind": "profile"},
            {"train.imgsz": "64"},
        ),
    )
    upload.write_record(
        folder,
        upload.UploadRecord(
            status="KILLED",
            reason="terminated by SIGTERM after 2 of 8 steps",
            metrics={"perf/steps_total": 2.0},
            histories={"perf/step_time_ms": [(0, 1.5), (1, 1.25)]},
        ),
    )
    first = upload.upload(folder)
    assert first.created and not first.already
    recorded = json.loads((folder / "tracking.json").read_text())["run_id"]
    assert recorded == first.run_id
    (folder / "uploaded").unlink()  # send everything again: the store keeps one copy of each row
    second = upload.upload(folder)
    assert second.run_id == first.run_id and not second.created
    assert upload.upload(folder).already
    runs = mlflow_client.search_runs([mlflow_client.get_experiment_by_name("never-tracked").experiment_id])
    assert [r.info.run_id for r in runs] == [first.run_id]
    run = runs[0]
    assert run.info.status == "KILLED" and run.data.tags["yolo_mlops.error"].startswith("terminated by SIGTERM")
    assert run.data.params == {"train.imgsz": "64"} and run.data.tags["mlflow.runName"] == "late"
    assert [(m.step, m.value) for m in mlflow_client.get_metric_history(run.info.run_id, "perf/step_time_ms")] == [
        (0, 1.5),
        (1, 1.25),
    ]
    assert [a.path for a in mlflow_client.list_artifacts(run.info.run_id, "analysis")] == ["analysis/step_times.csv"]


def test_upload_of_a_folder_that_is_not_a_run_is_one_line(tmp_path):
    from yolo_mlops import cli

    assert cli.main(["upload", str(tmp_path)]) == 2


def test_a_refused_final_status_marks_the_run_pending(mlflow_client, tmp_path):
    """The run's work is done but the store refuses its FINISHED status (here: the run was deleted meanwhile)."""
    run_id = writes.create_run(mlflow_client, "end-of-run", None, {}, {})
    salvage = Salvage(mlflow_client, run_id, tmp_path)
    with pytest.raises(Exception, match="active") as raised:
        with run_end.run_guard(mlflow_client, run_id, salvage):
            mlflow_client.delete_run(run_id)
    end = salvage.ended_with
    assert end is not None
    assert end.pending and end.status == "FINISHED" and end.failures[0].startswith("status:")
    assert "is incomplete" in end.summary()
    assert run_end.ended_by(raised.value) is end
