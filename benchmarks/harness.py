"""What the benchmarks share: a timed child process or block, the order of interleaved repeats of several arms (so
a machine that gets busier or quieter during a run moves every arm alike), each arm's medians and their ratios, and
a command line as a person would type it again.

The benchmarks run as scripts (`python benchmarks/<name>.py`), which puts this folder first on sys.path: they
import this module as `harness`.
"""

from __future__ import annotations

import shlex
import statistics
import subprocess
import time
from collections.abc import Hashable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

K = TypeVar("K", bound=Hashable)
A = TypeVar("A")

ROOT = Path(__file__).resolve().parents[1]
ORDERS = ("same", "alternate", "rotate")


@dataclass
class Timed:
    """A child process that ran to its end: wall seconds from just before its start to its exit, and what
    `subprocess.run` returned (its exit code, and its output where it was captured)."""

    seconds: float
    proc: subprocess.CompletedProcess


def time_child(command: Sequence[str | Path], **run: Any) -> Timed:
    """`subprocess.run(command, **run)`, timed with perf_counter around the whole child."""
    started = time.perf_counter()
    proc = subprocess.run([str(part) for part in command], **run)
    return Timed(time.perf_counter() - started, proc)


class Stopwatch:
    """Seconds of a `with` block (perf_counter): `with Stopwatch() as watch: ...`, then `watch.seconds`."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self._started = 0.0

    def __enter__(self) -> Stopwatch:
        self._started = time.perf_counter()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.seconds = time.perf_counter() - self._started


def round_order(arms: Sequence[A], repeat: int, order: str = "alternate") -> list[A]:
    """The arms in the order round `repeat` runs them. "same": as given in every round (A B, A B, ...);
    "alternate": reversed every other round (A B, B A, ...), so neither arm always goes first; "rotate": each
    round starts one arm later (A B C, B C A, C A B, ...)."""
    arms = list(arms)
    if order == "same":
        return arms
    if order == "alternate":
        return arms if repeat % 2 == 0 else arms[::-1]
    if order == "rotate":
        shift = repeat % len(arms) if arms else 0
        return arms[shift:] + arms[:shift]
    raise ValueError(f"order {order!r} is none of {ORDERS}")


def interleave(arms: Iterable[A], repeats: int, order: str = "alternate") -> Iterator[tuple[int, A]]:
    """(repeat, arm) for `repeats` rounds, every arm once a round, in `round_order`'s order."""
    arms = list(arms)
    for repeat in range(repeats):
        for arm in round_order(arms, repeat, order):
            yield repeat, arm


class Samples(dict[K, list[float]]):
    """Each arm's measurements, in the order they were taken."""

    def __init__(self, arms: Iterable[K] = ()) -> None:
        super().__init__((arm, []) for arm in arms)

    def add(self, arm: K, value: float) -> float:
        self.setdefault(arm, []).append(value)
        return value

    def medians(self) -> dict[K, float]:
        return medians(self)

    def ratios(self, base: K) -> dict[K, float]:
        """Each arm's median over the median of `base`."""
        return ratios(self.medians(), base)

    def paired_ratios(self, arm: K, base: K) -> list[float]:
        """`arm` over `base` repeat by repeat (both measured once a repeat)."""
        return [a / b for a, b in zip(self[arm], self[base], strict=True)]


def medians(samples: Mapping[K, Iterable[float]]) -> dict[K, float]:
    """The median of each arm's samples."""
    return {arm: statistics.median(values) for arm, values in samples.items()}


def ratios(values: Mapping[K, float], base: K) -> dict[K, float]:
    """Each arm's value over the value of `base`, the arms side by side."""
    return {arm: value / values[base] for arm, value in values.items()}


def column_medians(rows: Iterable[Sequence[float]]) -> tuple[float, ...]:
    """The median of each column of rows of equal length (one row per repeat: seconds, peak memory, ...)."""
    return tuple(statistics.median(column) for column in zip(*rows, strict=True))


def command_line(command: Sequence[str | Path]) -> str:
    """The command as a shell takes it (quoted where needed), paths inside the repository relative to it."""
    return shlex.join(str(part).replace(str(ROOT) + "/", "") for part in command)
