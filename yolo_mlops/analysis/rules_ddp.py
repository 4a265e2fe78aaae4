"""Diagnosis rules of a data-parallel job: gradient communication no compute hides, the straggler the other ranks
wait for (its cause from its own trace and clocks), and data wait unbalanced across ranks. Each rule returns at
most one Finding; its thresholds are module constants, listed with their reasons in docs/analysis.md.
"""

from __future__ import annotations

from yolo_mlops.analysis.diagnosis_input import (
    DEFAULT_WORKERS_SUGGESTION,
    DiagnosisInput,
    communication_of,
    ranks,
    trace_data_wait_pct,
)
from yolo_mlops.analysis.findings import HIGH, MEDIUM, Finding, evidence_of, severity_at
from yolo_mlops.analysis.savings import Saving, step_ms
from yolo_mlops.analysis.step_activity import ACTIVITY_TEXT, DATA_WAIT
from yolo_mlops.analysis.stragglers import stall_text
from yolo_mlops.remedies import (
    CACHE_IMAGES_IN_RAM,
    DDP_GRADIENTS_AS_BUCKET_VIEW,
    DDP_LARGER_BUCKETS,
    DDP_SKIP_SYNC_ON_ACCUMULATION,
    MORE_LOADER_WORKERS,
    variant,
)

# Data-parallel jobs: collective time not overlapped with the rank's compute (% of step time), and data-wait
# shares that differ across ranks by more than this many points of step time.
DDP_EXPOSED_PCT_WARN = 10.0
DDP_EXPOSED_PCT_HIGH = 30.0
DDP_DATA_WAIT_IMBALANCE_PTS = 10.0
# a straggler whose mean SM clock is below this fraction of its peers' is slowed by its clocks
DDP_SLOW_CLOCK_FRACTION = 0.95
# the remedies that cut or hide DDP's gradient all-reduce
DDP_COMMUNICATION_REMEDIES = (DDP_SKIP_SYNC_ON_ACCUMULATION, DDP_LARGER_BUCKETS, DDP_GRADIENTS_AS_BUCKET_VIEW)


def _data_loading_variants() -> list[str]:
    """What a rank slowed by its data loading tries: the default worker count, and images cached in RAM."""
    return [variant(MORE_LOADER_WORKERS, DEFAULT_WORKERS_SUGGESTION), variant(CACHE_IMAGES_IN_RAM)]


def ddp_exposed_communication(diagnosis_input: DiagnosisInput) -> Finding | None:
    comm = communication_of(diagnosis_input)
    if comm is None or comm.backend == "nccl":
        return None  # NCCL kernels: communication_high judges them as HTA does, against GPU busy time

    # time a rank waits inside a collective for a slower peer is the straggler's cost (ddp_straggler), not the
    # transfer's: what no compute hides and no waiting explains is what hiding or skipping collectives saves;
    # collectives found from host calls only have no exposed time to judge (None: not measured)
    def transfer_us(r) -> float:
        if r.exposed_time_us is None:
            return 0.0
        return max(r.exposed_time_us - (r.wait_time_us or 0.0), 0.0)

    rank = max(comm.ranks, key=transfer_us)
    pct = 100.0 * transfer_us(rank) / rank.step_time_us if rank.step_time_us > 0 else 0.0
    if pct < DDP_EXPOSED_PCT_WARN or rank.steps <= 0:
        return None
    return Finding(
        rule="ddp_exposed_communication",
        severity=severity_at(pct, DDP_EXPOSED_PCT_HIGH),
        title=f"{pct:.0f}% of rank {rank.rank}'s step is gradient communication ({comm.backend}) that no compute hides",
        evidence=evidence_of(
            rank=str(rank.rank),
            backend=comm.backend,
            exposed_pct=rank.exposed_pct,
            exposed_not_waiting_pct=pct,
            wait_pct=rank.wait_pct or 0.0,
            collective_pct=rank.collective_pct,
            collective_calls=rank.collective_calls,
            threshold_pct=DDP_EXPOSED_PCT_WARN,
            calls_per_optimizer_step=rank.calls_per_optimizer_step,
        ),
        recommended_variants=[variant(key) for key in DDP_COMMUNICATION_REMEDIES],
        saving=Saving(
            transfer_us(rank) / 1000 / rank.steps,
            pct,
            "if the collectives were hidden behind compute or skipped on accumulated micro-batches",
        ),
    )


