"""The CLI builds only the parser of the command a command line names; its command map must be whole."""

from __future__ import annotations

import importlib
import subprocess
import sys

from yolo_mlops import cli


def _registered(module_name: str) -> set[str]:
    import argparse

    sub = argparse.ArgumentParser().add_subparsers(dest="command")
    importlib.import_module(f"yolo_mlops.cli.{module_name}").register(sub)
    return set(sub.choices)


def test_every_registered_command_maps_to_its_module():
    registered = {command: name for name in cli.COMMAND_MODULES for command in _registered(name)}
    assert registered == cli.COMMANDS


def test_a_named_command_parses_as_with_the_full_parser():
    argv = ["profile", "--imgsz", "320", "--max-steps", "50"]
    assert vars(cli.build_parser("profile").parse_args(argv)) == vars(cli.build_parser().parse_args(argv))


def test_analyze_imports_no_other_command_module():
    code = "import sys; from yolo_mlops.cli import main; main(['analyze', '--help'])"
    probe = (
        "import sys, atexit; atexit.register(lambda: print(sorted(m for m in sys.modules "
        "if m.startswith('yolo_mlops.cli.')), file=sys.stderr)); "
    ) + code
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=300)
    assert "usage: yolo-mlops analyze" in done.stdout
    assert done.stderr.strip().splitlines()[-1] == "['yolo_mlops.cli.analyze']"
