"""The variant catalogue: exact RunSpec changes, composition, conflicts, rejections, skip-on-CPU reasons."""

from __future__ import annotations

import pytest

from yolo_mlops.config import RunSpec
from yolo_mlops.sweeps import variants
from yolo_mlops.sweeps.variants import VariantError, apply_variant, canonical, requires_cuda, skip_reason

BASE = RunSpec(imgsz=64, batch=4, workers=0, device="cpu", train_args={"optimizer": "SGD"})


def test_baseline_changes_nothing_but_the_name():
    spec = apply_variant(BASE, "baseline")
    assert spec == BASE.model_copy(update={"variant": "baseline"})


@pytest.mark.parametrize(
    "expr, field, expected",
    [
        ("amp_bf16", ("train_args", "amp"), "bf16"),
        ("amp_fp16", ("train_args", "amp"), "fp16"),
        ("fp32", ("train_args", "amp"), False),
        ("channels_last", ("train_args", "channels_last"), True),
        ("channels_first", ("train_args", "channels_last"), False),
        ("compile", ("train_args", "compile"), True),
        ("compile_max_autotune", ("train_args", "compile"), "max-autotune"),
        ("cache_ram", ("train_args", "cache"), "ram"),
        ("cache_disk", ("train_args", "cache"), "disk"),
        ("tf32", ("torch", "tf32"), True),
        ("pin_memory_off", ("torch", "pin_memory"), False),
        ("batch_32", ("batch",), 32),
        ("workers_8", ("workers",), 8),
        ("imgsz_320", ("imgsz",), 320),
    ],
)
def test_each_variant_maps_to_its_exact_change(expr, field, expected):
    spec = apply_variant(BASE, expr)
    value = spec
    for part in field:
        value = value[part] if isinstance(value, dict) else getattr(value, part)
    assert value == expected
    assert spec.variant == canonical(expr)
    assert spec.train_args["optimizer"] == "SGD"  # the base's own train args survive


def test_cudnn_benchmark_also_turns_ultralytics_determinism_off():
    spec = apply_variant(BASE, "cudnn_benchmark")
    assert spec.torch.cudnn_benchmark is True
    assert spec.train_args["deterministic"] is False


def test_composition_is_canonical_and_merges_changes():
    a = apply_variant(BASE, "channels_last+amp_bf16+workers_2")
    b = apply_variant(BASE, "workers_2+amp_bf16+channels_last")
    assert a == b
    assert a.variant == "amp_bf16+channels_last+workers_2"
    assert a.train_args == {"optimizer": "SGD", "amp": "bf16", "channels_last": True} and a.workers == 2
    assert canonical("baseline+tf32") == "tf32"


@pytest.mark.parametrize(
    "expr, words",
    [
        ("amp_bf16+fp32", ["conflicts", "precision"]),
        ("batch_8+batch_16", ["conflicts", "batch"]),
        ("compile+compile_reduce-overhead", ["conflicts", "compile"]),
        ("cache_ram+cache_disk", ["conflicts", "cache"]),
        ("channels_last+channels_first", ["conflicts", "memory_format"]),
        ("tf32+tf32", ["appears twice"]),
        ("imgsz_100", ["multiple of 32"]),
        ("compile_turbo", ["unknown compile mode"]),
        ("nonsense", ["unknown variant", "yolo-mlops variants"]),
        ("amp_bf16+", ["empty variant"]),
    ],
)
def test_bad_expressions_are_rejected_with_a_clear_error(expr, words):
    with pytest.raises(VariantError) as err:
        apply_variant(BASE, expr)
    for word in words:
        assert word in str(err.value)


def test_persistent_workers_is_rejected_because_ultralytics_workers_already_persist():
    with pytest.raises(VariantError, match="InfiniteDataLoader already keeps"):
        canonical("persistent_workers")
    assert "persistent_workers" in variants.describe()


def test_gpu_only_variants_are_skipped_on_cpu_with_the_reason():
    for expr in ("amp_bf16", "amp_fp16", "tf32", "cudnn_benchmark", "channels_last", "compile", "pin_memory_off"):
        assert requires_cuda(expr)
        reason = skip_reason(expr, "cpu")
        assert reason and "CUDA" in reason
    reason = skip_reason("batch_2+amp_bf16", "cpu")
    assert reason is not None and reason.startswith("needs a CUDA device") and "amp_bf16" in reason
    for expr in ("baseline", "fp32", "batch_2", "workers_1", "imgsz_96", "cache_ram", "cache_disk"):
        assert not requires_cuda(expr)
        assert skip_reason(expr, "cpu") is None


