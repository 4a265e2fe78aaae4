"""GPU idle by host cause and step time by phase, on a generated trace whose every interval is known."""

from __future__ import annotations

import json

import numpy as np
import pytest

from yolo_mlops import cli
from yolo_mlops.analysis import analyze_traces
from yolo_mlops.analysis.diagnosis import DiagnosisInput, diagnose
from yolo_mlops.analysis.idle_attribution import exclusive_split
from yolo_mlops.analysis.metrics import headline_metrics
from yolo_mlops.labels import PHASE_LABEL_PREFIX

P = PHASE_LABEL_PREFIX
# Timeline origin as Kineto writes it (epoch microseconds): float64 resolution there is ~0.25 us.
T0 = 1.7e15


@pytest.fixture
def known_trace(trace_builder, tmp_path):
    """Three 1000 us steps (the last one outside HTA's window). Neither the steps' own spans nor a Python
    frame spanning them are launch work. GPU idle gaps, by construction:

    step 0: [300, 360) next kernel launched at 350, host in forward_loss  -> launch_overhead 60
            [400, 450) next kernel queued at 250, before the gap          -> other 50
            [500, 570) began inside cudaStreamSynchronize [480, 505)      -> cuda_sync 70
            [600, 710) host in optimizer_step                             -> optimizer 110
    across: [750, 1260): optimizer_step to 800                            -> optimizer 50
            [800, 1000) no host event                                     -> other 200
            [1000, 1100) data_wait                                        -> data_loader 100
            [1100, 1200) preprocess                                       -> preprocess 100
            [1200, 1260) forward_loss                                     -> launch_overhead 60
    """
    b = trace_builder(0)
    for i in range(3):
        b.step(i, T0 + 1000 * i, 1000)
        b.host(f"ProfilerStep#{i}", T0 + 1000 * i, 1000, cat="cpu_op")  # older traces: the step as a cpu_op too
    b.host("train.py(12): main", T0, 3000, cat="python_function")  # with_stack: an outer frame spans every step
    b.host(P + "data_wait", T0, 200)
    b.host("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", T0 + 10, 180)
    b.host(P + "forward_loss", T0 + 200, 400)
    b.host("cudaStreamSynchronize", T0 + 480, 25, cat="cuda_runtime")
    b.host(P + "optimizer_step", T0 + 600, 200)
    b.host(P + "data_wait", T0 + 1000, 100)
    b.host(P + "preprocess", T0 + 1100, 100)
    b.host(P + "forward_loss", T0 + 1200, 400)
    b.host(P + "data_wait", T0 + 2000, 50)
    b.host(P + "forward_loss", T0 + 2050, 250)
    for launch, start, dur in (
        (205, 210, 90),
        (350, 360, 40),
        (250, 450, 50),
        (560, 570, 30),
        (700, 710, 40),
        (1250, 1260, 40),
        (2100, 2110, 90),
    ):
        b.kernel("volta_sgemm_128x64_nn", launch=T0 + launch, start=T0 + start, dur=dur)
    return analyze_traces(b.write(tmp_path / "known.json"))


EXPECTED_IDLE_US = {
    "data_loader": 100.0,
    "cuda_sync": 70.0,
    "optimizer": 160.0,
    "preprocess": 100.0,
    "launch_overhead": 120.0,
    "other": 250.0,
}


def test_gpu_idle_by_cause_is_exact(known_trace):
    rank = known_trace.ranks[0]
    got = {c.cause: c.time_us for c in rank.gpu_idle_by_cause}
    assert got == pytest.approx(EXPECTED_IDLE_US, abs=1e-6)
    # the causes split HTA's idle time exactly, and the shares add up to the GPU idle share
    assert sum(got.values()) == pytest.approx(rank.gpu.idle_time_us) == 800.0
    assert sum(c.pct for c in rank.gpu_idle_by_cause) == pytest.approx(rank.gpu.idle_pct)
    launch = rank.idle_cause("launch_overhead")
    assert rank.window_steps == 2 and rank.window_step_us == 2000.0
    assert launch.ms_per_step == pytest.approx(0.060) and launch.step_pct == pytest.approx(6.0)
    assert launch.pct == pytest.approx(100 * 120 / 1090)  # kernel-time span: 210 .. 1300


def test_step_time_by_phase_counts_each_instant_once(known_trace):
    rows = {c.cause: c.time_us for c in known_trace.ranks[0].step_by_phase}
    assert list(rows) == [P + "data_wait", P + "preprocess", P + "forward_loss", P + "optimizer_step", "between_phases"]
    assert rows == pytest.approx(
        {
            P + "data_wait": 350.0,
            P + "preprocess": 100.0,
            P + "forward_loss": 1050.0,
            P + "optimizer_step": 200.0,
            "between_phases": 1300.0,
        }
    )


