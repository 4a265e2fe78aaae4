"""The trainer reads ultralytics' results.csv with pandas, in the shape ultralytics' polars reader returns."""

from __future__ import annotations

from yolo_mlops.run.training import _make_trainer_class


def test_results_csv_read_as_columns_without_polars(tmp_path):
    trainer = object.__new__(_make_trainer_class())
    trainer.csv = tmp_path / "results.csv"
    trainer.csv.write_text("epoch,train/box_loss,metrics/mAP50(B)\n1,0.5,0.1\n2,0.4,0.2\n")
    assert trainer.read_results_csv() == {"epoch": [1, 2], "train/box_loss": [0.5, 0.4], "metrics/mAP50(B)": [0.1, 0.2]}
    trainer.csv = tmp_path / "missing.csv"
    assert trainer.read_results_csv() == {}
