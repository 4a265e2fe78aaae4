"""Bad input to the commands that judge runs: one line, exit code 2, before any MLflow run or Prefect flow exists.

The p-value bound and the smallest effect follow one rule in every command (`trends.bounds`): a probability
in (0, 1), a fraction in [0, 1)."""

from __future__ import annotations

import io
from contextlib import redirect_stderr, redirect_stdout

import pytest
from refusals import Refusal

from yolo_mlops.errors import ConfigError
from yolo_mlops.trends import bounds


def _main(*args: str) -> tuple[int, str, str]:
    from yolo_mlops.cli import main

    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main(list(args))
    return code, out.getvalue(), err.getvalue()


def _one_line(args: list[str], says: str) -> None:
    code, out, err = _main(*args)
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, (args, err)
    assert lines[0].startswith("yolo-mlops: error: ") and says in lines[0], (args, lines)


def _case(case: str, argv: tuple[str, ...], says: str) -> Refusal:
    return Refusal(case, " ".join(argv), (says,), argv, kept="nothing: no MLflow run, no Prefect flow")


BISECT = ("bisect", "--good", "HEAD~1", "--bad", "HEAD", "--run", "r")
REFUSALS = [
    _case(
        "bisect-min-effect-percent",
        (*BISECT, "--min-effect", "50"),
        "--min-effect 50: must be a fraction in [0, 1) (0.05 = 5%; 50 would mean 5000%)",
    ),
    _case("bisect-alpha-one", (*BISECT, "--alpha", "1"), "--alpha 1: must be a probability"),
    _case("fleet-min-effect-percent", ("fleet", "--min-effect", "50"), "--min-effect 50: must be a fraction in [0, 1)"),
    _case(
        "fleet-min-effect-negative",
        ("fleet", "--min-effect", "-0.1"),
        "--min-effect -0.1: must be a fraction in [0, 1)",
    ),
    _case("fleet-alpha-above-one", ("fleet", "--alpha", "1.5"), "--alpha 1.5: must be a probability in (0, 1)"),
    _case("fleet-max-pvalue-zero", ("fleet", "--max-pvalue", "0"), "--max-pvalue 0: must be a probability in (0, 1)"),
    _case("trends-max-pvalue-one", ("trends", "--max-pvalue", "1"), "--max-pvalue 1: must be a probability in (0, 1)"),
    _case("compare-one-run-with-itself", ("compare", "0123abcd", "0123abcd"), "A and B are the same run (0123abcd)"),
    _case(
        "compare-a-set-naming-a-run-twice",
        ("compare", "0123abcd,0123abcd", "4567ef01"),
        "compare: '0123abcd,0123abcd' names a run twice",
    ),
    _case(
        "compare-sets-sharing-a-run",
        ("compare", "0123abcd,4567ef01", "4567ef01,89abcdef"),
        "compare: run 4567ef01 is in both A and B",
    ),
]


@pytest.mark.parametrize("refusal", REFUSALS, ids=[r.case for r in REFUSALS])
def test_bad_values_are_one_line_before_anything_runs(refusal):
    _one_line(list(refusal.argv), refusal.says[0])


def test_compare_of_one_trace_file_with_itself_is_refused(tmp_path):
    trace = tmp_path / "t.json"
    trace.write_text("{}")
    _one_line(["compare", str(trace), str(tmp_path / "." / "t.json")], "A and B are the same trace file")


def test_one_rule_for_every_command():
    for value in (0.01, 0.5, 0.999):
        assert bounds.check_pvalue("--x", value) == value
    for value in (0.0, 1.0, -0.1, 1.5):
        with pytest.raises(ConfigError):
            bounds.check_pvalue("--x", value)
    for value in (0.0, 0.05, 0.99):
        assert bounds.check_fraction("--x", value) == value
    for value in (-0.01, 1.0, 5.0, 50.0):
        with pytest.raises(ConfigError):
            bounds.check_fraction("--x", value)


def test_a_pool_sweep_against_a_prefect_url_that_does_not_answer(monkeypatch):
    """The URL and what to do, in one line (was: `ConnectError: [Errno 111] Connection refused`, exit 1)."""
    import socket

    from prefect.settings import PREFECT_API_URL, temporary_settings

    with socket.socket() as s:  # a port nothing listens on: bound, never listening
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        url = f"http://127.0.0.1:{port}/api"
        monkeypatch.setenv("PREFECT_API_URL", url)
        # the setting itself too: a test server of this worker's session (prefect_test_harness) overrides the env
        with temporary_settings({PREFECT_API_URL: url}):
            code, out, err = _main("sweep", "--variants", "fp32", "--pool", "gpu-process")
    assert code == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert f"--pool gpu-process: no Prefect server answers at http://127.0.0.1:{port}/api" in err
    assert "(connection refused)" in err and "point PREFECT_API_URL at the server the workers poll" in err
