"""Sweep planning: which children run, in which order, on which lane, with which RunSpec; the parent run's
tags and params.

A *lane* is one GPU of one machine: a sweep over several devices (`devices`) or machines (`machines`, the
per-machine work queues of a Prefect work pool) runs one child per lane at a time, lanes side by side. Each
repeat is a *block* (the baseline and every variant, interleaved) and a block runs whole on one lane, so a
lane's speed cancels out of every speed-up computed within a block (`sweeps.blocks`).

`plan_sweep` validates everything a sweep can validate before any run exists (variants, skip reasons, every
child's RunSpec, devices, the concurrency limit's name) and raises ConfigError with one line.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from yolo_mlops import names
from yolo_mlops.config import RunSpec, build_run_spec, deep_merge
from yolo_mlops.config.sweep import Isolation, Order, SweepRequest
from yolo_mlops.errors import ConfigError
from yolo_mlops.run import gpu_lock
from yolo_mlops.run.environment import resolve_device
from yolo_mlops.sweeps import variants


@dataclass(frozen=True)
class Lane:
    """Where one sequence of children runs: a device of this machine, or a device of a pool's machine."""

    name: str  # "0", "cpu" (this machine) or "<machine>/<device>" (a pool's machine)
    device: str | None  # the children's device; None: the worker's default (its GPU 0, else its CPU)
    machine: str | None = None  # the pool's work queue that machine's worker polls; None: this process's machine
    limit: str | None = None  # held around each child here; on a pool's machine the child takes its own


@dataclass(frozen=True)
class Child:
    position: int  # 0-based place in the plan's order
    variant: str  # canonical expression
    repeat: int  # 1-based
    block: int = 0  # the repeat's block: the baseline and every variant of one repeat, run whole on one lane
    lane: str = ""  # Lane.name


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
    lanes: tuple[Lane, ...] = ()  # empty: the children run one after another in this process, as planned
    pool: str | None = None  # the Prefect work pool whose machines run the children
    isolation: Isolation = "side-by-side"

    @property
    def multi_lane(self) -> bool:
        """Children spread over lanes: compared within blocks (paired), not as pooled groups."""
        return len(self.lanes) > 1

    def lane(self, name: str) -> Lane:
        return next(lane for lane in self.lanes if lane.name == name)

    def lane_children(self, name: str) -> list[Child]:
        """A lane's children in the order it runs them (block by block)."""
        return [c for c in self.children if c.lane == name]

    def child_spec(self, child: Child, parent_run_id: str) -> RunSpec:
        spec = variants.apply_variant(self.base, child.variant, self.custom_variants)
        tags = {names.SWEEP_REPEAT: str(child.repeat), names.SWEEP_POSITION: str(child.position)}
        changes: dict[str, Any] = {
            "run_kind": "variant",
            "parent_run_id": parent_run_id,
            "run_name": f"{child.variant} r{child.repeat}",
        }
        if self.lanes:
            tags.update({names.SWEEP_BLOCK: str(child.block), names.SWEEP_LANE: child.lane})
            changes["device"] = self.lane(child.lane).device
        changes["tags"] = tags
        return build_run_spec(deep_merge(spec.model_dump(mode="json"), changes))


def plan_request(request: SweepRequest, machines: list[str] | None = None) -> SweepPlan:
    """`plan_sweep` of a sweep request; `machines`: the pool's live machines (`remote.find_target`)."""
    return plan_sweep(
        request.base,
        list(request.variants),
        request.repeats,
        request.order,
        request.warmup_steps,
        request.concurrency_limit,
        request.custom_variants,
        devices=request.devices,
        pool=request.pool,
        machines=machines,
        isolation=request.isolation,
    )


