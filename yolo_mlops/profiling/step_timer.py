"""Times every training step (not only the profiled ones), separating the wait for data.

One step is the iteration from the end of the previous step to the end of this one:
    [iteration start] --data wait--> [batch arrives] --compute--> [step end]
The clock is `time.perf_counter_ns()`, shared with the NVML sampler so samples can be aligned to steps.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from yolo_mlops import names

CLOCK = time.perf_counter_ns


@dataclass(frozen=True)
class StepTimes:
    """Columnar per-step timings; all arrays have one entry per step, in step order."""

    start_ns: np.ndarray  # iteration start (previous step end, or epoch start)
    batch_ns: np.ndarray  # batch handed to the trainer (end of data wait)
    end_ns: np.ndarray
    profiled: np.ndarray  # bool: torch.profiler was warming up or recording during the step
    images: np.ndarray  # images in the batch

    def __len__(self) -> int:
        return len(self.end_ns)

    @property
    def step_ms(self) -> np.ndarray:
        return (self.end_ns - self.start_ns) / 1e6

    @property
    def data_wait_ms(self) -> np.ndarray:
        return (self.batch_ns - self.start_ns) / 1e6

    def steady(self, discard_first: int) -> np.ndarray:
        """Mask of steps that represent normal training: outside the profiler window, after warm-up."""
        mask = ~self.profiled.astype(bool)
        mask[:discard_first] = False
        return mask

    def save_csv(self, path: Path, first: int = 0) -> Path:
        """Write the steps from `first` on; `first` > 0 appends them to a file holding the earlier ones."""
        header = "step,start_ns,batch_ns,end_ns,step_ms,data_wait_ms,profiled,images"
        part = slice(first, None)
        rows = np.column_stack(
            [
                np.arange(len(self))[part],
                self.start_ns[part],
                self.batch_ns[part],
                self.end_ns[part],
                self.step_ms[part],
                self.data_wait_ms[part],
                self.profiled[part],
                self.images[part],
            ]
        )
        with open(path, "a" if first else "w") as out:
            np.savetxt(
                out,
                rows,
                delimiter=",",
                header="" if first else header,
                comments="",
                fmt=["%d", "%d", "%d", "%d", "%.4f", "%.4f", "%d", "%d"],
            )
        return path

    @classmethod
    def load_csv(cls, path: Path) -> StepTimes:
        return cls.from_rows(np.loadtxt(path, delimiter=",", skiprows=1, ndmin=2, dtype=np.float64))

    @classmethod
    def from_rows(cls, table: np.ndarray) -> StepTimes:
        """From the CSV's rows as a float array (one row per step, the columns of `save_csv`)."""
        ints = table.astype(np.int64)
        return cls(
            start_ns=ints[:, 1],
            batch_ns=ints[:, 2],
            end_ns=ints[:, 3],
            profiled=ints[:, 6].astype(bool),
            images=ints[:, 7],
        )


class StepTimer:
    """Cheap enough for every step: three clock reads and one row appended."""

    def __init__(self) -> None:
        self._rows: list[tuple[int, int, int, bool, int]] = []  # (start, batch, end, profiled, images) per step
        self._iteration_start: int | None = None
        self._batch_at: int | None = None
        self._saved = 0  # steps already in the CSV written by flush_csv

    def flush_csv(self, path: Path) -> None:
        """Append the steps timed since the last flush to `path` (called between epochs and when training
        ends or is interrupted, never inside a step: the per-step cost stays three clock reads)."""
        if self._saved == len(self._rows) and (self._saved or path.exists()):
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        self.result().save_csv(path, first=self._saved)
        self._saved = len(self._rows)

    @property
    def steps(self) -> int:
        return len(self._rows)

    def iteration_start(self) -> None:
        """Start of the wait for the next batch (epoch start, or just after the previous step's bookkeeping)."""
        self._iteration_start = CLOCK()

    def batch_start(self) -> None:
        self._batch_at = CLOCK()
        if self._iteration_start is None:
            self._iteration_start = self._batch_at

    def batch_end(self, profiled: bool, images: int) -> None:
        batch_at, iteration_start = self._batch_at, self._iteration_start
        if batch_at is None or iteration_start is None:
            # a batch_end without a batch_start (e.g. resumed trainer): nothing to time. batch_start sets
            # both, so the second test only narrows the type.
            return
        self._rows.append((iteration_start, batch_at, CLOCK(), profiled, images))
        self._batch_at = None

    def result(self) -> StepTimes:
        rows = self._rows
        return StepTimes(
            start_ns=np.asarray([row[0] for row in rows], dtype=np.int64),
            batch_ns=np.asarray([row[1] for row in rows], dtype=np.int64),
            end_ns=np.asarray([row[2] for row in rows], dtype=np.int64),
            profiled=np.asarray([row[3] for row in rows], dtype=bool),
            images=np.asarray([row[4] for row in rows], dtype=np.int64),
        )


@dataclass(frozen=True)
class PerfSummary:
    """Step-timer summary over the steady steps; `as_metrics` gives it under its `perf/*` names."""

    step_time_ms_p50: float
    step_time_ms_p90: float
    step_time_ms_mean: float
    images_per_s: float  # images in the steady steps / their summed step time
    data_wait_pct: float  # share of the steady steps' time spent waiting for the data loader
    data_wait_ms_p50: float
    steps_measured: int  # steady steps summarised
    steps_total: int  # all steps run
    step_time_ms_p50_profiled: float | None = None  # inside the profiler window; None when no step was profiled

    def as_metrics(self) -> dict[str, float]:
        """The summary under its `perf/*` MLflow names; the profiled median only when profiled steps ran."""
        out = {
            names.STEP_TIME_P50: self.step_time_ms_p50,
            names.STEP_TIME_P90: self.step_time_ms_p90,
            names.STEP_TIME_MEAN: self.step_time_ms_mean,
            names.IMAGES_PER_S: self.images_per_s,
            names.DATA_WAIT_PCT: self.data_wait_pct,
            names.DATA_WAIT_P50: self.data_wait_ms_p50,
            names.STEPS_MEASURED: float(self.steps_measured),
            names.STEPS_TOTAL: float(self.steps_total),
        }
        if self.step_time_ms_p50_profiled is not None:
            out[names.STEP_TIME_P50_PROFILED] = self.step_time_ms_p50_profiled
        return out


def perf_summary(times: StepTimes, discard_first: int = 1) -> PerfSummary | None:
    """Summary of the steady steps (falls back to all steps if none are steady); None without steps."""
    if len(times) == 0:
        return None
    mask = times.steady(discard_first)
    if not mask.any():
        mask = np.ones(len(times), dtype=bool)
    step_ms, wait_ms = times.step_ms[mask], times.data_wait_ms[mask]
    profiled = times.profiled.astype(bool)
    return PerfSummary(
        step_time_ms_p50=float(np.median(step_ms)),
        step_time_ms_p90=float(np.percentile(step_ms, 90)),
        step_time_ms_mean=float(step_ms.mean()),
        images_per_s=float(times.images[mask].sum() / (step_ms.sum() / 1e3)),
        data_wait_pct=float(100.0 * wait_ms.sum() / step_ms.sum()),
        data_wait_ms_p50=float(np.median(wait_ms)),
        steps_measured=int(mask.sum()),
        steps_total=len(times),
        step_time_ms_p50_profiled=float(np.median(times.step_ms[profiled])) if profiled.any() else None,
    )
