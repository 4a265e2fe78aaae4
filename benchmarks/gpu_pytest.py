"""pytest for the GPU checks, against the tree the checks installed, never the source tree beside it.

`python3 -m pytest` puts its working directory first on sys.path, so started in the repository root it imports
the source tree's `yolo_mlops`, which has no `yolo_mlops.flows` (only an install maps flows/ there): on the
first GPU run a test's fixture failed with ModuleNotFoundError. Run as a script, this file puts only its own
folder first (no package there); it imports `yolo_mlops` and `yolo_mlops.flows`, prints where they came from,
refuses (exit 3) when that is not GPU_CHECKS_TARGET (the install of run_gpu_checks.sh, when set), and runs
pytest in this process over the given arguments, with this repository's pytest settings and importlib
imports (pytest adds no test folder to sys.path).

    python3 benchmarks/gpu_pytest.py /abs/path/tests/nvml -q            # any pytest arguments
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WRONG_TREE = 3


def main(argv: list[str]) -> int:
    target = os.environ.get("GPU_CHECKS_TARGET")
    installed = Path(target).resolve() if target else None
    import yolo_mlops

    package = Path(yolo_mlops.__file__ or "").resolve().parent
    if installed is not None and not package.is_relative_to(installed):  # before flows: the source tree has none
        print(f"gpu_pytest: yolo_mlops from {package} is not the installed tree under {installed}: not testing it")
        return WRONG_TREE
    import yolo_mlops.flows

    flows = Path(yolo_mlops.flows.__file__ or "").resolve().parent
    print(f"gpu_pytest: yolo_mlops from {package}, yolo_mlops.flows from {flows}", flush=True)
    if installed is not None and not flows.is_relative_to(installed):
        print(f"gpu_pytest: yolo_mlops.flows is not the installed tree's ({installed}): not testing it")
        return WRONG_TREE
    import pytest

    settings = ["--rootdir", str(ROOT), "-c", str(ROOT / "pyproject.toml"), "--import-mode=importlib"]
    return int(pytest.main([*settings, "-p", "no:cacheprovider", *argv]))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
