"""Named optimisation variants: each one is an exact, documented change to a RunSpec.

A variant expression is one name or several joined with `+` (`amp_bf16+channels_last`). Every variant
belongs to one *axis* (precision, batch, memory format ...); two variants on the same axis conflict and
the expression is rejected. The canonical expression sorts the parts in catalogue order, so
`channels_last+amp_bf16` and `amp_bf16+channels_last` name the same runs.

What each variant changes (ultralytics 8.4.190 semantics, checked in its source):

- ultralytics train arguments go to `RunSpec.train_args` (`amp`, `deterministic`, `channels_last`,
  `compile`, `cache`);
- torch backend switches that ultralytics has no argument for go to `RunSpec.torch`
  (`cudnn_benchmark`, `tf32`, `pin_memory`);
- `batch`, `workers`, `imgsz` are RunSpec fields.

Variants that only mean something on a CUDA device say so (`Variant.cuda_reason`); on a CPU device
`skip_reason()` returns that reason and the sweep records the variant as skipped instead of running
it as something else. Which variant tries each remedy the diagnosis names is yolo_mlops/remedies.py's table, in
the contracts layer (the diagnosis sits below sweeps and never imports this module); a test holds it to this catalogue.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from yolo_mlops.compat import ultralytics as ultralytics_compat
from yolo_mlops.compat import versions
from yolo_mlops.config import RunSpec, build_run_spec, deep_merge
from yolo_mlops.errors import ConfigError
from yolo_mlops.run.environment import cuda_indices

BASELINE = "baseline"

# Order of the axes = order of the parts in a canonical expression.
AXES = (
    "precision",
    "tf32",
    "cudnn_benchmark",
    "memory_format",
    "compile",
    "batch",
    "imgsz",
    "workers",
    "pin_memory",
    "cache",
    "ddp_sync",
    "ddp_bucket",
    "ddp_bucket_view",
    "ddp_static_graph",
    "ddp_buffers",
    "custom",
)
DDP_REASON = "a DistributedDataParallel switch: it needs a data-parallel job (--ranks N on CPU, or several GPUs)"

COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")


class VariantError(ConfigError):
    """Unknown, rejected or conflicting variant expression (one line, for the CLI and the sweep)."""


@dataclass(frozen=True)
class Variant:
    name: str
    axis: str
    summary: str
    changes: dict[str, Any] = field(default_factory=dict)  # RunSpec fields; nested dicts merge
    cuda_reason: str | None = None  # set when the variant only means something on a CUDA device
    note: str = ""  # caveat shown by `yolo-mlops variants` and in the sweep report
    needs_ddp: bool = False  # a DDP switch: meaningless (skipped) in a single-process run
    needs_release: tuple[str, str] | None = None  # (package, first release that has it), for a newer feature

    @property
    def requires_cuda(self) -> bool:
        return self.cuda_reason is not None


def _ua(**kwargs: Any) -> dict[str, Any]:
    return {"train_args": kwargs}


def _torch(**kwargs: Any) -> dict[str, Any]:
    return {"torch": kwargs}


def _ddp(**kwargs: Any) -> dict[str, Any]:
    return {"ddp": kwargs}


_FIXED: tuple[Variant, ...] = (
    Variant(
        BASELINE,
        "baseline",
        "ultralytics defaults: AMP fp16 on CUDA (fp32 on CPU), channels_last auto (on for CUDA), "
        "deterministic=True (cudnn autotuning off), no compile, no image cache, pinned memory on CUDA",
    ),
    Variant(
        "amp_fp16",
        "precision",
        "mixed precision with float16 autocast + GradScaler (amp='fp16')",
        _ua(amp="fp16"),
        cuda_reason="AMP is CUDA-only in ultralytics",
        needs_release=("ultralytics", ultralytics_compat.AMP_PRECISION_FROM),
        note="same numerics as the CUDA baseline (ultralytics' default is amp=True = fp16); "
        "use it to name fp16 explicitly or to compose",
    ),
    Variant(
        "amp_bf16",
        "precision",
        "mixed precision with bfloat16 autocast, no GradScaler (amp='bf16')",
        _ua(amp="bf16"),
        cuda_reason="AMP is CUDA-only in ultralytics; bf16 needs an Ampere or newer GPU",
        needs_release=("ultralytics", ultralytics_compat.AMP_PRECISION_FROM),
    ),
    Variant(
        "fp32",
        "precision",
        "full float32 training, AMP off (amp=False)",
        _ua(amp=False),
        note="identical to the baseline on CPU, where AMP is always off",
    ),
    Variant(
        "tf32",
        "tf32",
        "TF32 tensor-core math for float32 matmuls and convolutions "
        "(torch.backends.cuda.matmul.allow_tf32 = cudnn.allow_tf32 = True)",
        _torch(tf32=True),
        cuda_reason="TF32 is a CUDA tensor-core mode",
        note="only float32 ops are affected: compose with fp32 (fp32+tf32) to see its full effect",
    ),
    Variant(
        "cudnn_benchmark",
        "cudnn_benchmark",
        "cuDNN autotuning (torch.backends.cudnn.benchmark=True) with ultralytics deterministic=False: "
        "its default deterministic=True sets cudnn.deterministic and use_deterministic_algorithms(True), "
        "restricting cuDNN to deterministic algorithms, which leaves autotuning little to choose from",
        {**_torch(cudnn_benchmark=True), **_ua(deterministic=False)},
        cuda_reason="cuDNN exists only on CUDA devices",
        note="runs are no longer bit-reproducible; the first steps pay for autotuning (discard them)",
    ),
    Variant(
        "channels_last",
        "memory_format",
        "NHWC memory format for the model (channels_last=True)",
        _ua(channels_last=True),
        cuda_reason="ultralytics applies channels_last only on CUDA",
        note="ultralytics 8.4.190 already enables channels_last on CUDA by default (channels_last=None "
        "means auto), so on Linux+CUDA this equals the baseline; channels_first measures the gain",
    ),
    Variant(
        "channels_first",
        "memory_format",
        "force NCHW memory format (channels_last=False)",
        _ua(channels_last=False),
        cuda_reason="ultralytics applies channels_last only on CUDA",
        note="the opposite of ultralytics' CUDA default: baseline vs channels_first measures channels_last",
    ),
    Variant(
        "pin_memory_off",
        "pin_memory",
        "pageable host memory for the train loader (pin_memory=False)",
        _torch(pin_memory=False),
        cuda_reason="ultralytics pins loader memory only when a GPU consumes it, so on CPU pinning is already off",
    ),
    Variant(
        "cache_ram",
        "cache",
        "decoded images cached in RAM (cache='ram')",
        _ua(cache="ram"),
        note="ultralytics warns that cache='ram' with deterministic=True may not be reproducible",
    ),
    Variant(
        "cache_disk",
        "cache",
        "decoded images cached as .npy files next to the images (cache='disk')",
        _ua(cache="disk"),
        note="ultralytics reads existing .npy files in every cache mode; the sweep removes the .npy "
        "files a cache_disk child created so later children are not sped up by them",
    ),
    Variant(
        "ddp_no_sync_accumulate",
        "ddp_sync",
        "gradient accumulation without the all-reduce on every micro-batch: DDP's no_sync on all but the last "
        "micro-batch of each optimizer step (ultralytics all-reduces every backward)",
        _ddp(no_sync_accumulation=True),
        needs_ddp=True,
        note="changes nothing when ultralytics accumulates 1 micro-batch (batch >= nbs, 64 by default); "
        "comm/calls_per_optimizer_step shows the collectives falling by the accumulate factor",
    ),
    Variant(
        "ddp_grad_bucket_view",
        "ddp_bucket_view",
        "gradients as views into DDP's all-reduce buckets (gradient_as_bucket_view=True): one copy less per "
        "bucket, less memory",
        _ddp(gradient_as_bucket_view=True),
        needs_ddp=True,
    ),
    Variant(
        "ddp_static_graph",
        "ddp_static_graph",
        "DDP static_graph=True: the reducer learns the graph once and skips the unused-parameter search",
        _ddp(static_graph=True),
        needs_ddp=True,
        note="only correct when every step uses the same parameters (true for YOLO detection training)",
    ),
    Variant(
        "ddp_broadcast_buffers",
        "ddp_buffers",
        "rank 0's buffers (BatchNorm statistics) broadcast before every forward (ultralytics turns this off)",
        _ddp(broadcast_buffers=True),
        needs_ddp=True,
        note="measures the cost of keeping BatchNorm statistics identical across ranks",
    ),
)

_REJECTED: dict[str, str] = {
    "persistent_workers": (
        "rejected: ultralytics' InfiniteDataLoader already keeps one iterator (and its worker processes) "
        "for the whole training run via a repeating sampler, so its workers are persistent by construction; "
        "a persistent_workers variant would measure nothing. Compare workers_<n> instead."
    ),
}

_FAMILIES = (
    ("batch_<n>", "batch", "batch size n (RunSpec.batch)"),
    (
        "workers_<n>",
        "workers",
        "n data-loader worker processes (RunSpec.workers; ultralytics caps it at the "
        "CPU count and at the number of batches)",
    ),
    (
        "imgsz_<n>",
        "imgsz",
        "training image size n, a multiple of 32 (RunSpec.imgsz); changes the work done, "
        "so compare images/s with care and expect accuracy to change",
    ),
    ("compile", "compile", "torch.compile with inductor, mode 'default' (compile=True)"),
    (
        "compile_<mode>",
        "compile",
        "torch.compile mode: " + ", ".join(COMPILE_MODES) + " (underscores accepted for hyphens)",
    ),
    (
        "ddp_bucket_<n>mb",
        "ddp_bucket",
        "DDP gradient bucket size n MiB (bucket_cap_mb; torch's default is 25): "
        "fewer, larger all-reduces against more overlap with backward",
    ),
)

_CATALOGUE = {v.name: v for v in _FIXED}

_COMPILE_CUDA_REASON = (
    "GPU-only in this catalogue: inductor on CPU spends minutes compiling C++ and "
    "ultralytics silently falls back to eager when no compiler is found"
)
_COMPILE_NOTE = (
    "the first steps include compilation (discard them with the sweep's warmup_steps); "
    "ultralytics falls back to eager on compile failure, which the sweep detects and flags; "
    "ultralytics drops the last partial train batch under compile"
)


def _family(name: str) -> Variant | None:
    match = re.fullmatch(r"(batch|workers|imgsz)_(\d+)", name)
    if match:
        axis, n = match.group(1), int(match.group(2))
        if axis == "batch":
            if n < 1:
                raise VariantError(f"variant {name!r}: batch must be >= 1")
            return Variant(f"batch_{n}", "batch", f"batch size {n}", {"batch": n})
        if axis == "workers":
            return Variant(f"workers_{n}", "workers", f"{n} data-loader workers", {"workers": n})
        if n < 32 or n > 4096 or n % 32:
            raise VariantError(
                f"variant {name!r}: imgsz must be a multiple of 32 between 32 and 4096 "
                "(ultralytics would silently round it)"
            )
        return Variant(
            f"imgsz_{n}",
            "imgsz",
            f"image size {n}",
            {"imgsz": n},
            note="changes the work per image: images/s is not like-for-like and accuracy changes",
        )
    match = re.fullmatch(r"ddp_bucket_(\d+)mb", name)
    if match:
        size = int(match.group(1))
        if not 1 <= size <= 4096:
            raise VariantError(f"variant {name!r}: the bucket size must be 1 to 4096 MiB")
        return Variant(
            name, "ddp_bucket", f"DDP gradient buckets of {size} MiB", _ddp(bucket_cap_mb=size), needs_ddp=True
        )
    if name == "compile":
        return Variant(
            "compile",
            "compile",
            "torch.compile, mode 'default'",
            _ua(compile=True),
            cuda_reason=_COMPILE_CUDA_REASON,
            note=_COMPILE_NOTE,
        )
    match = re.fullmatch(r"compile_([a-z_\-]+)", name)
    if match:
        mode = match.group(1).replace("_", "-")
        if mode not in COMPILE_MODES:
            raise VariantError(f"variant {name!r}: unknown compile mode {mode!r}; one of {', '.join(COMPILE_MODES)}")
        return Variant(
            f"compile_{mode}",
            "compile",
            f"torch.compile, mode {mode!r}",
            _ua(compile=mode),
            cuda_reason=_COMPILE_CUDA_REASON,
            note=_COMPILE_NOTE,
        )
    return None


def lookup(name: str, custom: dict[str, dict[str, Any]] | None = None) -> Variant:
    """One variant by name (fixed, parametric family, or a sweep's custom variant)."""
    name = name.strip()
    if custom and name in custom:
        return Variant(name, "custom", f"custom variant: {custom[name]}", dict(custom[name]))
    if name in _CATALOGUE:
        return _CATALOGUE[name]
    if name in _REJECTED:
        raise VariantError(f"variant {name!r} {_REJECTED[name]}")
    found = _family(name)
    if found is not None:
        return found
    raise VariantError(
        f"unknown variant {name!r}; `yolo-mlops variants` lists them "
        f"({', '.join(_CATALOGUE)}, batch_<n>, workers_<n>, imgsz_<n>, compile, compile_<mode>, "
        "ddp_bucket_<n>mb)"
    )


def parse(expr: str, custom: dict[str, dict[str, Any]] | None = None) -> list[Variant]:
    """The variants of an expression, in canonical order; baseline parts vanish; conflicts raise."""
    names = [part.strip() for part in expr.split("+")]
    if not expr.strip() or any(not n for n in names):
        raise VariantError(f"empty variant in expression {expr!r}")
    parts = [lookup(n, custom) for n in names]
    parts = [p for p in parts if p.name != BASELINE]
    by_axis: dict[str, Variant] = {}
    for part in parts:
        other = by_axis.get(part.axis)
        if other is not None and part.axis != "custom":
            what = "appears twice" if other.name == part.name else f"conflicts with {other.name!r}"
            raise VariantError(
                f"variant expression {expr!r}: {part.name!r} {what} "
                f"(both set the {part.axis} axis; a run has one value per axis)"
            )
        by_axis.setdefault(part.axis, part)
    _check_key_conflicts(expr, parts)
    order = {axis: i for i, axis in enumerate(AXES)}
    return sorted(parts, key=lambda p: (order[p.axis], p.name))


def _flatten(changes: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in changes.items():
        if isinstance(value, dict):
            flat.update(_flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def _check_key_conflicts(expr: str, parts: list[Variant]) -> None:
    seen: dict[str, tuple[Any, str]] = {}
    for part in parts:
        for key, value in _flatten(part.changes).items():
            if key in seen and seen[key][0] != value:
                raise VariantError(
                    f"variant expression {expr!r}: {part.name!r} sets {key}={value!r} but "
                    f"{seen[key][1]!r} sets {key}={seen[key][0]!r}"
                )
            seen[key] = (value, part.name)


def canonical(expr: str, custom: dict[str, dict[str, Any]] | None = None) -> str:
    parts = parse(expr, custom)
    return "+".join(p.name for p in parts) if parts else BASELINE


def changes(expr: str, custom: dict[str, dict[str, Any]] | None = None) -> dict[str, Any]:
    """The merged RunSpec changes of an expression."""
    merged: dict[str, Any] = {}
    for part in parse(expr, custom):
        merged = deep_merge(merged, part.changes)
    return merged


def apply_variant(spec: RunSpec, expr: str, custom: dict[str, dict[str, Any]] | None = None) -> RunSpec:
    """`spec` with the expression's changes applied and `variant` set to the canonical expression."""
    fields = deep_merge(spec.model_dump(mode="json"), {**changes(expr, custom), "variant": canonical(expr, custom)})
    return build_run_spec(fields)


def needs_ddp(expr: str, custom: dict[str, dict[str, Any]] | None = None) -> bool:
    """Every part of the expression a DistributedDataParallel switch: nothing of it runs in a single process."""
    parts = parse(expr, custom)
    return bool(parts) and all(p.needs_ddp for p in parts)


def requires_cuda(expr: str, custom: dict[str, dict[str, Any]] | None = None) -> bool:
    return any(p.requires_cuda for p in parse(expr, custom))


def skip_reason(
    expr: str, device: str, custom: dict[str, dict[str, Any]] | None = None, world_size: int = 1
) -> str | None:
    """Why the expression cannot run on `device` (a resolved device string such as 'cpu' or '0') in a job of
    `world_size` ranks, or None."""
    parts = parse(expr, custom)
    ddp_only = [p.name for p in parts if p.needs_ddp]
    if ddp_only and world_size < 2:
        return f"{', '.join(ddp_only)}: {DDP_REASON}"
    if device == "cpu":
        reasons = [f"{p.name}: {p.cuda_reason}" for p in parts if p.cuda_reason]
        if reasons:
            return "needs a CUDA device (" + "; ".join(reasons) + ")"
    missing = [
        (p.name, *p.needs_release)
        for p in parts
        if p.needs_release is not None and not versions.version_at_least(*p.needs_release)
    ]
    if missing:
        return "; ".join(
            f"{name}: not available with {package} {versions.installed_version(package)} (needs {package} >= {first})"
            for name, package, first in missing
        )
    if device != "cpu" and any(p.name == "amp_bf16" for p in parts):
        import torch

        index = cuda_indices(device)[0]
        if torch.cuda.is_available() and torch.cuda.get_device_capability(index) < (8, 0):
            return (
                f"amp_bf16: bfloat16 needs compute capability >= 8.0, "
                f"{torch.cuda.get_device_name(index)} has {torch.cuda.get_device_capability(index)}"
            )
    return None


def notes(expr: str, custom: dict[str, dict[str, Any]] | None = None) -> str:
    return "; ".join(f"{p.name}: {p.note}" for p in parse(expr, custom) if p.note)


def metric_suffix(expr: str) -> str:
    """MLflow metric names may not contain '+': `amp_bf16+channels_last` -> `amp_bf16__channels_last`."""
    return re.sub(r"[^A-Za-z0-9_.\-]", "_", expr.replace("+", "__"))


def describe() -> str:
    """The catalogue as text, for `yolo-mlops variants` and docs."""
    lines = ["Variants (compose with '+', e.g. amp_bf16+channels_last; one variant per axis):", ""]
    for v in _FIXED:
        lines.append(f"  {v.name:<20} [{v.axis}] {v.summary}")
        if v.changes:
            lines.append(f"  {'':<20} changes: {_flatten(v.changes)}")
        if v.cuda_reason:
            lines.append(f"  {'':<20} CUDA only: {v.cuda_reason}")
        if v.needs_ddp:
            lines.append(f"  {'':<20} data-parallel jobs only")
        if v.needs_release:
            lines.append(f"  {'':<20} needs {v.needs_release[0]} >= {v.needs_release[1]}")
        if v.note:
            lines.append(f"  {'':<20} note: {v.note}")
    for name, axis, summary in _FAMILIES:
        lines.append(f"  {name:<20} [{axis}] {summary}")
        if axis == "compile":
            lines.append(f"  {'':<20} CUDA only: {_COMPILE_CUDA_REASON}")
        if axis == "ddp_bucket":
            lines.append(f"  {'':<20} data-parallel jobs only")
    lines += ["", "Not offered:"]
    lines += [f"  {name:<20} {reason}" for name, reason in _REJECTED.items()]
    return "\n".join(lines)
