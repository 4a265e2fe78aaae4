"""Sweep planning: which children run, in which order, with which RunSpec; the parent run's tags and params.

`plan_sweep` validates everything a sweep can validate before any run exists (variants, skip reasons, every
child's RunSpec, the concurrency limit's name) and raises ConfigError with one line.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from yolo_mlops.run import gpu_lock
from yolo_mlops.run.config import ConfigError, RunSpec, build_run_spec, deep_merge
from yolo_mlops.run.environment import resolve_device
from yolo_mlops.sweeps import variants
from yolo_mlops.tracking import names

Order = Literal["interleaved", "blocked"]


@dataclass(frozen=True)
class Child:
    position: int  # 0-based place in the execution order
    variant: str  # canonical expression
    repeat: int  # 1-based


@dataclass(frozen=True)
class SweepPlan:
    base: RunSpec
    device: str
    variants: list[str]  # canonical, baseline first, skipped ones included
    skipped: dict[str, str]  # variant -> reason
    children: list[Child]
    repeats: int
    order: str
    warmup_steps: int
    concurrency_limit: str | None
    custom_variants: dict[str, dict[str, Any]] = field(default_factory=dict)

    def child_spec(self, child: Child, parent_run_id: str) -> RunSpec:
        spec = variants.apply_variant(self.base, child.variant, self.custom_variants)
        return build_run_spec(deep_merge(spec.model_dump(mode="json"), {
            "run_kind": "variant", "parent_run_id": parent_run_id,
            "run_name": f"{child.variant} r{child.repeat}",
            "tags": {names.SWEEP_REPEAT: str(child.repeat), names.SWEEP_POSITION: str(child.position)},
        }))


def plan_sweep(base: RunSpec, variant_exprs: list[str], repeats: int = 3, order: Order = "interleaved",
               warmup_steps: int = 1, concurrency_limit: str | None = None,
               custom_variants: dict[str, dict[str, Any]] | None = None) -> SweepPlan:
    """Validate everything a sweep can validate before it starts; raises ConfigError (one line)."""
    if repeats < 1:
        raise ConfigError("repeats must be >= 1")
    if warmup_steps < 0:
        raise ConfigError("warmup_steps must be >= 0")
    if order not in ("interleaved", "blocked"):
        raise ConfigError(f"order must be 'interleaved' or 'blocked', got {order!r}")
    custom = dict(custom_variants or {})
    clash = sorted(set(custom) & {variants.BASELINE})
    if clash:
        raise ConfigError(f"custom variant names may not shadow {clash}")
    device = resolve_device(base.device)
    planned: list[str] = [variants.BASELINE]
    for expr in variant_exprs:
        name = variants.canonical(expr, custom)
        if name not in planned:
            planned.append(name)
    skipped: dict[str, str] = {}
    for name in planned:
        reason = variants.skip_reason(name, device, custom)
        if reason:
            skipped[name] = reason
        else:
            variants.apply_variant(base, name, custom)  # invalid combinations fail here, before any run
    runnable = [n for n in planned if n not in skipped]
    if order == "interleaved":
        pairs = [(n, r) for r in range(1, repeats + 1) for n in runnable]
    else:
        pairs = [(n, r) for n in runnable for r in range(1, repeats + 1)]
    children = [Child(i, n, r) for i, (n, r) in enumerate(pairs)]
    if concurrency_limit is None:
        concurrency_limit = gpu_lock.limit_name(device)
    return SweepPlan(base=base, device=device, variants=planned, skipped=skipped, children=children,
                     repeats=repeats, order=order, warmup_steps=warmup_steps,
                     concurrency_limit=concurrency_limit, custom_variants=custom)


def parent_tags(plan: SweepPlan) -> dict[str, str]:
    tags = {names.RUN_KIND: "sweep", names.VARIANT: "sweep",
            names.SWEEP_VARIANTS: ",".join(plan.variants), names.SWEEP_ORDER: plan.order,
            names.SWEEP_REPEATS: str(plan.repeats), names.SWEEP_DEVICE: plan.device,
            names.SWEEP_CONCURRENCY_LIMIT: plan.concurrency_limit or "none"}
    if plan.skipped:
        tags[names.SWEEP_SKIPPED] = ",".join(plan.skipped)
    return tags


def parent_params(plan: SweepPlan) -> dict[str, str]:
    sweep = {"variants": ",".join(plan.variants), "repeats": plan.repeats, "order": plan.order,
             "warmup_steps": plan.warmup_steps, "children": len(plan.children),
             "concurrency_limit": plan.concurrency_limit}
    params: dict[str, Any] = {names.SWEEP_PARAM + k: v for k, v in sweep.items()}
    params.update({names.BASE_PARAM + k: v for k, v in plan.base.model_dump(mode="json").items()
                   if k not in ("tags", "variant", "run_kind", "parent_run_id")})
    if plan.custom_variants:
        params[names.SWEEP_PARAM + "custom_variants"] = plan.custom_variants
    return {k: "none" if v is None else str(v) for k, v in params.items()}
