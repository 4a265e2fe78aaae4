"""NvmlSampler: one background thread that polls a backend into a bounded columnar ring.

The sampler never raises into training: every backend error is caught, its reason is
recorded once (`sampler.reasons`), and sampling either goes on (transient error,
NOT_SUPPORTED metric, which is then dropped) or stops cleanly (GPU lost, init failure,
too many consecutive failures). Memory is bounded: columns are preallocated numpy arrays
of `capacity` rows; when full, the oldest rows are overwritten and counted.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

import numpy as np

from yolo_mlops.nvml.backend import METRIC_NAMES, DeviceReading, GpuLostError, NvmlBackend

DEFAULT_INTERVAL_S = 0.2
DEFAULT_CAPACITY = 65_536  # rows: hours of training at the default interval (docs/nvml.md)
MAX_CONSECUTIVE_FAILURES = 5  # whole-poll failures in a row before giving up

_process_sampler_lock = threading.Lock()
_process_sampler_running = [False]  # one sampler thread per process


@dataclass
class Timeline:
    """Chronological, columnar copy of what a sampler recorded (plain data).

    Row i was read from GPU `gpu[i]` at perf_counter_ns `t_ns[i]`; interval metrics are
    averages over the `interval_ns[i]` nanoseconds before it. `columns` holds only the
    metrics that were measured at least once; NaN marks "not measured in this row".
    """

    backend: str
    start_ns: int
    t_ns: np.ndarray  # int64
    gpu: np.ndarray  # int16, CUDA device index
    interval_ns: np.ndarray  # int64
    columns: dict[str, np.ndarray]  # float64
    reasons: list[str] = field(default_factory=list)
    dropped_rows: int = 0
    interval_s: float = DEFAULT_INTERVAL_S

    def __len__(self) -> int:
        return int(self.t_ns.shape[0])

    @classmethod
    def empty(cls, backend: str, start_ns: int = 0, reasons: list[str] | None = None) -> Timeline:
        return cls(
            backend,
            start_ns,
            np.zeros(0, np.int64),
            np.zeros(0, np.int16),
            np.zeros(0, np.int64),
            {},
            list(reasons or []),
        )


class _ColumnarRing:
    """Preallocated columns; append overwrites the oldest row once full."""

    def __init__(self, capacity: int, metrics: tuple[str, ...]) -> None:
        self.capacity = capacity
        self.t_ns = np.zeros(capacity, np.int64)
        self.gpu = np.zeros(capacity, np.int16)
        self.interval_ns = np.zeros(capacity, np.int64)
        self.columns = {m: np.full(capacity, np.nan) for m in metrics}
        self.written = 0  # total rows ever appended
        self._last_t_by_gpu: dict[int, int] = {}

    def append(self, reading: DeviceReading, start_ns: int) -> None:
        row = self.written % self.capacity
        previous = self._last_t_by_gpu.get(reading.device, start_ns)
        self._last_t_by_gpu[reading.device] = reading.t_ns
        self.t_ns[row] = reading.t_ns
        self.gpu[row] = reading.device
        self.interval_ns[row] = reading.t_ns - previous
        for metric, column in self.columns.items():
            column[row] = reading.values.get(metric, np.nan)
        self.written += 1

    def chronological(self) -> tuple[np.ndarray, int]:
        """Row order oldest -> newest, and the number of overwritten rows."""
        if self.written <= self.capacity:
            return np.arange(self.written), 0
        head = self.written % self.capacity
        return np.concatenate([np.arange(head, self.capacity), np.arange(head)]), self.written - self.capacity


class NvmlSampler:
    """Background NVML sampling for one training run.

    with NvmlSampler(backend, interval_s=0.2) as sampler:
        train()
    timeline = sampler.timeline()
    """

    def __init__(
        self, backend: NvmlBackend, interval_s: float = DEFAULT_INTERVAL_S, capacity: int = DEFAULT_CAPACITY
    ) -> None:
        if capacity < 1:
            raise ValueError("capacity must be >= 1")
        if not interval_s > 0:
            raise ValueError("interval_s must be > 0")
        self.backend = backend
        # GPM needs a minimum gap between samples: never poll faster than the backend allows.
        self.interval_s = max(interval_s, getattr(backend, "min_interval_s", 0.0))
        self.reasons: list[str] = []
        self.dropped_metrics: set[str] = set()
        self.thread_cpu_s = 0.0  # CPU time the sampling thread used (time.thread_time)
        self.polls = 0
        self._ring = _ColumnarRing(capacity, METRIC_NAMES)
        self._lock = threading.Lock()
        # Held while sampling may go on; stop() releases it. The thread sleeps in
        # acquire(timeout=...), a single futex wait: measurably cheaper per wake-up than
        # Event.wait, which builds a Condition waiter every time.
        self._keep_running = threading.Lock()
        self._keep_running.acquire()
        self._stop_requested = False
        self._thread: threading.Thread | None = None
        self._owns_process_slot = False
        self._started = False
        self._closed = False
        self._gave_up = False
        self._consecutive_failures = 0
        self._start_ns = time.perf_counter_ns()
        self._reported: set[str] = set()
        for note in getattr(backend, "notes", []) or []:  # e.g. device-mapping assumptions
            self._note(f"nvml backend: {note}")
        reason = getattr(backend, "reason", None)  # the null backend says why there is nothing
        if reason:
            self._note(f"nvml backend {backend.name}: {reason}")
        if self.interval_s != interval_s:
            self._note(
                f"interval raised from {interval_s:g} s to {self.interval_s:g} s "
                f"(backend {backend.name} needs > 100 ms between GPM samples)"
            )

    # -- bookkeeping -------------------------------------------------------------

    def _note(self, reason: str, key: str | None = None) -> None:
        """Record a reason once (per key)."""
        key = key or reason
        if key not in self._reported:
            self._reported.add(key)
            self.reasons.append(reason)

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    # -- lifecycle ---------------------------------------------------------------

    def start(self, background: bool = True) -> NvmlSampler:
        """Start the backend and the sampling thread. Never raises; failures go to reasons.

        background=False starts only the backend: the caller then drives poll_once()
        itself (deterministic tests, or sampling at points of its own choosing).
        """
        if self._started or self.backend.name == "none":
            return self
        with _process_sampler_lock:
            if _process_sampler_running[0]:
                self._note("another NvmlSampler is already running in this process; not sampling")
                return self
            _process_sampler_running[0] = True
            self._owns_process_slot = True
        try:
            self._start_ns = self.backend.start()
        except Exception as exc:  # never raise into training
            self._note(f"nvml backend {self.backend.name} failed to start: {exc}")
            self._close_backend()  # free whatever start() allocated before failing
            self._release_process_slot()
            return self
        self._started = True
        if background:
            self._thread = threading.Thread(target=self._run, name="nvml-sampler", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        if not self._stop_requested:
            self._stop_requested = True
            self._keep_running.release()
        if self._thread is not None:
            self._thread.join(timeout=max(5.0, 5 * self.interval_s))
            if self._thread.is_alive():
                self._note("nvml sampler thread did not stop within its join timeout")
        elif self._started and not self._closed:
            self._close_backend()
        self._release_process_slot()

    def _release_process_slot(self) -> None:
        if self._owns_process_slot:
            with _process_sampler_lock:
                _process_sampler_running[0] = False
            self._owns_process_slot = False

    def __enter__(self) -> NvmlSampler:
        return self.start()

    def __exit__(self, *exc_info) -> None:
        self.stop()

    # -- the thread ------------------------------------------------------------------

    def _run(self) -> None:
        cpu_at_start = time.thread_time()
        interval_ns = int(self.interval_s * 1e9)
        min_gap_ns = int(self.backend.min_interval_s * 1e9)
        try:
            next_poll_ns = time.perf_counter_ns() + interval_ns
            while not self._wait_for_stop((next_poll_ns - time.perf_counter_ns()) / 1e9):
                poll_started_ns = time.perf_counter_ns()
                # Schedule from the actual start when late: no burst of catch-up polls, and
                # never closer than the backend allows (GPM: > GPM_MIN_SAMPLE_GAP_S).
                next_poll_ns = max(
                    next_poll_ns + interval_ns, poll_started_ns + interval_ns // 2, poll_started_ns + min_gap_ns
                )
                if not self.poll_once():
                    break
        except Exception as exc:  # last line of defence: the thread must not die loudly
            self._note(f"nvml sampler thread crashed: {type(exc).__name__}: {exc}")
        finally:
            self.thread_cpu_s = time.thread_time() - cpu_at_start
            self._close_backend()

    def _wait_for_stop(self, seconds: float) -> bool:
        """Sleep up to `seconds`; True as soon as stop() was called."""
        if seconds <= 0:
            return self._keep_running.acquire(blocking=False)
        return self._keep_running.acquire(timeout=seconds)

    def _close_backend(self) -> None:
        self._closed = True
        try:
            self.backend.close()
        except Exception as exc:
            self._note(f"nvml backend close failed: {exc}")

    def poll_once(self) -> bool:
        """Read the backend once and record the result; False when sampling must stop."""
        if not self._started or self._gave_up:
            return False
        try:
            readings = self.backend.read()
        except GpuLostError as exc:
            self._note(f"GPU lost, sampling stopped: {exc}")
            self._gave_up = True
            return False
        except Exception as exc:
            self._consecutive_failures += 1
            self._note(f"nvml poll failed: {type(exc).__name__}: {exc}", key=f"poll:{type(exc).__name__}")
            if self._consecutive_failures >= MAX_CONSECUTIVE_FAILURES:
                self._note(f"sampling stopped after {self._consecutive_failures} failed polls in a row")
                self._gave_up = True
                return False
            return True
        self._consecutive_failures = 0
        self._record(readings)
        return True

    def _record(self, readings: list[DeviceReading]) -> None:
        with self._lock:
            for reading in readings:
                for metric in reading.unsupported:
                    if metric not in self.dropped_metrics:
                        self.dropped_metrics.add(metric)
                        self.backend.disable(metric)
                        self._note(f"{metric}: NVML answered NOT_SUPPORTED on GPU {reading.device}; metric dropped")
                for metric, message in reading.failed.items():
                    self._note(f"{metric}: {message}", key=f"failed:{metric}")
                self._ring.append(reading, self._start_ns)
            self.polls += 1

    # -- results -----------------------------------------------------------------

    def timeline(self) -> Timeline:
        """A chronological copy of the samples so far (safe while running)."""
        with self._lock:
            order, dropped = self._ring.chronological()
            # Indexing with an index array already copies; keep only columns measured at least once.
            columns = {
                m: values
                for m, values in ((m, c[order]) for m, c in self._ring.columns.items())
                if not np.all(np.isnan(values))
            }
            timeline = Timeline(
                backend=self.backend.name,
                start_ns=self._start_ns,
                t_ns=self._ring.t_ns[order],
                gpu=self._ring.gpu[order],
                interval_ns=self._ring.interval_ns[order],
                columns=columns,
                reasons=list(self.reasons),
                dropped_rows=dropped,
                interval_s=self.interval_s,
            )
        if dropped:
            timeline.reasons.append(f"ring full: the oldest {dropped} rows were overwritten")
        return timeline