def ddp_straggler(diagnosis_input: DiagnosisInput) -> Finding | None:
    """The rank the others wait for step after step (stragglers.judge_steps), with the evidence of its own
    trace: what it did more than its peers in the steady steps it held back (its data wait, its compute), and on
    GPUs its clocks against its peers'. Stalls (a step held back once, an epoch boundary) are named apart."""
    comm = communication_of(diagnosis_input)
    if comm is None or comm.straggler is None:
        return None
    straggler = comm.straggler
    slow, lost_ms = straggler.rank, straggler.median_lead_ms
    by_rank = {r.rank: r for r in ranks(diagnosis_input)}
    evidence: dict[str, float | str] = {
        "rank": str(slow),
        "others_wait_ms_per_step": round(lost_ms, 2),
        "steps_held": f"{straggler.steps_held} of {straggler.steady_steps} steady steps",
        "wait_spread_pct": round(comm.wait_spread_pct or 0.0, 2),
    }
    extra = straggler.extra_ms
    top = max((name for name in extra if name != DATA_WAIT), key=extra.__getitem__, default=None)
    own = ""
    if top is not None and extra[top] > 0:
        own = f"{ACTIVITY_TEXT.get(top, top)}: {extra[top]:+.0f} ms/step against its peers; "
    cause, variants = f"its own compute ({own}compare its operators and clocks with its peers')", []
    if DATA_WAIT in extra:
        evidence["extra_data_wait_ms_per_step"] = round(extra[DATA_WAIT], 2)
        if extra[DATA_WAIT] >= 0.5 * lost_ms:
            cause = f"its data loading ({extra[DATA_WAIT]:.0f} ms/step more data wait than its peers)"
            variants = _data_loading_variants()
    if top is not None:
        evidence[f"extra_{top}_ms_per_step"] = round(extra[top], 2)
    clocks = diagnosis_input.rank_sm_clock_mhz
    peer_clocks = [mhz for rank, mhz in clocks.items() if rank != slow]
    if slow in clocks and peer_clocks:
        peers_mhz = sum(peer_clocks) / len(peer_clocks)
        evidence["sm_clock_mhz_mean"] = round(clocks[slow], 1)
        evidence["peers_sm_clock_mhz_mean"] = round(peers_mhz, 1)
        if not variants and clocks[slow] < DDP_SLOW_CLOCK_FRACTION * peers_mhz:
            cause = (
                f"its GPU's slower clocks ({clocks[slow]:.0f} MHz mean SM clock against its peers' "
                f"{peers_mhz:.0f}; rank{slow}/gpu/clocks_event_* says why)"
            )
    evidence["cause"] = cause
    if comm.stalls:
        evidence["stalls_apart"] = "; ".join(stall_text(s) for s in comm.stalls)
    step = step_ms(diagnosis_input, by_rank.get(slow))
    lost_pct = 100.0 * lost_ms / step if step else 0.0
    return Finding(
        rule="ddp_straggler",
        severity=HIGH if lost_pct >= 20.0 else MEDIUM,
        title=(
            f"The other ranks wait for rank {slow} in {straggler.steps_held} of {straggler.steady_steps} steady steps "
            f"({lost_ms:.0f} ms/step inside collectives); cause: {cause}"
        ),
        evidence=evidence,
        recommended_variants=variants,
        saving=Saving(lost_ms, lost_pct, f"if rank {slow} kept pace with the others") if lost_ms > 0 else None,
    )


def ddp_unbalanced_data(diagnosis_input: DiagnosisInput) -> Finding | None:
    if communication_of(diagnosis_input) is None:
        return None
    shares = {r.rank: trace_data_wait_pct(r) for r in ranks(diagnosis_input)}
    measured = {rank: pct for rank, pct in shares.items() if pct is not None}
    if len(measured) < 2:
        return None
    high, low = max(measured, key=measured.__getitem__), min(measured, key=measured.__getitem__)
    gap = measured[high] - measured[low]
    if gap < DDP_DATA_WAIT_IMBALANCE_PTS:
        return None
    return Finding(
        rule="ddp_unbalanced_data",
        severity=MEDIUM,
        title=f"Data wait differs across ranks: rank {high} {measured[high]:.0f}% of its step, rank {low} "
        f"{measured[low]:.0f}%",
        evidence={
            "rank": str(high),
            "data_wait_pct": round(measured[high], 2),
            "lowest_rank": str(low),
            "lowest_data_wait_pct": round(measured[low], 2),
            "threshold_pts": DDP_DATA_WAIT_IMBALANCE_PTS,
        },
        recommended_variants=_data_loading_variants(),
        no_saving_reason="the job's cost of it is the slowest rank's: see ddp_straggler",
    )
