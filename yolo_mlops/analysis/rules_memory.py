"""Diagnosis rules of GPU memory: allocated memory rising every step, and a peak close to the device's capacity.
Neither costs step time: they are risks of running out of memory. Thresholds: module constants, listed with their
reasons in docs/analysis.md.
"""

from __future__ import annotations

from yolo_mlops.analysis.diagnosis_input import DiagnosisInput, gpu_ranks, ranks
from yolo_mlops.analysis.findings import HIGH, MEDIUM, Finding
from yolo_mlops.remedies import BF16_AUTOCAST, SMALLER_BATCH, variant

# Peak GPU memory as a share (%) of device memory.
MEMORY_NEAR_CAPACITY_PCT = 90.0


def memory_growth(diagnosis_input: DiagnosisInput) -> Finding | None:
    rising = [(r, r.memory) for r in ranks(diagnosis_input) if r.memory is not None and r.memory.steadily_rising]
    if not rising:
        return None
    rank, memory = max(rising, key=lambda rank_memory: rank_memory[1].growth_bytes_per_step or 0.0)
    return Finding(
        rule="memory_growth",
        severity=MEDIUM,
        title="Allocated memory rises every step (a tensor kept alive across steps?)",
        evidence={
            "rank": str(rank.rank),
            "device": memory.device,
            "growth_mib_per_step": round((memory.growth_bytes_per_step or 0.0) / 2**20, 2),
        },
        recommended_variants=[],
        no_saving_reason="no step time to save: growing memory ends in an out-of-memory error, not a slower step",
    )


def memory_near_capacity(diagnosis_input: DiagnosisInput) -> Finding | None:
    peak, total, source = diagnosis_input.peak_memory_gib, diagnosis_input.gpu_memory_total_gib, "run context"
    if peak is None or total is None:
        for r in gpu_ranks(diagnosis_input):
            if r.memory is not None and r.memory.device == "cuda" and r.device_memory_total_bytes:
                trace_peak = (r.memory.peak_reserved_bytes or r.memory.peak_allocated_bytes) / 2**30
                if peak is None or trace_peak > peak:
                    peak, total, source = trace_peak, r.device_memory_total_bytes / 2**30, f"trace (rank {r.rank})"
    if peak is None or not total:
        return None
    pct = 100.0 * peak / total
    if pct < MEMORY_NEAR_CAPACITY_PCT:
        return None
    smaller_batch = variant(SMALLER_BATCH, max(1, diagnosis_input.batch_size // 2) if diagnosis_input.batch_size else 8)
    variants = [smaller_batch] if diagnosis_input.amp is True else [smaller_batch, variant(BF16_AUTOCAST)]
    return Finding(
        rule="memory_near_capacity",
        severity=HIGH,
        title=f"Peak GPU memory is {pct:.0f}% of the device's {total:.1f} GiB",
        evidence={
            "peak_memory_gib": round(peak, 3),
            "gpu_memory_total_gib": round(total, 3),
            "memory_pct": round(pct, 2),
            "source": source,
            "threshold_pct": MEMORY_NEAR_CAPACITY_PCT,
        },
        recommended_variants=variants,
        no_saving_reason="no step time to save: it is a risk of running out of memory, not a cost per step",
    )
