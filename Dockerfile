# syntax=docker/dockerfile:1
#
# yolo-mlops runtime image: flow runs of the `gpu-docker` work pool, and the Prefect worker of
# deploy/docker-compose.yml.  Build from the repository root:
#
#   docker build -t yolo-mlops:latest .
#   make image      # the same with docker, else with buildah (no daemon), on a Debian base where no
#                   # image registry is reachable (deploy/build-image.sh, docs/deploy.md)
#
# CUDA: the PyPI torch wheels pinned in requirements/lock.txt are CUDA builds that carry their CUDA runtime
# libraries (nvidia-* wheels), so the base only has to provide the Python the project requires (3.11).
# The host needs the NVIDIA driver and the NVIDIA Container Toolkit; containers get GPUs through a
# device request (compose `deploy.resources.reservations.devices`, docker pool `device_requests`).
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

# Package indexes for pip, given at build time only (ARGs are not part of the image's environment; their
# values, paths, show in its history): PIP_CERT a CA bundle mounted into the build where an egress re-signs
# TLS, PIP_FIND_LINKS and PIP_EXTRA_INDEX_URL local wheel directories mounted read-only beside PyPI.
# deploy/build-image.sh sets them from the host's pip configuration; a plain `docker build` needs none.

# ---- requirements: the dependency list alone, so the heavy dependency layer below is rebuilt only when it changes ----
FROM ${PYTHON_IMAGE} AS requirements
WORKDIR /src
COPY pyproject.toml ./
RUN python -c "import tomllib; print('\n'.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies']))" \
        > /requirements.txt

# ---- build: the project wheel (code only) ----
FROM ${PYTHON_IMAGE} AS build
ARG PIP_CERT PIP_FIND_LINKS PIP_EXTRA_INDEX_URL
WORKDIR /src
COPY pyproject.toml README.md ./
COPY yolo_mlops ./yolo_mlops
COPY flows ./flows
RUN pip wheel --no-cache-dir --no-deps --wheel-dir /wheels .

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
# The declared ranges at the exact versions of requirements/lock.txt, the set the suite runs on.
# Copied rather than bind-mounted: a COPY is keyed by the file's content in every builder (docker, buildah),
# so this layer is rebuilt exactly when the dependency list or the lock changes.
ARG PIP_CERT PIP_FIND_LINKS PIP_EXTRA_INDEX_URL
COPY --from=requirements /requirements.txt /tmp/requirements.txt
COPY requirements/lock.txt /tmp/lock.txt
RUN pip install --no-cache-dir -r /tmp/requirements.txt -c /tmp/lock.txt

# Flow entrypoints are file paths (flows/<name>.py:<flow>) resolved against the working directory.
WORKDIR /opt/yolo-mlops
COPY flows ./flows
# deploy/: what `docker compose run --rm bootstrap` runs (work pools, GPU limits, deployments)
COPY deploy/prefect.yaml deploy/bootstrap.sh ./deploy/
COPY deploy/work-pools ./deploy/work-pools

# The project itself, without touching the dependencies installed above (the copied wheel: a code change
# rebuilds from here on, and only from here on).
COPY --from=build /wheels /tmp/wheels
RUN pip install --no-cache-dir --no-deps /tmp/wheels/yolo_mlops-*.whl \
    && rm -rf /tmp/wheels

# Numeric, so Kubernetes' runAsNonRoot can verify it without reading /etc/passwd.
USER 1000:1000
# Pre-place what ultralytics would otherwise download or create at first use: the Arial fonts (a copy
# of matplotlib's DejaVuSans), settings.json with sync and logger integrations off, the matplotlib font cache.
RUN python -c "from yolo_mlops.config import data_home; from yolo_mlops.run.offline import configure_ultralytics; configure_ultralytics(data_home())" \
    && python -c "import matplotlib.font_manager" \
    && test -f "$YOLO_CONFIG_DIR/Ultralytics/Arial.ttf"

# Prefect's docker worker replaces the command with `prefect flow-run execute`; this default only
# makes a bare `docker run` show what the image holds.
CMD ["yolo-mlops", "--help"]
