"""The nightly benchmark suite's configuration: which runs, how many a night, and how verdicts are reached.

Pydantic, so the Prefect UI shows and checks it as the `benchmark` flow's parameter; bad values are refused
before any run starts (one line each, `one_line_validation_error`).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field, model_validator

from yolo_mlops import names
from yolo_mlops.config.run_spec import ProfilerSettings, RunSpec

BISECT_DEPLOYMENT = "bisect/bisect"  # <flow name>/<deployment name> of deploy/prefect.yaml


def default_suite() -> list[RunSpec]:
    return [
        RunSpec(
            model="yolo11n.yaml",
            imgsz=640,
            batch=16,
            epochs=100,
            max_steps=60,
            synthetic_images=256,
            experiment=names.BENCHMARK_EXPERIMENT,
            run_kind="benchmark",
            profiler=ProfilerSettings(skip_first=10, wait=5, warmup=2, active=5),
        )
    ]


class BenchmarkSuite(BaseModel):
    runs: list[RunSpec] = Field(default_factory=default_suite)
    repeats: int | Literal["auto"] = Field(
        default=3,
        description="runs per configuration per night (the night's noise), or 'auto': the fewest that "
        "detect target_shift_pct, at most max_repeats",
    )
    target_shift_pct: float | None = Field(default=None, description="repeats='auto': step to detect, % of level")
    max_repeats: int | None = Field(default=None, description="repeats='auto': the cap")
    max_pvalue: float = Field(default=0.001, gt=0, lt=1, description="significance of a change point")
    candidate_pvalue: float = Field(
        default=0.01, gt=0, lt=1, description="per version boundary: the chance one is reported without a shift"
    )
    confirm_repeats: int = Field(default=3, description="runs that re-measure a new regression before it alerts")
    fail_on_regression: bool = True
    auto_bisect: bool = Field(
        default=False,
        description="start the bisect deployment for a confirmed regression "
        "whose runs before and after ran different commits",
    )
    bisect_deployment: str = Field(default=BISECT_DEPLOYMENT, description="auto_bisect: <flow>/<deployment> to run")

    @model_validator(mode="after")
    def _consistent(self) -> BenchmarkSuite:
        if isinstance(self.repeats, int) and self.repeats < 1:
            raise ValueError(f"repeats must be >= 1 or 'auto', got {self.repeats}")
        if self.confirm_repeats < 0:
            raise ValueError(f"confirm_repeats must be >= 0, got {self.confirm_repeats}")
        if self.target_shift_pct is not None and not self.target_shift_pct > 0:
            raise ValueError(f"target_shift_pct must be > 0 (a step in % of the level), got {self.target_shift_pct}")
        if self.repeats == "auto" and (self.max_repeats is None or self.target_shift_pct is None):
            raise ValueError("repeats='auto' needs target_shift_pct and max_repeats (the cap)")
        if self.max_repeats is not None and self.max_repeats < 2:
            raise ValueError(f"max_repeats must be >= 2 (one run a night shows no level), got {self.max_repeats}")
        return self
