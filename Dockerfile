# syntax=docker/dockerfile:1
#
# yolo-mlops runtime image: flow runs of the `gpu-docker` work pool, and the Prefect worker of
# deploy/docker-compose.yml.  Build from the repository root:
#
#   docker build -t yolo-mlops:latest .
#
# CUDA: the PyPI torch wheels pinned in pyproject.toml are CUDA builds that carry their CUDA runtime
# libraries (nvidia-* wheels), so the base only has to provide the Python the project requires (3.11).
# The host needs the NVIDIA driver and the NVIDIA Container Toolkit; containers get GPUs through a
# device request (compose `deploy.resources.reservations.devices`, docker pool `device_requests`).
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

# ---- build: the project wheel (code only; dependencies are installed from PyPI below) ----
FROM ${PYTHON_IMAGE} AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY yolo_mlops ./yolo_mlops
COPY flows ./flows
RUN pip wheel --no-cache-dir --no-deps --wheel-dir /wheels . \
    # the dependency list alone, so the heavy dependency layer below is rebuilt only when it changes
    && python -c "import tomllib; print('\n'.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies']))" \
        > /wheels/requirements.txt

# ---- runtime ----
FROM ${PYTHON_IMAGE}

# opencv (an ultralytics dependency) loads libGL and glib at import time.
# Versions are whatever the pinned Debian release ships; pinning them would break on every point release.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends libgl1 libglib2.0-0 \
    && rm -rf /var/lib/apt/lists/*

# Non-root user; its home holds every path the run writes outside mounted volumes.
RUN groupadd --gid 1000 app \
    && useradd --uid 1000 --gid app --create-home --home-dir /home/app --shell /bin/bash app

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    HOME=/home/app \
    # offline first: ultralytics must not reach the network (online checks, fonts, settings sync)
    YOLO_OFFLINE=1 \
    # writable ultralytics settings dir; the font is placed in $YOLO_CONFIG_DIR/Ultralytics below
    YOLO_CONFIG_DIR=/home/app/.config \
    MPLCONFIGDIR=/home/app/.cache/matplotlib \
    YOLO_MLOPS_HOME=/home/app/.yolo-mlops \
    # deploy/prefect.yaml's pull step changes into this directory (flow entrypoints are relative to it)
    YOLO_MLOPS_PROJECT_DIR=/opt/yolo-mlops \
    # NVIDIA Container Toolkit: expose the requested GPUs with compute + NVML (utility) libraries
    NVIDIA_VISIBLE_DEVICES=all \
    NVIDIA_DRIVER_CAPABILITIES=compute,utility

# Dependencies first (torch, ultralytics, mlflow, prefect ...): the largest layer, cached across code changes.
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels \
    pip install --no-cache-dir -r /wheels/requirements.txt

# Flow entrypoints are file paths (flows/<name>.py:<flow>) resolved against the working directory.
WORKDIR /opt/yolo-mlops
COPY flows ./flows
# deploy/: what `docker compose run --rm bootstrap` runs (work pools, GPU limits, deployments)
COPY deploy/prefect.yaml deploy/bootstrap.sh ./deploy/
COPY deploy/work-pools ./deploy/work-pools

# The project itself, without touching the dependencies installed above.
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels \
    pip install --no-cache-dir --no-deps /wheels/yolo_mlops-*.whl

# Numeric, so Kubernetes' runAsNonRoot can verify it without reading /etc/passwd.
USER 1000:1000
# Pre-place what ultralytics would otherwise download or create at first use: the Arial fonts (a copy
# of matplotlib's DejaVuSans), settings.json with sync and logger integrations off, the matplotlib font cache.
RUN python -c "from yolo_mlops.config import data_home; from yolo_mlops.offline import configure_ultralytics; configure_ultralytics(data_home())" \
    && python -c "import matplotlib.font_manager" \
    && test -f "$YOLO_CONFIG_DIR/Ultralytics/Arial.ttf"

# Prefect's docker worker replaces the command with `prefect flow-run execute`; this default only
# makes a bare `docker run` show what the image holds.
CMD ["yolo-mlops", "--help"]
