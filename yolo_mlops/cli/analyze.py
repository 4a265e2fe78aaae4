"""`yolo-mlops analyze`: breakdowns of any torch.profiler trace."""

from __future__ import annotations

import argparse
from pathlib import Path

from yolo_mlops.errors import ConfigError


def cmd_analyze(args: argparse.Namespace) -> int:
    from yolo_mlops.analysis import TraceError, analyze_command

    try:
        print(analyze_command(str(args.path), args.format))
    except TraceError as exc:
        raise ConfigError(str(exc)) from None
    return 0



def register(sub) -> None:
    analyze = sub.add_parser("analyze", help="analyse any torch.profiler trace (file, .gz, or a folder of ranks)")
    analyze.add_argument("path", type=Path)
    analyze.add_argument("--format", choices=["text", "json"], default="text")
    analyze.set_defaults(handler=cmd_analyze)
