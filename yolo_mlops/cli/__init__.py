"""`yolo-mlops` command line. Every run command builds one RunSpec and hands it to a Prefect flow.

Each command lives in its own module and imports what it needs when it runs, so the parser itself
(and `--help`) stays cheap.
"""

from __future__ import annotations

import argparse
import sys

from yolo_mlops.cli import analyze, compare, run, sweeps, trends
from yolo_mlops.cli.run import spec_from_args
from yolo_mlops.errors import ConfigError

COMMAND_MODULES = (run, analyze, sweeps, trends, compare)

__all__ = ["build_parser", "main", "spec_from_args"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="yolo-mlops", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for module in COMMAND_MODULES:
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from yolo_mlops.run import prefect_server
    from yolo_mlops.run.config import data_home

    prefect_server.configure(data_home())  # before any command imports prefect
    try:
        return args.handler(args)
    except ConfigError as exc:
        print(f"yolo-mlops: error: {exc}", file=sys.stderr)
        return 2
    except RuntimeError as exc:
        line = prefect_server.startup_failure(exc)
        if line is None:
            raise
        print(f"yolo-mlops: error: {line}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
