"""tests/quiet_core.py, the core of its own that timing tests get in a parallel run: real processes standing in
for the xdist controller (this test's process), the timing test's worker and another worker."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from quiet_core import can_split

TESTS = Path(__file__).resolve().parent
WAIT = [sys.executable, "-c", "import sys; sys.stdin.readline()"]  # a process that lives until told
LANE = f"""
import subprocess, sys
sys.path.insert(0, {str(TESTS)!r})
from quiet_core import quiet_core
with quiet_core():
    child = subprocess.Popen({WAIT!r}, stdin=subprocess.PIPE)
    print("split", child.pid, flush=True)
    sys.stdin.readline()
print("restored", flush=True)
sys.stdin.readline()
child.stdin.close()
child.wait()
"""


@pytest.mark.skipif(not can_split(), reason="needs Linux CPU affinity and 2 cores")
def test_the_timing_worker_gets_a_core_and_everything_else_the_rest():
    cpus = os.sched_getaffinity(0)
    lane, rest = {max(cpus)}, cpus - {max(cpus)}
    other = subprocess.Popen(WAIT, stdin=subprocess.PIPE)  # another worker, started before the split
    timing = subprocess.Popen([sys.executable, "-c", LANE], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    later = None
    try:
        assert timing.stdout is not None and timing.stdin is not None
        said, child = timing.stdout.readline().split()
        assert said == "split"
        later = subprocess.Popen(WAIT, stdin=subprocess.PIPE)  # started by the controller during the split
        assert os.sched_getaffinity(timing.pid) == lane and os.sched_getaffinity(int(child)) == lane
        assert os.sched_getaffinity(other.pid) == rest and os.sched_getaffinity(later.pid) == rest
        assert os.sched_getaffinity(0) == rest

        timing.stdin.write("\n")
        timing.stdin.flush()
        assert timing.stdout.readline().strip() == "restored"
        for pid in (0, timing.pid, int(child), other.pid, later.pid):
            assert os.sched_getaffinity(pid) == cpus, pid
    finally:
        os.sched_setaffinity(0, cpus)
        for process in (timing, other, later):
            if process is not None:
                if process.stdin is not None:
                    process.stdin.close()
                process.wait(60)