def test_custom_variants_compose_with_catalogue_variants():
    custom = {"sgd": {"train_args": {"optimizer": "SGD", "lr0": 0.02}}}
    spec = apply_variant(RunSpec(), "batch_8+sgd", custom)
    assert spec.variant == "batch_8+sgd" and spec.batch == 8 and spec.train_args["lr0"] == 0.02
    with pytest.raises(VariantError, match="sets train_args.amp"):
        canonical("amp_bf16+half", {"half": {"train_args": {"amp": "fp16"}}})


def test_metric_suffix_is_a_valid_mlflow_name():
    assert variants.metric_suffix("amp_bf16+channels_last") == "amp_bf16__channels_last"
    assert variants.metric_suffix("compile_reduce-overhead") == "compile_reduce-overhead"


def test_describe_lists_every_fixed_variant_and_family():
    text = variants.describe()
    for name in (
        "baseline",
        "amp_fp16",
        "amp_bf16",
        "fp32",
        "tf32",
        "cudnn_benchmark",
        "channels_last",
        "pin_memory_off",
        "cache_ram",
        "cache_disk",
        "batch_<n>",
        "workers_<n>",
        "imgsz_<n>",
        "compile_<mode>",
    ):
        assert name in text


def test_ddp_variants_change_the_job_and_are_skipped_outside_one():
    from yolo_mlops.config import build_run_spec
    from yolo_mlops.sweeps import variants
    from yolo_mlops.sweeps.recommend import recommendations

    job = build_run_spec({"device": "cpu", "batch": 8, "ddp": {"ranks": 2}})
    changed = variants.apply_variant(job, "ddp_bucket_100mb+ddp_no_sync_accumulate")
    assert changed.ddp.bucket_cap_mb == 100 and changed.ddp.no_sync_accumulation and changed.ddp.ranks == 2
    assert changed.variant == "ddp_no_sync_accumulate+ddp_bucket_100mb"  # canonical: catalogue (axis) order
    assert variants.apply_variant(
        job, "ddp_grad_bucket_view+ddp_static_graph+ddp_broadcast_buffers"
    ).ddp == job.ddp.model_copy(
        update={"gradient_as_bucket_view": True, "static_graph": True, "broadcast_buffers": True}
    )
    assert variants.skip_reason("ddp_no_sync_accumulate", "cpu", world_size=2) is None
    reason = variants.skip_reason("amp_bf16+ddp_static_graph", "0", world_size=1)
    assert reason is not None and reason.startswith("ddp_static_graph: a DistributedDataParallel switch")
    with pytest.raises(variants.VariantError, match="1 to 4096 MiB"):
        variants.parse("ddp_bucket_0mb")
    with pytest.raises(variants.VariantError, match="appears twice|conflicts"):
        variants.parse("ddp_bucket_50mb+ddp_bucket_100mb")
    # the diagnosis' DDP recommendations are sweepable names
    from yolo_mlops.analysis.findings import Finding
    from yolo_mlops.analysis.rules_ddp import DDP_COMMUNICATION_REMEDIES
    from yolo_mlops.remedies import variant

    ddp_variants = [variant(key) for key in DDP_COMMUNICATION_REMEDIES]
    assert ddp_variants == ["ddp_no_sync_accumulate", "ddp_bucket_100mb", "ddp_grad_bucket_view"]
    found = recommendations([Finding("ddp_exposed_communication", "high", "t", {}, ddp_variants)])
    assert found.variants == ddp_variants and not found.rejected


def test_a_variant_an_older_release_lacks_says_so_instead_of_running(monkeypatch):
    """amp='bf16' is taken from ultralytics 8.4.129: on an older release in the declared range the variant is skipped
    with the release named, before any child run."""
    from yolo_mlops.compat import versions

    monkeypatch.setattr(versions, "installed_version", {"ultralytics": "8.4.105"}.get)
    assert skip_reason("amp_bf16", "0") == (
        "amp_bf16: not available with ultralytics 8.4.105 (needs ultralytics >= 8.4.129)"
    )
    assert skip_reason("cudnn_benchmark", "0") is None
    monkeypatch.setattr(versions, "installed_version", {"ultralytics": "8.4.190"}.get)
    assert (skip_reason("amp_bf16", "cpu") or "").startswith("needs a CUDA device")
