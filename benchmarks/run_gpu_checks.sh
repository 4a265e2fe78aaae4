#!/usr/bin/env bash
# Every GPU check of the project in one prepared run on a bare GPU machine, in at most 7 minutes:
# installs the carried wheelhouse and this tree into a temporary target (no index, no network, no make), then
# runs benchmarks/gpu_checks.py under the machine's own python3 with PYTHONPATH set to that target.
# Everything measured lands under $OUT (summary.json, summary.md, checks.log, key_averages.txt, trace/).
#
#   bash benchmarks/run_gpu_checks.sh                    # the GPU run (device 0)
#   bash benchmarks/run_gpu_checks.sh --dry-run          # up to the first CUDA step (also on a CPU machine)
#   bash benchmarks/run_gpu_checks.sh --rehearse-on-cpu  # every step on the CPU at tiny sizes
#   bash benchmarks/run_gpu_checks.sh --only gpu_sweep   # any benchmarks/gpu_checks.py option passes through
#
# Environment: OUT (default gpu-check-output), PYTHON (default python3), GPU_WHEELHOUSE (default
# gpu-wheelhouse, built by benchmarks/gpu_wheelhouse.sh; without it the interpreter's own packages are used),
# GPU_CHECKS_TOTAL_S (default 420: the whole command, install included; the priority steps fit in it, the rest
# run as time allows).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
repo=$PWD
py=${PYTHON:-python3}
out=${OUT:-gpu-check-output}
wheelhouse=${GPU_WHEELHOUSE:-gpu-wheelhouse}
total=${GPU_CHECKS_TOTAL_S:-420}
mkdir -p "$out" || exit 1
work=$(mktemp -d "${TMPDIR:-/tmp}/gpu-checks-install.XXXXXX") || exit 1
trap 'rm -rf "$work"' EXIT
target=$work/target build=$work/build

shopt -s nullglob
wheels=() builders=()
for w in "$wheelhouse"/*.whl; do
  case ${w##*/} in setuptools-*) builders+=("$w") ;; *) wheels+=("$w") ;; esac
done
note="wheelhouse $wheelhouse: ${#wheels[@]} wheels"
if ((${#wheels[@]})); then
  if ! "$py" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 12))'; then
    echo "run_gpu_checks: $wheelhouse holds CPython 3.12 wheels but $py is $("$py" -V 2>&1); set GPU_WHEELHOUSE=none"
    exit 3
  fi
  if ! "$py" -m pip install --quiet --no-index --no-deps --no-compile --target "$target" "${wheels[@]}"; then
    echo "run_gpu_checks: installing $wheelhouse into $target failed (see above)"
    exit 3
  fi
else
  note="no wheels in $wheelhouse: third-party packages come from $py's own environment"
fi
if ((${#builders[@]})); then  # the wheelhouse's setuptools builds this tree (a known version), kept off the checks' path
  "$py" -m pip install --quiet --no-index --no-deps --no-compile --target "$build" "${builders[@]}" || exit 3
fi
# This tree as pip installs it (flows/ becomes yolo_mlops.flows), under the project's declared Python versions.
if ! log=$(PYTHONPATH="$build:$target" "$py" -m pip install --quiet --no-index --no-deps --no-build-isolation \
    --no-compile --target "$target" "$repo" 2>&1) || [ ! -d "$target/yolo_mlops/flows" ]; then
  echo "$log"
  echo "run_gpu_checks: installing this tree into $target failed"
  exit 3
fi
export GPU_CHECKS_TARGET=$target GPU_CHECKS_WHEELS=${#wheels[@]} GPU_CHECKS_INSTALL_S=$SECONDS \
  GPU_CHECKS_INSTALL_NOTE=$note
# gpu_site/sitecustomize.py: ultralytics' one polars call on the training path, read with pandas (polars is not carried)
export PYTHONPATH=$repo/benchmarks/gpu_site:$target
echo "run_gpu_checks: $note; this tree installed into $target in ${SECONDS} s; $("$py" -V 2>&1)"
"$py" "$repo/benchmarks/gpu_checks.py" --out "$out" --budget-s $((total - SECONDS)) "$@"