def plan_sweep(
    base: RunSpec,
    variant_exprs: list[str],
    repeats: int = 3,
    order: Order = "interleaved",
    warmup_steps: int = 1,
    concurrency_limit: str | None = None,
    custom_variants: dict[str, dict[str, Any]] | None = None,
    devices: list[str] | None = None,
    pool: str | None = None,
    machines: list[str] | None = None,
    isolation: Isolation = "side-by-side",
) -> SweepPlan:
    """Validate everything a sweep can validate before it starts; raises ConfigError (one line).

    `devices`: run the children on these devices of this machine (or, with `pool`, of every machine), one
    child per device at a time. `pool` + `machines`: submit the children to the work queues of those machines
    in that Prefect work pool (the flow finds the machines; see `sweeps.remote`)."""
    _check_options(repeats, order, warmup_steps, isolation)
    custom = dict(custom_variants or {})
    clash = sorted(set(custom) & {variants.BASELINE})
    if clash:
        raise ConfigError(f"custom variant names may not shadow {clash}")
    if devices is not None:
        devices = check_devices(devices, local=pool is None)
        if base.world_size > 1 and base.ddp.ranks is None:
            raise ConfigError(
                f"--devices makes each device a lane of single-device children; the base is a "
                f"data-parallel job over GPUs {base.device!r}: sweep it without --devices"
            )
    _check_spread(order, concurrency_limit, devices, pool, machines)
    if pool is not None:  # devices resolve on the workers; skip reasons assume a GPU unless told otherwise
        device = (devices or [base.device or "0"])[0]
    else:
        device = devices[0] if devices else resolve_device(base.device)
    planned = _planned(base, variant_exprs, custom)
    skipped = _skipped(base, planned, device, custom)
    if concurrency_limit is None and pool is None:
        concurrency_limit = _default_limit(device)
    lanes = _lanes(base, devices, pool, machines, concurrency_limit)
    runnable = [n for n in planned if n not in skipped]
    return SweepPlan(
        base=base,
        device=device,
        variants=planned,
        skipped=skipped,
        children=_children(runnable, repeats, order, lanes),
        repeats=repeats,
        order=order,
        warmup_steps=warmup_steps,
        concurrency_limit=concurrency_limit,
        custom_variants=custom,
        lanes=tuple(lanes),
        pool=pool,
        isolation=isolation,
    )


def _check_options(repeats: int, order: str, warmup_steps: int, isolation: str) -> None:
    if isolation not in ("side-by-side", "exclusive"):
        raise ConfigError(f"isolation must be 'side-by-side' or 'exclusive', got {isolation!r}")
    if repeats < 1:
        raise ConfigError("repeats must be >= 1")
    if warmup_steps < 0:
        raise ConfigError("warmup_steps must be >= 0")
    if order not in ("interleaved", "blocked"):
        raise ConfigError(f"order must be 'interleaved' or 'blocked', got {order!r}")


def _check_spread(
    order: str, concurrency_limit: str | None, devices: list[str] | None, pool: str | None, machines: list[str] | None
) -> None:
    """What children spread over devices or machines need: a machine to run on, whole blocks, a limit each."""
    if pool is not None and not machines:
        raise ConfigError(f"work pool {pool!r}: no machine to run on")
    if (devices or pool) and order != "interleaved":
        raise ConfigError(
            "order 'blocked' runs a variant's repeats back to back; over several devices or machines "
            "each repeat must be a block of every variant (use order 'interleaved')"
        )
    if devices and len(devices) > 1 and concurrency_limit is not None and pool is None:
        raise ConfigError(
            "--concurrency-limit names one limit; over several devices each device holds its own "
            "(gpu-<machine>-<index>)"
        )


def _planned(base: RunSpec, variant_exprs: list[str], custom: dict[str, dict[str, Any]]) -> list[str]:
    """The baseline, then each variant once in canonical form; refused when only DDP switches would run on a
    single process."""
    planned: list[str] = [variants.BASELINE]
    for expr in variant_exprs:
        name = variants.canonical(expr, custom)
        if name not in planned:
            planned.append(name)
    ddp_only = [n for n in planned[1:] if variants.needs_ddp(n, custom)]
    if ddp_only and len(ddp_only) == len(planned) - 1 and base.world_size < 2:
        raise ConfigError(
            f"{', '.join(ddp_only)}: DistributedDataParallel switches, and the base is a single process: the sweep "
            "would measure only the baseline; give the base ranks (--ranks 2 on CPU, several GPUs in --device)"
        )
    return planned


def _skipped(base: RunSpec, planned: list[str], device: str, custom: dict[str, dict[str, Any]]) -> dict[str, str]:
    """Variant -> why it cannot run on `device`; every other variant applied once, so a bad combination fails
    here, before any run."""
    skipped: dict[str, str] = {}
    for name in planned:
        reason = variants.skip_reason(name, device, custom, base.world_size)
        if reason:
            skipped[name] = reason
        else:
            variants.apply_variant(base, name, custom)
    return skipped


def _default_limit(device: str) -> str | None:
    """The one limit every child on `device` holds (its GPU's), None on CPU or a temporary server."""
    held = gpu_lock.limit_names(device)
    if len(held) > 1:  # one name per child: a data-parallel job over several GPUs would hold only the first's
        raise ConfigError(
            f"a sweep of a job over GPUs {device!r} holds one concurrency limit per child: give "
            f"--concurrency-limit NAME, a limit every job on GPUs {device} takes, to keep other "
            f"runs off all of them ({', '.join(held)} are each GPU's own)"
        )
    return held[0] if held else None