def test_idle_cause_metrics_and_json(known_trace):
    metrics = headline_metrics(known_trace)
    for cause, us in EXPECTED_IDLE_US.items():
        assert metrics[f"trace/gpu_idle_{cause}_pct"] == pytest.approx(100 * us / 1090)
    doc = json.loads(known_trace.to_json())
    assert {r["cause"] for r in doc["ranks"][0]["gpu_idle_by_cause"]} == set(EXPECTED_IDLE_US)


def test_exclusive_split_first_layer_wins():
    target = (np.array([0.0, 10.0]), np.array([5.0, 20.0]))
    layers = [("a", (np.array([3.0]), np.array([12.0]))), ("b", (np.array([0.0]), np.array([15.0])))]
    assert exclusive_split(target, layers, "rest") == {"a": 4.0, "b": 3.0 + 3.0, "rest": 5.0}


def test_data_loader_idle_is_one_finding_not_two(trace_builder, tmp_path):
    """GPU idle while the host waits for data is the data finding's time, never a launch-bound finding."""
    b = trace_builder(0)
    for i in range(4):
        t = T0 + 1000 * i
        b.step(i, t, 1000)
        b.host("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", t, 600)
        b.host(P + "forward_loss", t + 600, 400)
        b.kernel("volta_sgemm_128x64_nn", launch=t + 601, start=t + 610, dur=380)
    analysis = analyze_traces(b.write(tmp_path / "loader.json"))
    gpu = analysis.ranks[0].gpu
    assert gpu is not None and gpu.idle_pct > 50
    findings = diagnose(DiagnosisInput(analysis=analysis, amp=True, cudnn_benchmark=True))
    assert [f.rule for f in findings] == ["data_wait_high"]
    saving = findings[0].saving
    assert saving is not None
    assert saving.ms_per_step == pytest.approx(0.6)
    assert saving.pct_of_step == pytest.approx(60.0)
    loader_idle_pct = findings[0].evidence["gpu_idle_data_loader_pct"]
    assert isinstance(loader_idle_pct, float) and loader_idle_pct > 50


def test_findings_ordered_by_estimated_saving(known_trace):
    findings = diagnose(
        DiagnosisInput(analysis=known_trace, amp=False, cudnn_benchmark=False, data_wait_pct=12.0, step_time_ms=1.0)
    )
    estimated = [f.saving.ms_per_step for f in findings if f.saving is not None]
    assert estimated == sorted(estimated, reverse=True) and len(estimated) >= 2
    assert findings[-1].rule == "cudnn_autotune_off" and findings[-1].saving is None  # config only: no time


def test_analyze_cli_prints_and_emits_findings(known_trace, capsys):
    path = known_trace.source
    settings = "--amp off --cudnn-benchmark on --batch 8 --data-wait-pct 30 --step-time-ms 1.0".split()
    assert cli.main(["analyze", path, *settings]) == 0
    text = capsys.readouterr().out
    assert text.index("findings (largest estimated saving first):") > text.index("GPU idle by host cause")
    assert text.rstrip().splitlines()[-1].startswith("Top finding: [high] 30% of step time is spent waiting")
    assert cli.main(["analyze", path, "--format", "json", *settings]) == 0
    doc = json.loads(capsys.readouterr().out)
    # same rules and thresholds as inside a run: the CLI's findings are diagnose()'s
    direct = diagnose(
        DiagnosisInput(
            analysis=known_trace, amp=False, cudnn_benchmark=True, batch_size=8, data_wait_pct=30.0, step_time_ms=1.0
        )
    )
    assert [f["rule"] for f in doc["findings"]] == [f.rule for f in direct]
    assert doc["findings"][0]["saving"] == {
        "ms_per_step": 0.3,
        "pct_of_step": 30.0,
        "assumption": "if data loading were fully overlapped with the step",
    }
    assert doc["headline"].startswith("Top finding: [high]")


@pytest.mark.parametrize(
    "flag,value,message",
    [
        ("--amp", "maybe", "expected on or off"),
        ("--data-wait-pct", "140", "percentage from 0 to 100"),
        ("--step-time-ms", "0", "positive number"),
        ("--workers", "-1", "non-negative integer"),
    ],
)
def test_analyze_cli_rejects_bad_context_in_one_line(known_trace, capsys, flag, value, message):
    with pytest.raises(SystemExit) as exc:
        cli.main(["analyze", known_trace.source, flag, value])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
