"""Where `make test`'s time goes: its wall time against the CPU work it does and the cores it has.

Runs the README's test command once, as a user would, and reports:
- the wall time, and the CPU seconds (user + system) of the command's process tree (`wait4`'s rusage: the
  command and each descendant that its parent waited for; a process left to init when its parent ended is not
  counted);
- how busy the machine's cores were meanwhile (/proc/stat, every process on the machine: run it alone);
- the floor those give: the CPU seconds over the cores, the shortest wall time that work allows;
- test time per module (junit), and the sum of the modules that conftest runs on a core of their own
  (`TIMING`: one after another, so their sum bounds the run from below too).

    .venv/bin/python benchmarks/bench_test_suite.py            # make test, 4 workers
    .venv/bin/python benchmarks/bench_test_suite.py --top 15 -- TEST_WORKERS=3
    .venv/bin/python benchmarks/bench_test_suite.py --pytest-args "tests/profiling -m 'not slow'"
"""

from __future__ import annotations

import argparse
import ast
import collections
import os
import subprocess
import tempfile
import threading
import time
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def cpu_ticks() -> tuple[int, int]:
    """(busy, total) jiffies of all cores since boot."""
    with open("/proc/stat") as stat:
        fields = [int(v) for v in stat.readline().split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    return sum(fields) - idle, sum(fields)


def timing_modules(conftest: Path) -> tuple[str, ...]:
    """conftest's TIMING tuple, read from its source (importing it would start a test session's set-up)."""
    for node in ast.parse(conftest.read_text()).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "TIMING" for t in node.targets):
            return tuple(ast.literal_eval(node.value))
    return ()


def module_times(junit: Path) -> dict[str, float]:
    """Test time (s) per test module, longest first."""
    times: dict[str, float] = collections.defaultdict(float)
    for case in ET.parse(junit).getroot().iter("testcase"):
        times[case.get("classname", "").replace(".", "/") + ".py"] += float(case.get("time", 0))
    return dict(sorted(times.items(), key=lambda item: -item[1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--top", type=int, default=10, help="modules listed, longest first")
    parser.add_argument("--pytest-args", default="", help="more pytest arguments, e.g. \"-m 'not slow'\"")
    parser.add_argument("make_args", nargs="*", help="extra make arguments after --, e.g. TEST_WORKERS=3")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        junit = Path(tmp) / "junit.xml"
        busy0, total0 = cpu_ticks()
        started = time.monotonic()
        proc = subprocess.Popen(
            ["make", "test", *args.make_args, f"PYTEST_ARGS=-q --junitxml={junit} {args.pytest_args}"],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        assert proc.stdout is not None
        tail: collections.deque[str] = collections.deque(maxlen=3)
        # read in a thread and wait for make itself: a process the suite left behind that still holds the pipe
        # would keep it from reaching its end, and must not hold up the figures
        reader = threading.Thread(target=lambda: tail.extend(proc.stdout or ()), daemon=True)
        reader.start()
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.monotonic() - started
        busy1, total1 = cpu_ticks()
        reader.join(10)
        times = module_times(junit) if junit.exists() else {}

    cores = len(os.sched_getaffinity(0))
    cpu_s = usage.ru_utime + usage.ru_stime
    busy = (busy1 - busy0) / max(total1 - total0, 1)
    print("".join(tail).rstrip())
    print(f"exit status {os.waitstatus_to_exitcode(status)}")
    print(f"wall {wall / 60:.1f} min ({wall:.0f} s)")
    print(f"CPU of the command's process tree: {cpu_s:.0f} s (user {usage.ru_utime:.0f}, system {usage.ru_stime:.0f})")
    print(f"cores busy meanwhile: {100 * busy:.0f}% of {cores} (every process on the machine)")
    print(f"floor for that work on {cores} cores: {cpu_s / cores / 60:.1f} min ({cpu_s / cores:.0f} s)")
    timing = timing_modules(ROOT / "tests" / "conftest.py")
    print(
        f"test time: {sum(times.values()):.0f} s in all; the modules on a core of their own, one after another: "
        f"{sum(v for m, v in times.items() if m in timing):.0f} s"
    )
    for module, seconds in list(times.items())[: args.top]:
        print(f"  {seconds:6.0f} s  {module}{'  (own core)' if module in timing else ''}")


if __name__ == "__main__":
    main()
