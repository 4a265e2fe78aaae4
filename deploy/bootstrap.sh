#!/usr/bin/env bash
# Prepare a Prefect server for yolo-mlops: work pools, per-GPU concurrency limits, deployments.
#
#   PREFECT_API_URL=http://127.0.0.1:4200/api deploy/bootstrap.sh
#
# Run it once on every GPU machine (it creates that machine's GPU limits). Idempotent: run it again after
# editing deploy/prefect.yaml, building a new image or adding GPUs; pools are updated in place, existing
# limits are reset to one slot, deployments are re-applied.
#
# Creates
#   work pool gpu-process  (type process)  flows run in a checkout on a GPU machine
#   work pool gpu-docker   (type docker)   flows run in the yolo-mlops image, GPUs via device_requests
#                                          (template: deploy/work-pools/docker-gpu.json)
#   work queue <machine> in both pools: this machine's worker polls it (`--work-queue <machine>`), so a sweep
#                                          over a pool can send whole blocks to one machine
#   concurrency limits gpu-<machine>-0 .. gpu-<machine>-<N-1>, one slot each: whoever trains on GPU i of
#                                          this machine holds `gpu-<machine>-<i>` (strict); limits of other
#                                          machines and single-machine `gpu-<i>` limits are left alone
#   the deployments of deploy/prefect.yaml; nightly-benchmark-<machine> is this machine's nightly benchmark
#
# Environment
#   PREFECT_API_URL        the Prefect server's API (or the active Prefect profile's)
#   YOLO_MLOPS_MACHINE     this machine's name in limit names and series keys (default: the host name)
#   YOLO_MLOPS_GPU_COUNT   how many GPU limits to ensure; default: GPUs nvidia-smi lists here, or 1
#   YOLO_MLOPS_IMAGE       image for the docker pool (default yolo-mlops:latest)
#   PYTHON                 a python3 to edit the pool template JSON with (default python3)
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo_root"  # flow entrypoints in prefect.yaml are relative to the repository root
export PREFECT_CLI_PROMPT=false

image="${YOLO_MLOPS_IMAGE:-yolo-mlops:latest}"
python="${PYTHON:-python3}"

if [[ -n "${YOLO_MLOPS_GPU_COUNT:-}" ]]; then
    gpu_count="$YOLO_MLOPS_GPU_COUNT"
elif command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi --list-gpus >/dev/null 2>&1; then
    gpu_count="$(nvidia-smi --list-gpus | wc -l)"
else
    gpu_count=1
    echo "bootstrap: no nvidia-smi here; creating 1 GPU limit (set YOLO_MLOPS_GPU_COUNT for more)" >&2
fi
if ! [[ "$gpu_count" =~ ^[0-9]+$ ]]; then
    echo "bootstrap: YOLO_MLOPS_GPU_COUNT must be a whole number, got '$gpu_count'" >&2
    exit 2
fi
machine="${YOLO_MLOPS_MACHINE:-$(hostname)}"
# the rule of yolo_mlops.run.environment.check_machine_name
if ! [[ "$machine" =~ ^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$ ]]; then
    echo "bootstrap: machine name '$machine' cannot be part of a limit name: use 1-63 letters, digits, '.', '_'" \
         "or '-', starting with a letter or digit (set YOLO_MLOPS_MACHINE)" >&2
    exit 2
fi

echo "==> work pool gpu-process"
prefect work-pool create gpu-process --type process --overwrite

echo "==> work pool gpu-docker (image $image)"
template="$(mktemp)"
trap 'rm -f "$template"' EXIT
"$python" - "$repo_root/deploy/work-pools/docker-gpu.json" "$image" "$template" <<'PY'
import json, sys
source, image, target = sys.argv[1:]
template = json.load(open(source))
template["variables"]["properties"]["image"]["default"] = image
json.dump(template, open(target, "w"), indent=2)
PY
prefect work-pool create gpu-docker --type docker --base-job-template "$template" --overwrite

echo "==> work queue $machine in gpu-process and gpu-docker (a sweep over a pool sends blocks to it)"
for pool in gpu-process gpu-docker; do
    # create fails when the queue exists: nothing to update
    prefect work-queue create "$machine" --pool "$pool" >/dev/null 2>&1 \
        || prefect work-queue inspect "$machine" --pool "$pool" >/dev/null
done

echo "==> GPU concurrency limits gpu-$machine-0 .. gpu-$machine-$((gpu_count - 1))"
for ((i = 0; i < gpu_count; i++)); do
    # create fails when the limit exists; then reset it to one slot (a second failure stops the script)
    prefect gcl create "gpu-$machine-$i" --limit 1 2>/dev/null || prefect gcl update "gpu-$machine-$i" --limit 1
done

echo "==> deployments"
# Prefect fills `{{ $VAR }}` placeholders from the environment wherever the variable is set, deploy time
# included. The pull step's {{ $YOLO_MLOPS_PROJECT_DIR }} must reach the workers as a placeholder (each
# resolves it to its own checkout or /opt/yolo-mlops in the image), so it must be unset here.
# YOLO_MLOPS_MACHINE must be set: it names this machine's nightly-benchmark deployment and its work queue.
env -u YOLO_MLOPS_PROJECT_DIR YOLO_MLOPS_MACHINE="$machine" prefect deploy --all --prefect-file deploy/prefect.yaml
