"""A deterministic Kineto-shaped trace for the golden comparison (tests/analysis/test_trace_golden.py).

Written the way torch's `export_chrome_trace` lays events out (one event per several lines) or compactly (one
event per line); ProfilerSteps with phase labels, cpu_op + cudaLaunchKernel + kernel triples (C++ kernel names
holding `{lambda()#1}, `), a memcpy, `[memory]` instant events and a negative duration. Never change what it
writes: the golden analysis JSON was produced from it.
"""

from __future__ import annotations

import json
import random

from trace_events import complete_event, memory_event

PHASES = ("data_wait", "preprocess", "forward_loss", "backward", "optimizer_step")


def trace_text(events: int, seed: int = 7, layout: str = "kineto") -> str:
    rng = random.Random(seed)
    kernels = [
        f"void at::native::elementwise_kernel<128, 2, at::native::gpu_kernel_impl<"
        f"at::native::{{lambda()#{i % 3 + 1}}}, float>(at::TensorIteratorBase&)::{{lambda(int)#1}}>(int, T{i})"
        for i in range(40)
    ] + [f"volta_sgemm_128x64_nn_{i}" for i in range(20)]
    ops = [f"aten::op{i}" for i in range(50)]
    out: list[dict] = []
    t, gpu_t, corr, step = 1.7e15, 1.7e15, 0, 0
    while len(out) < events:
        step_start = t
        for phase in PHASES:
            phase_start = t
            for _ in range(rng.randint(3, 12)):
                corr += 1
                op = {"External id": corr}
                out.append(complete_event("cpu_op", rng.choice(ops), 41, 41, t, round(rng.uniform(3, 30), 3), op))
                launch = {"External id": corr, "correlation": corr}
                out.append(complete_event("cuda_runtime", "cudaLaunchKernel", 41, 41, t + 1.25, 4.125, launch))
                gpu_t = max(gpu_t, t + rng.uniform(2, 40))
                dur = round(rng.uniform(0.5, 60), 3)
                kernel = {"stream": 7, "correlation": corr, "device": 0, "grid": [4, 1, 1], "block": [128, 1, 1]}
                out.append(complete_event("kernel", rng.choice(kernels), 0, 7, gpu_t, dur, kernel))
                if rng.random() < 0.3:
                    allocated = 2**30 + step * 2**22 + corr
                    out.append(memory_event(t + 2, allocated, 2**31, size=512, pid=41, tid=41))
                gpu_t += dur + rng.choice((0.0, 0.5, 25.0, 300.0))
                t += rng.uniform(6, 45)
            if phase == "preprocess":
                corr += 1
                out.append(complete_event("cuda_runtime", "cudaMemcpyAsync", 41, 41, t, 5.0, {"correlation": corr}))
                memcpy = {"stream": 8, "correlation": corr}
                out.append(complete_event("gpu_memcpy", "Memcpy HtoD (Pageable -> Device)", 0, 8, gpu_t, 30.0, memcpy))
                gpu_t += 30.0
                t += 10
            out.append(complete_event("user_annotation", f"yolo_mlops/{phase}", 41, 41, phase_start, t - phase_start))
            t += 3
        out.append(complete_event("user_annotation", f"ProfilerStep#{step}", 41, 41, step_start, t - step_start))
        step += 1
        t += 20
    out.append(complete_event("cpu_op", "aten::broken", 41, 42, step_start, -2.0))
    head = {
        "schemaVersion": 1,
        "distributedInfo": {"backend": "nccl", "rank": 0, "world_size": 1},
        "deviceProperties": [
            {"id": 0, "name": "Golden GPU", "totalGlobalMem": 34359738368, "computeMajor": 8, "computeMinor": 0}
        ],
    }
    lines = ["{"] + [f'  "{k}": {json.dumps(v)},' for k, v in head.items()] + ['  "traceEvents": [']
    if layout == "kineto":
        body = ",\n".join(
            "  {\n    "
            + ", ".join(f"{json.dumps(k)}: {json.dumps(v)}" for k, v in e.items() if k != "args")
            + (
                ',\n    "args": {\n      '
                + ",\n      ".join(f"{json.dumps(k)}: {json.dumps(v)}" for k, v in e["args"].items())
                + "\n    }"
                if "args" in e
                else ""
            )
            + "\n  }"
            for e in out
        )
    else:
        body = ",\n".join(json.dumps(e) for e in out)
    return "\n".join(lines) + "\n" + body + '\n  ],\n  "traceName": "golden", "displayTimeUnit": "ms"\n}\n'
