#!/usr/bin/env bash
# Every GPU check of the project in one short, prepared run (for a lent GPU machine; ~8-10 min on an H200).
# Each step prints its own results; copy them into docs/benchmarks.md and docs/gpu.md.
#   bash benchmarks/run_gpu_checks.sh [OUT_DIR]
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
out=${1:-${OUT:-gpu-check-output}}
mkdir -p "$out"
export YOLO_MLOPS_HOME="$out/home" MLFLOW_TRACKING_URI="sqlite:///$out/home/mlflow.db" YOLO_OFFLINE=1
py=${PYTHON:-.venv/bin/python}
run() {  # name, timeout seconds, command...
  local name=$1 limit=$2; shift 2
  echo "=== $name"
  timeout "$limit" "$@" 2>&1 | tee "$out/$name.log" | grep -v -E '^\s*$|it/s|━' | tail -60
  echo "=== $name exit ${PIPESTATUS[0]}"
}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$out/nvidia-smi.txt"
run gpu_smoke 240 "$py" benchmarks/gpu_smoke.py --steps 30
run nvml_tests 120 "$py" -m pytest tests/nvml -q
run instrumentation_overhead 300 "$py" benchmarks/bench_instrumentation_overhead.py --device 0 --imgsz 640 \
    --batch 16 --workers 4 --repeats 3 --steps 40
run gpu_sweep 420 "$py" benchmarks/gpu_sweep.py --repeats 2 --max-steps 40 --warmup-steps 10 \
    --variants amp_bf16,cudnn_benchmark,channels_first,workers_2
