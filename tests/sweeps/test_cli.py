"""`yolo-mlops variants | sweep | optimize`: listing and one-line errors before anything runs."""

from __future__ import annotations

from yolo_mlops import cli


def test_variants_lists_the_catalogue(capsys):
    assert cli.main(["variants"]) == 0
    out = capsys.readouterr().out
    assert "amp_bf16" in out and "compile_<mode>" in out and "persistent_workers" in out


def test_sweep_rejects_bad_variants_in_one_line(capsys, mlflow_client):
    assert cli.main(["sweep", "--variants", "amp_bf16+fp32", "--device", "cpu"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("yolo-mlops: error: variant expression 'amp_bf16+fp32'") and "\n" not in err
    assert cli.main(["sweep", "--variants", "persistent_workers", "--device", "cpu"]) == 2
    assert "InfiniteDataLoader" in capsys.readouterr().err


def test_sweep_and_optimize_refuse_a_missing_concurrency_limit(prefect_server, capsys):
    for command in (["sweep", "--variants", "batch_2"], ["optimize"]):
        assert cli.main([*command, "--device", "cpu", "--concurrency-limit", "absent-limit"]) == 2
        assert "concurrency limit 'absent-limit' does not exist" in capsys.readouterr().err
