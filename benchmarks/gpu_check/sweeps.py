"""The sweep steps (benchmarks/gpu_sweep.py): the variants' sweep, the smoke diagnosis' fixes against the
baseline, and the lane path of `sweep --devices`."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING

from . import BENCH
from .output import last_line

if TYPE_CHECKING:
    from .runner import Checks, StepRun


def _sweep_cmd(ch: Checks, variants: str, name: str, warmup: int) -> list[str]:
    if ch.tiny:
        size = ["--imgsz", "64", "--batch", "4", "--workers", "0", "--images", "32"]
        size += ["--repeats", "1", "--max-steps", "8", "--warmup-steps", "1"]
    else:
        size = ["--imgsz", "640", "--batch", "16", "--workers", "8", "--images", "640"]
        size += ["--repeats", "2", "--max-steps", "40", "--warmup-steps", str(warmup)]
    return [
        ch.py,
        str(BENCH / "gpu_sweep.py"),
        "--variants",
        variants,
        *size,
        "--device",
        ch.device,
        "--experiment",
        name.replace("_", "-"),
        "--result",
        str(ch.work / f"{name}.json"),
    ]


def cmd_sweep(ch: Checks) -> list[str]:
    variants = "workers_2" if ch.tiny else "amp_bf16,cudnn_benchmark,channels_last,channels_first"
    return _sweep_cmd(ch, variants, "gpu_sweep", 10)


# What the diagnosis of the smoke run named on the first H100 run: "launch-bound -> compile, batch_32"
LAUNCH_BOUND_FIXES = "compile,batch_32"


def launch_fixes(ch: Checks) -> str:
    """The variants the smoke run's top finding recommends (what `optimize` sweeps first), at most two; the H100's
    launch-bound fixes when the smoke left none. The CPU rehearsal sweeps a doubled batch (compile is CUDA-only)."""
    if ch.tiny:
        return "batch_8"
    for finding in ch.result_of("gpu_smoke").get("findings") or []:
        if finding.get("recommended_variants"):
            return ",".join(finding["recommended_variants"][:2])
    return LAUNCH_BOUND_FIXES


def cmd_sweep_fixes(ch: Checks) -> list[str]:
    """Baseline vs the diagnosis' fixes, one child each (their block paired), 30 steps of which 10 warm up (the
    compile child's first steps compile); enough images for batch_32 to run every step."""
    command = _sweep_cmd(ch, launch_fixes(ch), "gpu_sweep_fixes", 10)
    sizes = (("--images", "64"),) if ch.tiny else (("--repeats", "1"), ("--max-steps", "30"), ("--images", "960"))
    for flag, value in sizes:
        command[command.index(flag) + 1] = value
    return command


def cmd_sweep_devices(ch: Checks) -> list[str]:
    """`sweep --devices` on the machine's one GPU: the lane path (a worker process per device, paired blocks).
    More than one GPU, and more than one machine, stay unverified here."""
    command = _sweep_cmd(ch, "cudnn_benchmark", "gpu_sweep_devices", 5)
    if not ch.tiny:
        for flag, value in (("--imgsz", "320"), ("--max-steps", "25"), ("--images", "400")):
            command[command.index(flag) + 1] = value
    return [*command, "--devices", ch.device]


def judge_sweep(name: str) -> Callable[[Checks, StepRun, str], None]:
    def judge(ch: Checks, run: StepRun, output: str) -> None:
        path = ch.work / f"{name}.json"
        run.result = json.loads(path.read_text()) if path.exists() else {}
        failed, total = run.result.get("failed_children"), run.result.get("total_children")
        if run.rc == 0 and run.result.get("status") == "ran":
            run.status = "passed" if failed == 0 else "failed"
            best = f"{run.result.get('best')}: {run.result.get('best_evidence')}"
            run.note = f"{total} children, {failed} failed; best {best}"
        else:
            run.status = "failed"
            run.note = f"exit {run.rc}: {last_line(output)}"

    return judge
