#!/usr/bin/env bash
# The wheelhouse for benchmarks/run_gpu_checks.sh: exactly the CPython 3.12 manylinux x86_64 wheels that the
# GPU checks import and a bare GPU machine lacks (its python3 3.12 already holds torch, numpy, pandas,
# scipy, matplotlib, opencv-python-headless, nvidia-ml-py, pyarrow, pytest, requests, pyyaml, rich, click,
# anyio, httpx, jinja2 ...: see docs/gpu.md). Downloaded with pip (no dependencies resolved: the list is
# explicit and pinned to the versions the project is tested with) into gpu-wheelhouse/ (git-ignored), which
# a GPU run carries. A run can carry 64 MiB; the wheelhouse must stay under 60 MiB. Each package at the version of
# requirements/lock.txt, the set everything else is tested with; setuptools, which only builds this tree there, at
# its own pin.
#
#   bash benchmarks/gpu_wheelhouse.sh            # download, print count and total size
#   bash benchmarks/gpu_wheelhouse.sh --prove    # also: a Python 3.12 venv like the GPU machine's, then
#                                                # run_gpu_checks.sh --dry-run and --rehearse-on-cpu with it
#
# What is left out, and the evidence for each choice, is in docs/gpu.md ("Wheelhouse").
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
dest=${GPU_WHEELHOUSE:-gpu-wheelhouse}
limit_mib=60

names=(
  # the checks' own imports
  ultralytics ultralytics-thop ultralytics-platform
  msgspec ijson pydantic pydantic-core annotated-types
  typing-inspection
  # MLflow client and its SQLite store (mlflow-skinny: the full mlflow wheel adds the UI and server, 11 MiB)
  mlflow-skinny sqlalchemy greenlet alembic mako sqlparse
  cryptography cffi pycparser cachetools databricks-sdk
  importlib-metadata python-dotenv fastapi starlette uvicorn
  opentelemetry-api opentelemetry-sdk opentelemetry-proto
  opentelemetry-semantic-conventions
  # Prefect: the sweep flow, its concurrency limit and the temporary server it runs on
  prefect aiosqlite asyncpg asgi-lifespan coolname cronsim
  exceptiongroup graphviz griffe griffecli griffelib
  jinja2-humanize-extension jsonpatch jsonpointer jsonschema
  jsonschema-specifications referencing rpds-py orjson pendulum
  whenever pydantic-extra-types pydantic-settings pydocket redis
  burner-redis py-key-value-aio beartype uncalled-for python-json-logger
  python-slugify text-unidecode pytz tzdata tzlocal
  rfc3339-validator ruamel-yaml semver sniffio toml wcwidth
  websockets
)

