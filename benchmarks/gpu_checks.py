"""Driver of `benchmarks/run_gpu_checks.sh`: every GPU check, in priority order, within one time budget.

Each step runs as a child process with its own time limit: what is left of the budget, less what the later
priority steps reserve, but never less than the step's own need (later steps give way to earlier ones, not the
other way round), capped on a GPU by the step's own maximum (a CPU rehearsal has only the budget; a dry run,
which measures nothing, only a hang guard per child, since a busy machine is slower, not broken). A step starts
only with its need left. After every step OUT/summary.json and OUT/summary.md are rewritten, so a run cut short
still leaves every finished step's results.

Every child runs in a scratch folder outside the repository: `python -m ...` puts its working directory first
on sys.path, and in the repository root that is the source tree's `yolo_mlops` (no `yolo_mlops.flows`), not the
installed one. pytest runs through benchmarks/gpu_pytest.py, which says which tree it imports and refuses any
other than the install.

Files under OUT (five; the GPU machine returns at most eight, two folders deep):
  summary.json       every measured value and check, per step, with the host's versions
  summary.md         the same, short, for a person (printed at the end too)
  checks.log         every step's output (progress bars dropped), in step order
  key_averages.txt   the smoke run's key_averages tables
  trace/<name>.pt.trace.json.gz   the smoke run's Chrome trace (opens in Perfetto, TensorBoard and HTA)

Modes:
  (default)          a run on the GPU `--device` (default 0)
  --dry-run          the environment step, then each later step's command checked without running it
                     (argument parsing, imports, run config, sweep plan); stops before the first CUDA step
  --rehearse-on-cpu  every step on the CPU at tiny sizes: proves the plumbing, measures nothing about GPUs
                     (CUDA checks are recorded as not applicable, never as passed)

    python3 benchmarks/gpu_checks.py --out OUT [--budget-s 410] [--dry-run | --rehearse-on-cpu] [--only a,b]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "benchmarks"
FIXTURE_TRACES = (ROOT / "tests" / "fixtures" / "gpu_traces",)  # real GPU traces (HTA test data, see its README)
OVERHEAD_GOAL = 1.03
STEP_LOG_CAP = 2 * 2**20  # bytes of one step's output kept in checks.log (head and tail)
TRACE_CAP = 15 * 2**20  # the GPU machine returns files up to 16 MiB
# A dry run's children (installs, imports, plans) take about 5-20 s each on an idle 2-core machine and were seen
# at 17x that on a loaded one: the limit only catches a child that hangs, never one that is slow.
DRY_RUN_HANG_S = 1800.0

# Modules the steps import; the environment step imports each once, so a missing wheel shows up first.
CHECKED_IMPORTS = (
    "torch",
    "torchvision",
    "pynvml",
    "ultralytics",
    "mlflow",
    "prefect",
    "pydantic",
    "msgspec",
    "ijson",
    "sqlalchemy",
    "alembic",
    "yolo_mlops.run.pipeline",
    "yolo_mlops.flows.profile_training",
    "yolo_mlops.flows.sweep",
    "yolo_mlops.analysis",
    "yolo_mlops.nvml.real",
    "yolo_mlops.cli",
)
# Versions recorded from the host (most come with the GPU machine, the rest from the carried wheelhouse).
RECORDED_VERSIONS = (
    "torch",
    "torchvision",
    "triton",
    "numpy",
    "pandas",
    "scipy",
    "matplotlib",
    "pillow",
    "opencv-python-headless",
    "nvidia-ml-py",
    "pyarrow",
    "typing-extensions",
    "anyio",
    "httpx",
    "click",
    "typer",
    "rich",
    "pyyaml",
    "requests",
    "pytest",
    "pytest-timeout",
    "setuptools",
    "pip",
    "ultralytics",
    "mlflow-skinny",
    "prefect",
    "pydantic",
    "pydantic-core",
    "sqlalchemy",
    "alembic",
    "fastapi",
    "starlette",
    "uvicorn",
    "msgspec",
    "ijson",
    "polars",
)


@dataclass
class StepRun:
    name: str
    # passed | failed | goal-missed | timeout | skipped | error | validated (dry run) | ran (CPU rehearsal) | not-run
    status: str = "not-run"
    seconds: float | None = None
    timeout_s: float | None = None
    rc: int | None = None
    note: str = ""
    command: list[str] = field(default_factory=list)
    result: dict = field(default_factory=dict)


@dataclass
class Step:
    name: str
    cuda: bool  # needs the GPU: the dry run stops before the first such step
    max_s: float  # the step's own time cap on a GPU
    # what the step needs on the GPU machine (the H100 run's time, with a margin): it starts only with this much
    # of the budget left, and later steps' reserves never cut its limit below it
    need_s: float
    reserve_s: float  # kept free for this step while earlier steps run; 0: it runs only as time allows
    command: Callable[[Checks], list[str] | str]  # a str is a reason to skip the step
    judge: Callable[[Checks, StepRun, str], None]  # fills status/result from the exit code and output
    dry: Callable[[Checks], list[str] | None] | None = None  # command that validates the step without CUDA


# ---------------------------------------------------------------------------------------------------------
# The run
# ---------------------------------------------------------------------------------------------------------


class Checks:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.out: Path = args.out.resolve()  # the children run elsewhere (self.cwd): they get absolute paths
        self.out.mkdir(parents=True, exist_ok=True)
        self.work = Path(tempfile.mkdtemp(prefix="gpu-checks-")).resolve()  # MLflow store, data, results: not in OUT
        self.cwd = self.work / "cwd"  # every child's working directory: outside the repository (module docstring)
        self.cwd.mkdir()
        self.py = sys.executable
        self.mode = "dry-run" if args.dry_run else "cpu-rehearsal" if args.rehearse_on_cpu else "gpu"
        self.device = "cpu" if args.rehearse_on_cpu else args.device
        self.t0 = time.monotonic()
        self.started = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
        self.runs: list[StepRun] = []
        self.host: dict = {}
        self.log = self.out / "checks.log"
        self.log.write_text("")
        self.env = {
            **os.environ,
            "YOLO_MLOPS_HOME": str(self.work / "home"),
            "MLFLOW_TRACKING_URI": f"sqlite:///{self.work / 'home' / 'mlflow.db'}",
            "YOLO_OFFLINE": "1",
            "PREFECT_HOME": str(self.work / "prefect"),
            "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
            "PYTHONUNBUFFERED": "1",
            "MPLBACKEND": "Agg",
        }
        self.env.pop("PREFECT_API_URL", None)  # a throwaway Prefect server, never someone's real one

    def left(self) -> float:
        return self.args.budget_s - (time.monotonic() - self.t0)

    def result_of(self, name: str) -> dict:
        return next((r.result for r in self.runs if r.name == name), {})

    # -- one step -------------------------------------------------------------------------------------------
    def run_step(self, step: Step, reserve_after: float) -> StepRun:
        run = StepRun(step.name)
        self.runs.append(run)
        command = step.command(self)
        if isinstance(command, str):
            run.status, run.note = "skipped", command
            return run
        run.command = [_short(c) for c in command]
        # a step's maximum sizes it for the GPU machine's time budget; a CPU rehearsal runs on whatever machine it
        # is given, so there only the whole budget bounds it, and a dry run measures nothing, so there only the
        # hang guard does (a busy machine is slower, not broken)
        if self.mode == "dry-run":
            run.timeout_s = round(DRY_RUN_HANG_S)
            rc, seconds, output = self._spawn(step.name, command, DRY_RUN_HANG_S)
            return self._judged(step, run, rc, seconds, output, DRY_RUN_HANG_S)
        cap = step.max_s if self.mode == "gpu" else self.left()
        # the later steps' reserves shorten a step's limit down to its own need, never below: an earlier step
        # matters more (run2 of the first H100 run: an environment step cut to 19 s by reserves, killed at 19.1 s)
        limit = min(cap, self.left(), max(self.left() - reserve_after, min(step.need_s, cap)))
        if self.left() < step.need_s or limit < 5:
            run.status = "skipped"
            run.note = f"no time left ({self.left():.0f} s of the budget; it needs {step.need_s:.0f} s)"
            return run
        run.timeout_s = round(limit)
        rc, seconds, output = self._spawn(step.name, command, limit)
        return self._judged(step, run, rc, seconds, output, limit)

    def _judged(self, step: Step, run: StepRun, rc: int | None, seconds: float, output: str, limit: float) -> StepRun:
        run.rc, run.seconds = rc, round(seconds, 1)
        if rc is None:
            run.status, run.note = "timeout", f"stopped after {limit:.0f} s"
        try:
            step.judge(self, run, output)
        except Exception as exc:  # noqa: BLE001 - a judge bug must not lose the other steps
            run.status, run.note = "error", f"judging the output failed: {type(exc).__name__}: {exc}"
        if rc is None:
            run.status = "timeout"
        return run

    def validate_step(self, step: Step) -> StepRun:
        """Dry run: the step's command is built and checked (argument parsing, imports), not run."""
        run = StepRun(step.name)
        self.runs.append(run)
        command = step.command(self)
        notes = []
        if isinstance(command, str):
            notes.append(f"would be skipped here: {command}")
        else:
            run.command = [_short(c) for c in command]
            parsed = _parse_with_script_parser(command)
            if parsed is not None:
                if parsed:
                    run.status, run.note = "failed", f"the script refuses the step's arguments: {parsed}"
                    return run
                notes.append("arguments parse")
        check = step.dry(self) if step.dry else None
        if check is None:
            run.status = "validated" if notes else "not-run"
            run.note = "; ".join(notes) or "nothing to check without running it"
            return run
        rc, seconds, output = self._spawn(f"{step.name} (dry run)", check, DRY_RUN_HANG_S)
        run.rc, run.seconds = rc, round(seconds, 1)
        passed = command if isinstance(command, list) and "--help" in check else []
        missing = [a for a in passed if a.startswith("--") and a not in output]
        if rc == 0 and not missing:
            run.status = "validated"
            notes.append("--help offers every option passed" if "--help" in check else _last_line(output))
            run.note = "; ".join(notes)
        else:
            run.status = "failed"
            run.note = (
                f"options not offered by the script: {missing}"
                if missing
                else f"dry-run check exited {rc}: {_last_line(output)}"
            )
        return run

    def _spawn(self, label: str, command: list[str], limit: float) -> tuple[int | None, float, str]:
        t = time.monotonic()
        with tempfile.TemporaryFile("w+b") as buf:
            proc = subprocess.Popen(
                command,
                cwd=self.cwd,
                env=self.env,
                stdout=buf,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
            try:
                rc: int | None = proc.wait(timeout=limit)
            except subprocess.TimeoutExpired:
                _kill_group(proc)
                rc = None
            seconds = time.monotonic() - t
            buf.seek(0)
            output = _clean(buf.read().decode("utf-8", "replace"))
        with self.log.open("a") as log:
            log.write(f"\n===== {label}: {' '.join(_short(c) for c in command)}\n")
            log.write(_capped(output, STEP_LOG_CAP))
            log.write(f"\n===== {label}: exit {rc if rc is not None else 'timeout'} after {seconds:.1f} s\n")
        return rc, seconds, output

    # -- reporting ------------------------------------------------------------------------------------------
    def summary(self) -> dict:
        smoke = self.result_of("gpu_smoke")
        return {
            "mode": self.mode,
            "verified_on_gpu": self.mode == "gpu" and smoke.get("status") == "passed",
            "device_arg": self.device,
            "started_utc": self.started,
            "elapsed_s": round(time.monotonic() - self.t0, 1),
            "budget_s": self.args.budget_s,
            "stopped_before": next((s.name for s in STEPS if s.cuda), None) if self.mode == "dry-run" else None,
            "install": _install_info(),
            "host": self.host,
            "steps": [asdict(r) for r in self.runs],
        }

    def write(self) -> None:
        data = self.summary()
        _atomic(self.out / "summary.json", json.dumps(data, indent=2, default=str))
        _atomic(self.out / "summary.md", markdown(data))


# ---------------------------------------------------------------------------------------------------------
# Steps
# ---------------------------------------------------------------------------------------------------------


def _tiny(ch: Checks) -> bool:
    return ch.mode == "cpu-rehearsal"


def cmd_env(ch: Checks) -> list[str]:
    return [ch.py, str(Path(__file__)), "--env-report", str(ch.work / "env.json")]


def judge_env(ch: Checks, run: StepRun, output: str) -> None:
    path = ch.work / "env.json"
    ch.host = json.loads(path.read_text()) if path.exists() else {}
    failed = [m for m, r in ch.host.get("imports", {}).items() if not r.get("ok")]
    run.result = {"failed_imports": failed, "requirement_conflicts": ch.host.get("requirement_conflicts", [])}
    run.status = "passed" if run.rc == 0 and not failed else "failed"
    torch = ch.host.get("versions", {}).get("torch")
    run.note = f"imports failed: {failed}" if failed else f"python {ch.host.get('python')}, torch {torch}"


def cmd_smoke(ch: Checks) -> list[str]:
    size = (
        ["--imgsz", "64", "--batch", "4", "--steps", "16", "--workers", "0"]
        if _tiny(ch)
        else ["--imgsz", "640", "--batch", "16", "--steps", "30", "--workers", "4"]
    )
    return [
        ch.py,
        str(BENCH / "gpu_smoke.py"),
        *size,
        "--device",
        ch.device,
        "--result",
        str(ch.work / "smoke.json"),
        "--copy-trace",
        str(ch.out / "trace"),
        "--tables",
        str(ch.out / "key_averages.txt"),
    ]


def cmd_ddp(ch: Checks) -> list[str]:
    """The smoke run as a one-rank data-parallel job: NCCL on the GPU (gloo in the CPU rehearsal)."""
    command = cmd_smoke(ch)
    command[command.index("--result") + 1] = str(ch.work / "ddp.json")
    command[command.index("--copy-trace") + 1] = str(ch.out / "trace-ddp")
    command[command.index("--tables") + 1] = str(ch.out / "key_averages_ddp.txt")
    return [*command, "--ddp-backend", "gloo" if _tiny(ch) else "nccl"]


def judge_ddp(ch: Checks, run: StepRun, output: str) -> None:
    judge_smoke(ch, run, output, "ddp.json")


def judge_smoke(ch: Checks, run: StepRun, output: str, result_file: str = "smoke.json") -> None:
    path = ch.work / result_file
    run.result = json.loads(path.read_text()) if path.exists() else {}
    trace = run.result.get("trace_file")
    if trace and Path(trace).stat().st_size > TRACE_CAP:
        mib = Path(trace).stat().st_size / 2**20
        run.result["trace_note"] = f"trace is {mib:.1f} MiB: too large to come back; removed from OUT"
        Path(trace).unlink()
    status = run.result.get("status")
    run.status = status if status in ("passed", "failed") else "error"
    failed = [c["name"] for c in run.result.get("checks", []) if c["ok"] is False]
    run.note = (
        f"failed checks: {failed}"
        if failed
        else (
            f"{status or 'no result'}; nvml backend {run.result.get('nvml_backend')}"
            if run.result
            else f"no result written (exit {run.rc}): {_last_line(output)}"
        )
    )


def _pytest(ch: Checks, *args: str) -> list[str]:
    """pytest of the installed tree (benchmarks/gpu_pytest.py), tests named by absolute path."""
    return [ch.py, str(BENCH / "gpu_pytest.py"), *args]


def cmd_nvml_tests(ch: Checks) -> list[str]:
    return _pytest(ch, str(ROOT / "tests" / "nvml"), "-q")


# The diagnosis tests that only a GPU can run: a planted `.item()` every step must be the sync finding, and
# the CUDA allocator snapshot must cover the profiled window (their CPU siblings in the files run too).
DIAGNOSIS_GPU_TESTS = (
    "tests/analysis/test_planted_bottlenecks.py::test_sync_every_step_is_the_sync_finding",
    "tests/analysis/test_cuda_memory_snapshot.py",
)


def cmd_diagnosis_tests(ch: Checks) -> list[str]:
    return _pytest(ch, *(str(ROOT / t) for t in DIAGNOSIS_GPU_TESTS), "-q", "-s")


_TESTED_TREE = re.compile(r"^gpu_pytest: yolo_mlops from (\S+), yolo_mlops\.flows from (\S+)$", re.MULTILINE)


def judge_pytest(ch: Checks, run: StepRun, output: str) -> None:
    counts = {kind: int(n) for n, kind in re.findall(r"(\d+) (passed|failed|errors?|skipped)", _last_line(output, 3))}
    tree = _TESTED_TREE.search(output)
    run.result = {
        "counts": counts,
        "yolo_mlops_from": tree.group(1) if tree else None,
        "tail": output.strip().splitlines()[-15:],
    }
    run.status = "passed" if run.rc == 0 and counts.get("passed") else "failed"
    run.note = ", ".join(f"{n} {k}" for k, n in counts.items()) or _last_line(output)


OVERHEAD_PAIRS = 4  # interleaved plain/instrumented pairs on the GPU (2 of 3 fitted the first H100 run's 118 s)


def cmd_overhead(ch: Checks) -> list[str]:
    size = (
        ["--imgsz", "64", "--batch", "4", "--workers", "0", "--repeats", "1", "--steps", "12"]
        if _tiny(ch)
        else ["--imgsz", "640", "--batch", "16", "--workers", "4", "--repeats", str(OVERHEAD_PAIRS), "--steps", "40"]
    )
    return [ch.py, str(BENCH / "bench_instrumentation_overhead.py"), "--device", ch.device, *size]


def judge_overhead(ch: Checks, run: StepRun, output: str) -> None:
    repeats = [
        {"repeat": int(r), "mode": m, "median_ms": float(ms), "steps": int(n)}
        for r, m, ms, n in re.findall(r"repeat (\d+) (\w+)\s+median step\s+([\d.]+) ms over (\d+) steps", output)
    ]
    found = re.search(r"ratio instrumented/plain: ([\d.]+) \(per-repeat ratios ([^)]*)\)", output)
    run.result = {"repeats": repeats, "goal": OVERHEAD_GOAL}
    if run.rc != 0 or not found:
        run.status, run.note = "failed", f"no ratio (exit {run.rc}): {_last_line(output)}"
        partial = _pairs_ratio(repeats)
        if partial is not None:  # cut short: what the finished pairs say, not judged against the goal
            run.result["partial"] = partial
            run.note = (
                f"cut after {partial['pairs']} pair(s): instrumented/plain {partial['ratio']:.4f} over them "
                f"(per pair {partial['per_pair']}), not judged; exit {run.rc}"
            )
        return
    ratio = float(found.group(1))
    run.result.update(ratio=ratio, per_repeat=[float(x) for x in found.group(2).split(",") if x.strip()])
    if _tiny(ch):
        run.status = "ran"
        run.note = f"instrumented/plain step time {ratio:.4f} on the CPU at tiny size: not judged against the GPU goal"
        return
    run.status = "passed" if ratio <= OVERHEAD_GOAL else "goal-missed"
    run.note = f"instrumented/plain step time {ratio:.4f} (goal <= {OVERHEAD_GOAL})"


def _pairs_ratio(repeats: list[dict]) -> dict | None:
    """The benchmark's ratio (median instrumented / median plain step) over the pairs that finished both arms."""
    by_repeat: dict[int, dict[str, float]] = {}
    for row in repeats:
        by_repeat.setdefault(row["repeat"], {})[row["mode"]] = row["median_ms"]
    pairs = [arms for _, arms in sorted(by_repeat.items()) if {"plain", "instrumented"} <= arms.keys()]
    if not pairs:
        return None
    plain = statistics.median(a["plain"] for a in pairs)
    instrumented = statistics.median(a["instrumented"] for a in pairs)
    return {
        "pairs": len(pairs),
        "ratio": round(instrumented / plain, 4),
        "per_pair": [round(a["instrumented"] / a["plain"], 3) for a in pairs],
    }


def cmd_memory_by_holder(ch: Checks) -> list[str]:
    size = ["--imgsz", "64", "--batch", "4"] if _tiny(ch) else ["--imgsz", "640", "--batch", "16"]
    return [
        ch.py,
        str(BENCH / "bench_memory_by_holder.py"),
        "--device",
        ch.device,
        "--models",
        "yolo11n",
        "--repeats",
        "1",
        *size,
        "--result",
        str(ch.work / "memory_by_holder.json"),
    ]


def judge_memory_by_holder(ch: Checks, run: StepRun, output: str) -> None:
    """Peak memory of the training device split by holder (torch's memory profiler, with_stack on)."""
    path = ch.work / "memory_by_holder.json"
    arms: dict[str, dict[str, Any]] = json.loads(path.read_text()) if path.exists() else {}
    arm = next(iter(arms.values()), {})
    split = arm.get("last", {})
    run.result = {"split_s": arm.get("split_s_median"), "window_s": arm.get("window_s_median"), "split": split}
    want = "cpu" if ch.device == "cpu" else f"cuda:{ch.device.removeprefix('cuda:')}"
    if run.rc != 0 or not split:
        run.status, run.note = "failed", f"no split (exit {run.rc}): {_last_line(output)}"
        return
    held = {k.removeprefix("memory/peak_").removesuffix("_mib"): v for k, v in split.items() if k.startswith("memory/")}
    ok = split.get("device") == want and held.get("parameter", 0) > 0 and held.get("total", 0) > 0
    run.status = ("ran" if _tiny(ch) else "passed") if ok else "failed"
    run.note = (
        f"{split.get('device')} peak MiB "
        + ", ".join(f"{k} {v}" for k, v in held.items())
        + f"; split took {arm.get('split_s_median', float('nan')):.2f} s"
    )


def _sweep_cmd(ch: Checks, variants: str, name: str, warmup: int) -> list[str]:
    if _tiny(ch):
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
    variants = "workers_2" if _tiny(ch) else "amp_bf16,cudnn_benchmark,channels_last,channels_first"
    return _sweep_cmd(ch, variants, "gpu_sweep", 10)


# What the diagnosis of the smoke run named on the first H100 run: "launch-bound -> compile, batch_32"
LAUNCH_BOUND_FIXES = "compile,batch_32"


def launch_fixes(ch: Checks) -> str:
    """The variants the smoke run's top finding recommends (what `optimize` sweeps first), at most two; the H100's
    launch-bound fixes when the smoke left none. The CPU rehearsal sweeps a doubled batch (compile is CUDA-only)."""
    if _tiny(ch):
        return "batch_8"
    for finding in ch.result_of("gpu_smoke").get("findings") or []:
        if finding.get("recommended_variants"):
            return ",".join(finding["recommended_variants"][:2])
    return LAUNCH_BOUND_FIXES


def cmd_sweep_fixes(ch: Checks) -> list[str]:
    """Baseline vs the diagnosis' fixes, one child each (their block paired), 30 steps of which 10 warm up (the
    compile child's first steps compile); enough images for batch_32 to run every step."""
    command = _sweep_cmd(ch, launch_fixes(ch), "gpu_sweep_fixes", 10)
    sizes = (("--images", "64"),) if _tiny(ch) else (("--repeats", "1"), ("--max-steps", "30"), ("--images", "960"))
    for flag, value in sizes:
        command[command.index(flag) + 1] = value
    return command


def cmd_sweep_devices(ch: Checks) -> list[str]:
    """`sweep --devices` on the machine's one GPU: the lane path (a worker process per device, paired blocks).
    More than one GPU, and more than one machine, stay unverified here."""
    command = _sweep_cmd(ch, "cudnn_benchmark", "gpu_sweep_devices", 5)
    if not _tiny(ch):
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
            run.note = f"exit {run.rc}: {_last_line(output)}"

    return judge


def _gpu_trace(ch: Checks) -> Path | None:
    """The smoke run's trace: the copy under OUT, else (too large to come back) the run folder's own."""
    smoke = ch.result_of("gpu_smoke")
    for key in ("trace_file", "trace_source"):
        if smoke.get(key) and Path(smoke[key]).exists():
            return Path(smoke[key])
    return None


def cmd_trace_analysis(ch: Checks) -> list[str] | str:
    trace = _gpu_trace(ch)
    if trace is None:
        return "the smoke step left no trace to analyze"
    return [ch.py, "-m", "yolo_mlops.cli", "analyze", str(trace), "--format", "json"]


def judge_trace_analysis(ch: Checks, run: StepRun, output: str) -> None:
    start = output.find("{")
    report = json.JSONDecoder().raw_decode(output[start:])[0] if run.rc == 0 and start >= 0 else {}
    ranks = report.get("ranks") or [{}]
    gpu = ranks[0].get("gpu") or {}
    run.result = {
        "whole_process_s": run.seconds,
        "hta": "not carried to the GPU machine (size); no HTA comparison",
        "device_name": ranks[0].get("device_name"),
        "event_count": ranks[0].get("event_count"),
        "gpu": gpu,
        "kernel_types": ranks[0].get("kernel_types"),
        "step_time": ranks[0].get("step_time"),
        "top_kernels": (ranks[0].get("top_kernels") or [])[:5],
        "idle_breakdown": ranks[0].get("idle_breakdown"),
    }
    cuda = ch.device != "cpu"
    kernels = gpu.get("kernel_count") or 0
    if run.rc != 0 or not report:
        run.status, run.note = "failed", f"analyze exited {run.rc}: {_last_line(output)}"
    elif cuda and kernels == 0:
        run.status, run.note = "failed", "the analyzer found no GPU kernels in a CUDA trace"
    else:
        run.status = "passed"
        idle = gpu.get("idle_pct", float("nan"))
        run.note = (
            f"{kernels} kernels, GPU idle {idle:.1f}%, {run.seconds} s whole process"
            if gpu
            else f"no GPU section (device {ch.device}); {run.seconds} s"
        )


def dry_script(script: str, *extra: str) -> Callable[[Checks], list[str]]:
    """Dry-run check: the step's own command with --dry-run (imports, config, plan; no CUDA call)."""

    def build(ch: Checks) -> list[str]:
        command = next(s for s in STEPS if s.name == script).command(ch)
        assert isinstance(command, list)
        return [*command, "--dry-run", *extra]

    return build


def dry_help(step_name: str) -> Callable[[Checks], list[str]]:
    """Dry-run check for a script without a dry-run mode: --help must offer every option the step passes."""

    def build(ch: Checks) -> list[str]:
        command = next(s for s in STEPS if s.name == step_name).command(ch)
        assert isinstance(command, list)
        return [*command[:2], "--help"]

    return build


def dry_trace_analysis(ch: Checks) -> list[str]:
    fixtures = [p for d in FIXTURE_TRACES if d.is_dir() for p in sorted(d.glob("*.json.gz"))]
    if fixtures:  # a real GPU trace from elsewhere: the same command, on a file that exists already
        smallest = min(fixtures, key=lambda p: p.stat().st_size)
        return [ch.py, "-m", "yolo_mlops.cli", "analyze", str(smallest), "--format", "json"]
    return [ch.py, "-m", "yolo_mlops.cli", "analyze", "--help"]


# Priority order. The H100 run of 2026-12-06 (docs/gpu.md) measured: install 6 s, environment 19-21 s,
# gpu_smoke 47 s, trace_analysis 0.7 s, gpu_ddp 54 s, nvml_tests 14 s, diagnosis_tests 34 s, and 4 overhead
# children in 118 s, not 5 (at most 59 s a pair); the fixes' sweep is not yet measured (its compile child
# compiles YOLO11n first). The steps with a reserve are the ones that must finish within the 420 s of
# run_gpu_checks.sh; the others run as time allows (`--only` runs them on their own).
STEPS: list[Step] = [
    Step("environment", False, 60, 30, 30, cmd_env, judge_env),
    Step("gpu_smoke", True, 100, 55, 55, cmd_smoke, judge_smoke, dry_script("gpu_smoke")),
    Step("trace_analysis", False, 30, 5, 5, cmd_trace_analysis, judge_trace_analysis, dry_trace_analysis),
    Step("gpu_ddp", True, 100, 60, 60, cmd_ddp, judge_ddp, dry_script("gpu_ddp")),
    Step(
        "instrumentation_overhead",
        True,
        220,
        140,
        140,
        cmd_overhead,
        judge_overhead,
        dry_help("instrumentation_overhead"),
    ),
    Step(
        "gpu_sweep_fixes",
        True,
        200,
        110,
        110,
        cmd_sweep_fixes,
        judge_sweep("gpu_sweep_fixes"),
        dry_script("gpu_sweep_fixes"),
    ),
    # as time allows
    Step(
        "nvml_tests", True, 60, 20, 0, cmd_nvml_tests, judge_pytest, lambda ch: [*cmd_nvml_tests(ch), "--collect-only"]
    ),
    Step(
        "diagnosis_tests",
        True,
        90,
        40,
        0,
        cmd_diagnosis_tests,
        judge_pytest,
        lambda ch: [*cmd_diagnosis_tests(ch), "--collect-only"],
    ),
    Step(
        "memory_by_holder", True, 60, 25, 0, cmd_memory_by_holder, judge_memory_by_holder, dry_help("memory_by_holder")
    ),
    Step("gpu_sweep", True, 200, 150, 0, cmd_sweep, judge_sweep("gpu_sweep"), dry_script("gpu_sweep")),
    Step(
        "gpu_sweep_devices",
        True,
        150,
        90,
        0,
        cmd_sweep_devices,
        judge_sweep("gpu_sweep_devices"),
        dry_script("gpu_sweep_devices"),
    ),
]


# ---------------------------------------------------------------------------------------------------------
# The environment report (run as a child: `gpu_checks.py --env-report PATH`)
# ---------------------------------------------------------------------------------------------------------


def env_report(path: Path) -> int:
    import importlib
    import platform
    from importlib import metadata

    report: dict = {
        "python": platform.python_version(),
        "executable": sys.executable,
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "pythonpath": os.environ.get("PYTHONPATH", ""),
        "versions": {},
        "imports": {},
    }
    for name in RECORDED_VERSIONS:
        try:
            report["versions"][name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            report["versions"][name] = None
    report["nvidia_smi"] = _nvidia_smi()
    for module in CHECKED_IMPORTS:
        t = time.perf_counter()
        try:
            importlib.import_module(module)
            report["imports"][module] = {"ok": True, "s": round(time.perf_counter() - t, 2)}
        except Exception as exc:  # noqa: BLE001 - recorded: this is what the step reports
            report["imports"][module] = {"ok": False, "error": f"{type(exc).__name__}: {exc}"[:500]}
    package = sys.modules.get("yolo_mlops")
    report["yolo_mlops_from"] = str(Path(package.__file__).parent) if package and package.__file__ else None
    target = os.environ.get("GPU_CHECKS_TARGET")
    report["requirement_conflicts"], report["requirements_missing"] = _requirements(target) if target else ([], [])
    if "torch" in sys.modules:
        torch = sys.modules["torch"]
        report["torch_cuda_build"] = torch.version.cuda
        report["cudnn"] = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    path.write_text(json.dumps(report, indent=2, default=str))
    failed = [m for m, r in report["imports"].items() if not r["ok"]]
    for module in failed:
        print(f"import {module} failed: {report['imports'][module]['error']}")
    print(
        f"python {report['python']}; {len(CHECKED_IMPORTS) - len(failed)}/{len(CHECKED_IMPORTS)} imports ok; "
        f"{len(report['requirement_conflicts'])} version conflicts with the host"
    )
    return 1 if failed else 0


def _nvidia_smi() -> dict | None:
    if shutil.which("nvidia-smi") is None:
        return None
    fields = "name,driver_version,memory.total,compute_cap,clocks.max.sm,power.limit,pci.bus_id"
    try:
        out = subprocess.run(
            ["nvidia-smi", f"--query-gpu={fields}", "--format=csv,noheader"], capture_output=True, text=True, timeout=30
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"error": str(exc)}
    names = fields.split(",")
    rows = [dict(zip(names, (v.strip() for v in line.split(",")), strict=False)) for line in out.stdout.splitlines()]
    return {"gpus": rows, "rc": out.returncode, "stderr": out.stderr.strip()[-500:]}


def _requirements(target: str) -> tuple[list[str], list[str]]:
    """Requirements of the carried distributions that the host does not meet (wrong version / absent)."""
    from importlib import metadata

    from packaging.requirements import Requirement

    conflicts, missing = [], []
    for dist in metadata.distributions(path=[target]):
        for text in dist.requires or []:
            req = Requirement(text)
            if req.marker is not None and not req.marker.evaluate({"extra": ""}):
                continue
            try:
                version = metadata.version(req.name)
            except metadata.PackageNotFoundError:
                missing.append(f"{dist.metadata['Name']}: {text}")
                continue
            if req.specifier and not req.specifier.contains(version, prereleases=True):
                conflicts.append(f"{dist.metadata['Name']} needs {text}, host has {version}")
    return sorted(set(conflicts)), sorted(set(missing))


# ---------------------------------------------------------------------------------------------------------
# Output helpers
# ---------------------------------------------------------------------------------------------------------


def markdown(data: dict) -> str:
    host = data.get("host") or {}
    smi = (host.get("nvidia_smi") or {}).get("gpus") or [{}]
    versions = host.get("versions") or {}
    lines = [
        f"# GPU checks: {data['mode']}",
        "",
        f"device {smi[0].get('name', 'none')} (driver {smi[0].get('driver_version', '-')}), "
        f"python {host.get('python')}, torch {versions.get('torch')} (CUDA {host.get('torch_cuda_build')}), "
        f"ultralytics {versions.get('ultralytics')}, mlflow {versions.get('mlflow-skinny')}, "
        f"prefect {versions.get('prefect')}; {data['elapsed_s']} s of a {data['budget_s']} s budget",
        "",
    ]
    if data["mode"] != "gpu":
        lines += [
            "**Not a GPU measurement**: "
            + (
                f"the dry run stops before the first CUDA step ({data['stopped_before']})."
                if data["mode"] == "dry-run"
                else "a CPU rehearsal of the plumbing; no GPU figure comes from it."
            ),
            "",
        ]
    lines += ["| step | status | s | note |", "|---|---|---|---|"]
    for s in data["steps"]:
        lines.append(
            f"| {s['name']} | {s['status']} | {s['seconds'] if s['seconds'] is not None else '-'} | "
            f"{s['note'].replace('|', '/')} |"
        )
    for s in data["steps"]:
        result = s.get("result") or {}
        if s["name"] in ("gpu_smoke", "gpu_ddp") and result.get("checks"):
            lines += ["", f"## {s['name']} checks", ""]
            lines += [
                f"- {'ok' if c['ok'] else 'n/a' if c['ok'] is None else 'FAIL'} {c['name']}: {c['value']} "
                f"(expect {c['expect']})"
                for c in result["checks"]
            ]
        if s["name"].startswith("gpu_sweep") and result.get("markdown"):
            lines += ["", f"## {s['name']}", "", result["markdown"]]
        if s["name"] == "instrumentation_overhead" and result.get("partial"):
            part = result["partial"]
            lines += [
                "",
                "## instrumentation overhead (cut short)",
                "",
                f"ratio {part['ratio']:.4f} over the {part['pairs']} finished pair(s) (per pair {part['per_pair']}), "
                "not judged",
            ]
        if s["name"] == "instrumentation_overhead" and result.get("ratio") is not None:
            lines += [
                "",
                "## instrumentation overhead",
                "",
                f"ratio {result['ratio']:.4f} (per repeat {result.get('per_repeat')}), goal <= {OVERHEAD_GOAL}",
            ]
    conflicts = host.get("requirement_conflicts") or []
    if conflicts:
        lines += ["", "## version conflicts between the wheelhouse and the host", ""] + [f"- {c}" for c in conflicts]
    return "\n".join(lines) + "\n"


def _install_info() -> dict:
    return {
        k: os.environ.get(v)
        for k, v in (
            ("target", "GPU_CHECKS_TARGET"),
            ("wheels", "GPU_CHECKS_WHEELS"),
            ("seconds", "GPU_CHECKS_INSTALL_S"),
            ("note", "GPU_CHECKS_INSTALL_NOTE"),
        )
    }


_PROGRESS = re.compile(r"━|\d+(\.\d+)?it/s|\x1b\[K")


def _clean(text: str) -> str:
    """Drop progress-bar redraws: keep the last segment of a carriage-return line, skip bar lines."""
    lines = (line.rsplit("\r", 1)[-1] for line in text.splitlines())
    return "\n".join(line for line in lines if line.strip() and not _PROGRESS.search(line))


def _capped(text: str, cap: int) -> str:
    if len(text) <= cap:
        return text
    head = text[: cap // 10]
    return f"{head}\n[... {len(text) - cap} characters left out ...]\n{text[-(cap - len(head)) :]}"


def _last_line(text: str, n: int = 1) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return " / ".join(lines[-n:])[-400:] if lines else ""


def _parse_with_script_parser(command: list[str]) -> str | None:
    """For a step script with a build_parser() (ours), parse the step's arguments in this process:
    None when the script has no such parser, "" when they parse, else argparse's complaint."""
    script = Path(command[1]) if len(command) > 1 else None
    if script is None or script.suffix != ".py" or not script.exists() or "def build_parser(" not in script.read_text():
        return None
    import contextlib
    import importlib.util
    import io

    spec = importlib.util.spec_from_file_location(f"_step_{script.stem}", script)
    assert spec is not None and spec.loader is not None  # a .py file that exists (checked above)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # the step scripts import only the standard library at module level
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            module.build_parser().parse_args(command[2:])
    except SystemExit:
        return _last_line(err.getvalue()) or "argument error"
    return ""


def _short(arg: str) -> str:
    return arg.replace(str(ROOT) + "/", "")


def _kill_group(proc: subprocess.Popen) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=15)
            return
        except subprocess.TimeoutExpired:
            continue


def _atomic(path: Path, text: str) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(text)
    tmp.replace(path)


# ---------------------------------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT") or "gpu-check-output"))
    parser.add_argument("--budget-s", type=float, default=410.0, help="wall-clock budget of all steps together")
    parser.add_argument("--device", default="0", help="CUDA device index")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--dry-run", action="store_true", help="stop before the first CUDA step; check the others")
    mode.add_argument("--rehearse-on-cpu", action="store_true", help="every step on the CPU at tiny sizes")
    parser.add_argument("--only", default="", help="comma-separated step names to run (environment always runs)")
    parser.add_argument("--env-report", type=Path, help=argparse.SUPPRESS)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.env_report:
        return env_report(args.env_report)
    only = {s.strip() for s in args.only.split(",") if s.strip()}
    unknown = only - {s.name for s in STEPS}
    if unknown:
        print(f"gpu_checks: unknown step(s) {sorted(unknown)}; steps are {[s.name for s in STEPS]}")
        return 2
    ch = Checks(args)
    print(f"gpu_checks: {ch.mode}, budget {args.budget_s:.0f} s, output {ch.out}, work {ch.work}", flush=True)
    stopped = False
    for i, step in enumerate(STEPS):
        if only and step.name not in only and step.name != "environment":
            continue
        if ch.mode == "dry-run" and step.cuda and not stopped:
            stopped = True
            print(
                f"gpu_checks: dry run stops before the first CUDA step ({step.name}); "
                "checking the remaining steps' commands without running them",
                flush=True,
            )
        if stopped:
            run = ch.validate_step(step)
        else:
            # a dry run only checks the later steps' commands, so they reserve none of the budget
            later = [s for s in STEPS[i + 1 :] if not only or s.name in only]
            reserve = 0 if ch.mode == "dry-run" else sum(s.reserve_s for s in later)
            run = ch.run_step(step, reserve)
        ch.write()
        print(
            f"[{run.name}] {run.status}"
            + (f" in {run.seconds} s" if run.seconds is not None else "")
            + (f": {run.note}" if run.note else ""),
            flush=True,
        )
    ch.write()
    print()
    print((ch.out / "summary.md").read_text())
    if ch.mode == "dry-run":
        shutil.rmtree(ch.work, ignore_errors=True)
    bad = [r for r in ch.runs if r.status in ("failed", "error", "timeout")]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
