#!/usr/bin/env bash
# Prepare a Prefect server for yolo-mlops: work pools, per-GPU concurrency limits, deployments.
#
#   PREFECT_API_URL=http://127.0.0.1:4200/api deploy/bootstrap.sh
#
# Idempotent: run it again after editing deploy/prefect.yaml, building a new image or adding GPUs;
# pools are updated in place, existing limits are reset to one slot, deployments are re-applied.
#
# Creates
#   work pool gpu-process  (type process)  flows run in a checkout on a GPU machine
#   work pool gpu-docker   (type docker)   flows run in the yolo-mlops image, GPUs via device_requests
#                                          (template: deploy/work-pools/docker-gpu.json)
#   concurrency limits gpu-0 .. gpu-<N-1>, one slot each: whoever trains on GPU i holds `gpu-<i>`
#                                          (concurrency("gpu-<i>", strict=True) in the sweep flow)
#   the deployments of deploy/prefect.yaml
#
# Environment
#   PREFECT_API_URL        the Prefect server's API (or the active Prefect profile's)
#   YOLO_MLOPS_GPU_COUNT   how many gpu-<i> limits to ensure; default: GPUs nvidia-smi lists here, or 1
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

echo "==> GPU concurrency limits gpu-0 .. gpu-$((gpu_count - 1))"
for ((i = 0; i < gpu_count; i++)); do
    # create fails when the limit exists; then reset it to one slot (a second failure stops the script)
    prefect gcl create "gpu-$i" --limit 1 2>/dev/null || prefect gcl update "gpu-$i" --limit 1
done

echo "==> deployments"
# Prefect fills `{{ $VAR }}` placeholders from the environment wherever the variable is set, deploy time
# included. The pull step's {{ $YOLO_MLOPS_PROJECT_DIR }} must reach the workers as a placeholder (each
# resolves it to its own checkout or /opt/yolo-mlops in the image), so it must be unset here.
env -u YOLO_MLOPS_PROJECT_DIR prefect deploy --all --prefect-file deploy/prefect.yaml
