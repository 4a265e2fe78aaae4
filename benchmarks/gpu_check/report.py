"""The GPU checks' summary for a person (OUT/summary.md) and the install the run script made."""

from __future__ import annotations

import os

from .overhead import OVERHEAD_GOAL


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


def install_info() -> dict:
    return {
        k: os.environ.get(v)
        for k, v in (
            ("target", "GPU_CHECKS_TARGET"),
            ("wheels", "GPU_CHECKS_WHEELS"),
            ("seconds", "GPU_CHECKS_INSTALL_S"),
            ("note", "GPU_CHECKS_INSTALL_NOTE"),
        )
    }
