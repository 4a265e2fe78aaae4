"""What a sweep is asked to run: `SweepRequest`, the `sweep` flow's one parameter.

Pydantic, as `RunSpec` is, so the Prefect UI shows and checks it and a deployment run passes it as JSON
(`{"request": {"base": {...}, "variants": [...]}}`); the command line builds the same object. Bounds on single
fields are checked here; what needs the variant catalogue, the devices or the pool is checked by
`sweeps.plan_sweep`, before any run exists.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from yolo_mlops.config.run_spec import RunSpec

Order = Literal["interleaved", "blocked"]
Isolation = Literal["side-by-side", "exclusive"]

LOST_AFTER_S = 120.0  # a dozen missed polls of a worker at Prefect's default `PREFECT_WORKER_QUERY_SECONDS` (10 s)
START_TIMEOUT_S = 900.0  # a child submitted but not running after this long is cancelled (an image pull fits)
RUN_TIMEOUT_S = 7200.0  # a child running for longer than this is cancelled


class SweepRequest(BaseModel):
    """Baseline + variants x repeats of one base run, where they run and how long each may wait."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    base: RunSpec = Field(default_factory=RunSpec)
    variants: list[str] = Field(default_factory=lambda: ["amp_bf16", "cudnn_benchmark", "channels_first"])
    repeats: Annotated[int, Field(ge=1, le=50)] = 3
    order: Order = "interleaved"
    warmup_steps: Annotated[int, Field(ge=0, description="steps discarded at the start of every child")] = 1
    concurrency_limit: str | None = Field(
        default=None,
        description="Prefect global concurrency limit each child holds; default gpu-<machine>-<index> on a GPU, "
        "none on CPU; it must exist (strict)",
    )
    custom_variants: dict[str, dict[str, Any]] = Field(
        default_factory=dict,
        description="ad-hoc variants: name -> RunSpec field changes, e.g. "
        "{'sgd': {'train_args': {'optimizer': 'SGD'}}}",
    )
    extra_tags: dict[str, str] = Field(default_factory=dict, description="extra tags for the parent MLflow run")
    devices: list[str] | None = Field(
        default=None,
        description="run children side by side, one per device (CUDA indices), blocks paired within a device",
    )
    pool: str | None = Field(
        default=None,
        description="Prefect work pool: children run on its machines (one work queue per machine), each a run of "
        "the pool's profile-training deployment",
    )
    deployment: str | None = Field(
        default=None, description="the pool's profile-training deployment, when it has several"
    )
    isolation: Isolation = Field(
        default="side-by-side",
        description="exclusive: one child at a time over all devices/machines (no interference, slower)",
    )
    lost_after_s: float = Field(
        default=LOST_AFTER_S,
        gt=0,
        description="a pool machine whose worker has not polled for this long is lost: its child fails",
    )
    start_timeout_s: float = Field(
        default=START_TIMEOUT_S,
        gt=0,
        description="a child not running this long after its submission (pool) is cancelled and fails",
    )
    run_timeout_s: float = Field(
        default=RUN_TIMEOUT_S, gt=0, description="a child not finished this long after its start is cancelled and fails"
    )
