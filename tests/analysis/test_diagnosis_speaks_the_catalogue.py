"""Every variant the diagnosis recommends must be one the sweep can run: optimize sweeps them verbatim."""

from pathlib import Path

from yolo_mlops.analysis import DiagnosisInput, analyze_traces, diagnose
from yolo_mlops.sweeps import variants


def test_every_recommended_variant_is_in_the_catalogue(gpu_traces_dir: Path):
    recommended = set()
    for trace in sorted(gpu_traces_dir.glob("*.json.gz")):
        analysis = analyze_traces(trace)
        for amp, bench in ((False, False), (True, None)):
            findings = diagnose(
                DiagnosisInput(
                    analysis=analysis,
                    data_wait_pct=40.0,
                    device_type="cuda",
                    amp=amp,
                    cudnn_benchmark=bench,
                    gpu_memory_total_gib=16.0,
                    peak_memory_gib=15.5,
                    sm_util_pct=20.0,
                    dram_util_pct=10.0,
                    batch_size=16,
                    workers=4,
                )
            )
            recommended |= {v for f in findings for v in f.recommended_variants}
    assert len(recommended) >= 6  # the inputs above make most rules fire
    for name in sorted(recommended):
        assert variants.canonical(name)  # raises VariantError for a name the catalogue does not know
