"""Remedies: what a diagnosis finding says would help, by key, and the sweep variant that tries each one.

The diagnosis (analysis/) names a remedy in its own terms (more loader workers, a larger batch, bf16
autocast); the sweep catalogue (sweeps/variants.py) runs variants by name. Both layers need the link, and
analysis, like the run pipeline that writes findings.json, sits below sweeps, so the link is this contract:
`SWEEP_VARIANTS` says which catalogue variant tries each remedy, and a finding's `recommended_variants` are
the variants of its remedies. tests/analysis/test_diagnosis_speaks_the_catalogue.py fails on a variant here
that the catalogue does not know. It imports nothing, so every layer can read it.
"""

from __future__ import annotations

# remedy keys; those marked (n) take an amount, the number the variant's name carries
MORE_LOADER_WORKERS = "more_loader_workers"  # (n) data-loader worker processes
CACHE_IMAGES_IN_RAM = "cache_images_in_ram"
COMPILE_MODEL = "compile_model"
LARGER_BATCH = "larger_batch"  # (n) images per batch
SMALLER_BATCH = "smaller_batch"  # (n) images per batch
BF16_AUTOCAST = "bf16_autocast"
FP16_AUTOCAST = "fp16_autocast"
TF32_MATMUL = "tf32_matmul"
CUDNN_AUTOTUNE = "cudnn_autotune"
CHANNELS_LAST = "channels_last_layout"
DDP_SKIP_SYNC_ON_ACCUMULATION = "ddp_skip_sync_on_accumulation"
DDP_LARGER_BUCKETS = "ddp_larger_buckets"
DDP_GRADIENTS_AS_BUCKET_VIEW = "ddp_gradients_as_bucket_view"

AMOUNT = "{n}"  # where a variant's name carries the remedy's amount

# remedy key -> the sweep catalogue's variant that tries it
SWEEP_VARIANTS: dict[str, str] = {
    MORE_LOADER_WORKERS: "workers_{n}",
    CACHE_IMAGES_IN_RAM: "cache_ram",
    COMPILE_MODEL: "compile",
    LARGER_BATCH: "batch_{n}",
    SMALLER_BATCH: "batch_{n}",
    BF16_AUTOCAST: "amp_bf16",
    FP16_AUTOCAST: "amp_fp16",
    TF32_MATMUL: "tf32",
    CUDNN_AUTOTUNE: "cudnn_benchmark",
    CHANNELS_LAST: "channels_last",
    DDP_SKIP_SYNC_ON_ACCUMULATION: "ddp_no_sync_accumulate",
    DDP_LARGER_BUCKETS: "ddp_bucket_100mb",
    DDP_GRADIENTS_AS_BUCKET_VIEW: "ddp_grad_bucket_view",
}


def takes_amount(key: str) -> bool:
    return AMOUNT in SWEEP_VARIANTS[key]


def variant(key: str, n: int | None = None) -> str:
    """The sweep variant that tries remedy `key`, with amount `n` for a remedy that takes one."""
    if takes_amount(key) != (n is not None):
        raise ValueError(f"remedy {key!r} {'needs' if takes_amount(key) else 'takes no'} amount (n={n!r})")
    return SWEEP_VARIANTS[key].replace(AMOUNT, str(n))
