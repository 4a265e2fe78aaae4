"""Every variant the diagnosis recommends must be one the sweep can run: optimize sweeps them verbatim."""

from pathlib import Path

from yolo_mlops.analysis import analyze_traces, diagnose
from yolo_mlops.sweeps import variants

# a run starved of data, close to running out of GPU memory, its SMs and DRAM mostly idle, few loader workers
STRAINED = dict(data_wait_pct=40.0, peak_memory_gib=15.5, sm_util_pct=20.0, dram_util_pct=10.0, workers=4)


def test_every_recommended_variant_is_in_the_catalogue(gpu_traces_dir: Path, clean_context):
    recommended = set()
    for trace in sorted(gpu_traces_dir.glob("*.json.gz")):
        analysis = analyze_traces(trace)
        for amp, bench in ((False, False), (True, None)):
            findings = diagnose(clean_context(analysis, amp=amp, cudnn_benchmark=bench, **STRAINED))
            recommended |= {v for f in findings for v in f.recommended_variants}
    assert len(recommended) >= 6  # the inputs above make most rules fire
    for name in sorted(recommended):
        assert variants.canonical(name)  # raises VariantError for a name the catalogue does not know
