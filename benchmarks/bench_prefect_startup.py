"""Start-up time of Prefect's temporary server, the way a `yolo-mlops` command meets it.

Arms, interleaved, each start in a fresh subprocess (interpreter, prefect import, uvicorn subprocess, database
migration, first /health answer):

- `new-db`: a new database per start (what the first command on a database slot pays, and what every
  command would pay with a throw-away database);
- `reused-db`: one database reused by every start, already migrated: what a command meets on a slot an
  earlier command used (`yolo_mlops/run/prefect_server.py`), and Prefect's default `~/.prefect/prefect.db`.

`--burners N` runs N spinning processes during the measurement (a loaded box). Prints medians per arm.

    .venv/bin/python benchmarks/bench_prefect_startup.py --repeats 5
    .venv/bin/python benchmarks/bench_prefect_startup.py --repeats 3 --burners 4
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from harness import Samples, interleave

CHILD = """
import time
start = time.perf_counter()
from prefect.server.api.server import SubprocessASGIServer
server = SubprocessASGIServer()
server.start(timeout=600)
print(time.perf_counter() - start)
server.stop()
"""
SPIN = "while True: pass"


def start_once(database: Path) -> float:
    env = {
        **os.environ,
        "PREFECT_SERVER_DATABASE_CONNECTION_URL": f"sqlite+aiosqlite:///{database}",
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "PREFECT_LOGGING_LEVEL": "WARNING",
    }
    env.pop("PREFECT_API_URL", None)
    done = subprocess.run(
        [sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, timeout=900, check=True
    )
    return float(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--burners", type=int, default=0)
    args = parser.parse_args()
    burners = [subprocess.Popen([sys.executable, "-c", SPIN]) for _ in range(args.burners)]
    try:
        with tempfile.TemporaryDirectory() as tmp:
            reused = Path(tmp) / "reused.db"
            start_once(reused)  # the first command's migration: not part of either arm
            times: Samples[str] = Samples(["new-db", "reused-db"])
            for repeat, arm in interleave(times, args.repeats, order="same"):
                times.add(arm, start_once(Path(tmp) / f"new-{repeat}.db" if arm == "new-db" else reused))
                if arm == "reused-db":
                    print(
                        f"repeat {repeat + 1}: new-db {times['new-db'][-1]:.1f} s, "
                        f"reused-db {times['reused-db'][-1]:.1f} s",
                        flush=True,
                    )
    finally:
        for burner in burners:
            burner.kill()
            burner.wait()
    for arm, median in times.medians().items():
        values = times[arm]
        print(f"{arm:<10} median {median:.1f} s  (min {min(values):.1f}, max {max(values):.1f})")


if __name__ == "__main__":
    main()
