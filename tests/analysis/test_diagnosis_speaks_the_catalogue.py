"""Every variant the diagnosis recommends must be one the sweep can run: optimize sweeps them verbatim.

The diagnosis names remedies by key; yolo_mlops/remedies.py says which catalogue variant tries each one. Both
the table and what the rules recommend on real traces are checked against the catalogue (sweeps/variants.py).
"""

from pathlib import Path

import pytest

from yolo_mlops import remedies
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


@pytest.mark.parametrize("key", sorted(remedies.SWEEP_VARIANTS))
def test_every_remedy_is_tried_by_a_catalogue_variant(key: str):
    name = remedies.variant(key, 16 if remedies.takes_amount(key) else None)
    assert variants.canonical(name) == name  # a name the catalogue knows, already in its canonical spelling


def test_a_remedy_without_its_amount_is_refused():
    with pytest.raises(ValueError, match="needs amount"):
        remedies.variant(remedies.MORE_LOADER_WORKERS)
    with pytest.raises(ValueError, match="takes no amount"):
        remedies.variant(remedies.CACHE_IMAGES_IN_RAM, 4)
