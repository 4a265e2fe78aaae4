#!/usr/bin/env bash
# The wheelhouse for benchmarks/run_gpu_checks.sh: exactly the CPython 3.12 manylinux x86_64 wheels that the
# GPU checks import and a bare GPU machine lacks (its python3 3.12 already holds torch, numpy, pandas,
# scipy, matplotlib, opencv-python-headless, nvidia-ml-py, pyarrow, pytest, requests, pyyaml, rich, click,
# anyio, httpx, jinja2 ...: see docs/gpu.md). Downloaded with pip (no dependencies resolved: the list is
# explicit and pinned to the versions the project is tested with) into gpu-wheelhouse/ (git-ignored), which
# a GPU run carries. A run can carry 64 MiB; the wheelhouse must stay under 60 MiB.
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

wheels=(
  # the checks' own imports
  ultralytics==8.4.190 ultralytics-thop==2.2.3 ultralytics-platform==0.1.99
  msgspec==0.23.0 ijson==3.6.0 pydantic==2.14.4 pydantic-core==2.50.5 annotated-types==0.8.0
  typing-inspection==0.4.5
  # MLflow client and its SQLite store (mlflow-skinny: the full mlflow wheel adds the UI and server, 11 MiB)
  mlflow-skinny==3.17.2 sqlalchemy==2.1.9 greenlet==3.5.6 alembic==1.20.1 mako==1.4.3 sqlparse==0.6.1
  cryptography==50.0.2 cffi==2.1.1 pycparser==3.12 cachetools==7.3.3 databricks-sdk==0.167.0
  importlib-metadata==9.1.0 python-dotenv==1.2.4 fastapi==0.150.0 starlette==1.10.0 uvicorn==0.55.0
  opentelemetry-api==1.45.2 opentelemetry-sdk==1.45.2 opentelemetry-proto==1.45.2
  opentelemetry-semantic-conventions==0.66b2
  # Prefect: the sweep flow, its concurrency limit and the temporary server it runs on
  prefect==3.9.1 aiosqlite==0.22.1 asyncpg==0.32.0 asgi-lifespan==2.1.0 coolname==5.0.0 cronsim==2.8
  exceptiongroup==1.3.2 graphviz==0.21 griffe==2.4.1 griffecli==2.4.1 griffelib==2.4.1
  jinja2-humanize-extension==0.4.0 jsonpatch==1.48 jsonpointer==3.12 jsonschema==4.26.0
  jsonschema-specifications==2025.9.1 referencing==0.37.0 rpds-py==2026.9.1 orjson==3.13.0 pendulum==3.3.0
  whenever==0.11.0 pydantic-extra-types==2.11.1 pydantic-settings==2.16.3 pydocket==0.27.2 redis==8.1.0
  burner-redis==0.1.7 py-key-value-aio==0.5.0 beartype==0.23.1 uncalled-for==0.6.2 python-json-logger==4.2.0
  python-slugify==9.1.3 text-unidecode==1.3 pytz==2026.6 tzdata==2026.6 tzlocal==5.4.5
  rfc3339-validator==0.1.4 ruamel-yaml==0.19.1 semver==3.1.2 sniffio==1.3.1 toml==0.10.2 wcwidth==0.9.4
  websockets==16.1.1
  # builds this tree on the GPU machine (pip install --no-build-isolation --target), kept off the checks' path
  setuptools==84.2.1
)

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
sed -n '/^# GPU checks/,$p' "$prove/rehearsal.txt" | head -n 30
echo "gpu_wheelhouse: proof outputs in $prove (dry-run/, rehearsal/, *.txt); exit $status"
exit $status