# builds this tree on the GPU machine (pip install --no-build-isolation --target), kept off the checks' path
builder=setuptools==84.2.1
lock=$repo/requirements/lock.txt
mapfile -t wheels < <(python3 - "$lock" "${names[@]}" <<'PY'
import re, sys
def key(name):
    return re.sub(r"[-_.]+", "-", name).lower()
pins = {}
for line in open(sys.argv[1]):
    line = line.split("#", 1)[0].strip()
    if "==" in line:
        name, version = line.split("==", 1)
        pins[key(name)] = version.strip()
missing = [n for n in sys.argv[2:] if key(n) not in pins]
if missing:
    sys.exit(f"gpu_wheelhouse: not in {sys.argv[1]}: {' '.join(missing)}")
print("\n".join(f"{n}=={pins[key(n)]}" for n in sys.argv[2:]))
PY
)
((${#wheels[@]} == ${#names[@]})) || exit 1
wheels+=("$builder")

mkdir -p "$dest"
rm -f "$dest"/*.whl
pip_download=(python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12
  --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux_2_24_x86_64
  --platform manylinux_2_28_x86_64 --platform manylinux_2_5_x86_64 --platform manylinux1_x86_64 --dest "$dest")
"${pip_download[@]}" "${wheels[@]}"

count=$(find "$dest" -maxdepth 1 -name '*.whl' | wc -l)
bytes=$(find "$dest" -maxdepth 1 -name '*.whl' -printf '%s\n' | awk '{s += $1} END {print s}')
mib=$(awk -v b="$bytes" 'BEGIN {printf "%.1f", b / 1048576}')
echo "gpu_wheelhouse: $count wheels, $mib MiB in $dest (limit $limit_mib MiB; ${#wheels[@]} asked for)"
if [ "$count" -ne "${#wheels[@]}" ]; then
  echo "gpu_wheelhouse: expected ${#wheels[@]} wheels, found $count" >&2
  exit 1
fi
if awk -v m="$mib" -v l="$limit_mib" 'BEGIN {exit !(m > l)}'; then
  echo "gpu_wheelhouse: over the $limit_mib MiB limit" >&2
  exit 1
fi

[ "${1:-}" = "--prove" ] || exit 0

# --- proof on this machine: a Python 3.12 venv holding only packages the GPU machine has --------------------
py312=${PY312:-}
for candidate in "$HOME"/.pyenv/versions/3.12.*/bin/python3.12 python3.12; do
  [ -n "$py312" ] && break
  if "$candidate" -V > /dev/null 2>&1; then py312=$candidate; fi
done
[ -n "$py312" ] || { echo "gpu_wheelhouse: no working python3.12 found (set PY312)" >&2; exit 1; }
prove=${GPU_PROVE_DIR:-/tmp/yolo-mlops-gpu-prove}
venv=$prove/venv
if [ ! -x "$venv/bin/python" ]; then
  "$py312" -m venv "$venv"
  # A subset of the GPU machine's package list (docs/gpu.md), nothing else: an import that fails here for
  # want of a package the machine has would wrongly add a wheel; never the other way round.
  "$venv/bin/python" -m pip install --quiet --no-deps aiofiles aiohappyeyeballs aiohttp aiosignal \
    annotated-doc anyio attrs certifi charset-normalizer click cloudpickle colorama contourpy cycler filelock \
    fonttools frozenlist fsspec h11 httpcore httpx humanize idna iniconfig jinja2 joblib kiwisolver markdown \
    markdown-it-py markupsafe matplotlib mdurl mpmath msgpack multidict narwhals networkx numpy==2.5.2 \
    nvidia-ml-py opencv-python-headless packaging pandas pathspec pillow pluggy prometheus-client propcache \
    protobuf psutil py-cpuinfo pyarrow pygments pyparsing pytest pytest-timeout python-dateutil pyyaml regex \
    requests rich scipy setuptools shellingham six sortedcontainers sympy tabulate threadpoolctl tqdm typer \
    typing-extensions urllib3 uvloop werkzeug wheel wrapt yarl zipp
  # the machine's torch (CUDA 13 build, runs on a CPU too); its CUDA libraries (py3-none wheels) are the
  # same files the project's .venv holds, so they are linked rather than downloaded again
  "$venv/bin/python" -m pip install --quiet --no-deps --only-binary=:all: torch==2.11.0 torchvision==0.26.0
  nvidia_dir=$("$repo/.venv/bin/python" -c 'import nvidia; print(list(nvidia.__path__)[0])')
  ln -sfn "$nvidia_dir" "$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/nvidia"
fi
echo "gpu_wheelhouse: proving with $("$venv/bin/python" -V) in $venv (torch $("$venv/bin/python" -c 'import torch; print(torch.__version__)'))"
status=0
PYTHON=$venv/bin/python OUT=$prove/dry-run GPU_WHEELHOUSE=$dest bash benchmarks/run_gpu_checks.sh --dry-run \
  > "$prove/dry-run.txt" 2>&1 || status=1
tail -n 12 "$prove/dry-run.txt"
PYTHON=$venv/bin/python OUT=$prove/rehearsal GPU_WHEELHOUSE=$dest GPU_CHECKS_TOTAL_S=1500 \
  bash benchmarks/run_gpu_checks.sh --rehearse-on-cpu > "$prove/rehearsal.txt" 2>&1 || status=1
# the summary's first 30 lines, read by one process: `sed | head` would end sed with SIGPIPE (exit 141 under pipefail)
awk '/^# GPU checks/ { shown = 1 } shown && printed++ < 30' "$prove/rehearsal.txt"
echo "gpu_wheelhouse: proof outputs in $prove (dry-run/, rehearsal/, *.txt); exit $status"
exit $status