def _children(runnable: list[str], repeats: int, order: str, lanes: list[Lane]) -> list[Child]:
    """The children in run order; interleaved, each repeat is a block, and blocks go round the lanes."""
    if order == "interleaved":
        triples = [(n, r, r - 1) for r in range(1, repeats + 1) for n in runnable]
    else:
        triples = [(n, r, 0) for n in runnable for r in range(1, repeats + 1)]
    return [
        Child(i, n, r, block, lanes[block % len(lanes)].name if lanes else "")
        for i, (n, r, block) in enumerate(triples)
    ]


def _lanes(
    base: RunSpec,
    devices: list[str] | None,
    pool: str | None,
    machines: list[str] | None,
    concurrency_limit: str | None,
) -> list[Lane]:
    if pool is not None:
        lane_devices: Sequence[str | None] = devices or [base.device]
        return [Lane(f"{m}/{d or 'default'}", d, machine=m) for m in machines or [] for d in lane_devices]
    if devices is None:
        return []
    if len(devices) == 1 and concurrency_limit is not None:
        return [Lane(devices[0], devices[0], limit=concurrency_limit)]
    return [Lane(d, d, limit=gpu_lock.limit_name(d)) for d in devices]


def check_devices(devices: list[str], local: bool = True) -> list[str]:
    """Device strings for lanes: CUDA indices (each one GPU) or a lone 'cpu'; on this machine they must exist."""
    cleaned = [d.strip().removeprefix("cuda:") for d in devices if d.strip()]
    if not cleaned:
        raise ConfigError("devices: name at least one device, e.g. 0,1")
    duplicates = sorted({d for d in cleaned if cleaned.count(d) > 1})
    if duplicates:
        raise ConfigError(f"devices: {', '.join(duplicates)} named twice (one lane per device)")
    if "cpu" in cleaned:
        if len(cleaned) > 1:
            raise ConfigError("devices: 'cpu' runs alone (side-by-side CPU children would share the same cores)")
        return cleaned
    bad = [d for d in cleaned if not d.isdigit()]
    if bad:
        raise ConfigError(f"devices: {', '.join(bad)} is not a CUDA device index (e.g. 0,1,2) or 'cpu'")
    if local:
        count = _cuda_device_count()
        missing = [d for d in cleaned if int(d) >= count]
        if missing:
            raise ConfigError(
                f"devices: {', '.join(missing)} does not exist here: this machine has {count} CUDA "
                f"device(s){' (indices 0-' + str(count - 1) + ')' if count else ''}"
            )
    return cleaned


def _cuda_device_count() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def parent_tags(plan: SweepPlan) -> dict[str, str]:
    tags = {
        names.RUN_KIND: "sweep",
        names.VARIANT: "sweep",
        names.SWEEP_VARIANTS: ",".join(plan.variants),
        names.SWEEP_ORDER: plan.order,
        names.SWEEP_REPEATS: str(plan.repeats),
        names.SWEEP_DEVICE: plan.device,
        names.SWEEP_CONCURRENCY_LIMIT: plan.concurrency_limit or "none",
    }
    if plan.lanes:
        tags[names.SWEEP_LANES] = ",".join(lane.name for lane in plan.lanes)
        tags[names.SWEEP_ISOLATION] = plan.isolation
    if plan.pool is not None:
        tags[names.SWEEP_POOL] = plan.pool
    if plan.skipped:
        tags[names.SWEEP_SKIPPED] = ",".join(plan.skipped)
    return tags


def parent_params(plan: SweepPlan) -> dict[str, str]:
    sweep = {
        "variants": ",".join(plan.variants),
        "repeats": plan.repeats,
        "order": plan.order,
        "warmup_steps": plan.warmup_steps,
        "children": len(plan.children),
        "concurrency_limit": plan.concurrency_limit,
    }
    if plan.lanes:
        sweep.update(lanes=",".join(lane.name for lane in plan.lanes), isolation=plan.isolation, pool=plan.pool)
    params: dict[str, Any] = {names.SWEEP_PARAM + k: v for k, v in sweep.items()}
    params.update(
        {
            names.BASE_PARAM + k: v
            for k, v in plan.base.model_dump(mode="json").items()
            if k not in ("tags", "variant", "run_kind", "parent_run_id")
        }
    )
    if plan.custom_variants:
        params[names.SWEEP_PARAM + "custom_variants"] = plan.custom_variants
    return {k: "none" if v is None else str(v) for k, v in params.items()}
