# The two commands of the README: `make demo` and `make test`.
# Both create the virtual environment on first use, so a fresh machine needs nothing before them.
PYTHON ?= python3
VENV ?= .venv
# The exact package set installed (pip constraints): the tested lock, or another stack's file, e.g.
#   make test-fast PYTHON=python3.11 VENV=.venv-oldest LOCK=requirements/oldest.txt
LOCK ?= requirements/lock.txt
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test test-fast install image image-test

$(STAMP): pyproject.toml $(LOCK)
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -c $(LOCK) -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/yolo-mlops demo

# Parallel test workers (pytest-xdist). Most of the suite's time is spent waiting on servers and subprocesses
# starting, not on the CPU, so more workers than cores pay off; tests/conftest.py groups the modules that must
# share a worker. TEST_WORKERS=0 runs serially.
TEST_WORKERS ?= 4

# Judged on real operator times night against night: beside the parallel workers the load, and with it every real
# operator's time, changes from night to night (a real change the nightly reports), so it runs alone after the rest.
ALONE_TESTS := tests/trends/test_operator_planted.py

test: $(STAMP)
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile --ignore=$(ALONE_TESTS) $(PYTEST_ARGS)
	$(BIN)/python -m pytest $(ALONE_TESTS)

# The suite without the tests marked `slow` (long real trainings) or `integration` (the deployed stack's
# servers), e.g. under another supported Python beside the default venv:
#   make test-fast PYTHON=python3.12 VENV=.venv-3.12
test-fast: $(STAMP)
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile -m "not slow and not integration" $(PYTEST_ARGS)

# The runtime image (Dockerfile): `docker build` where a Docker engine answers, else buildah, on a Debian base made
# with mmdebstrap where no image registry is reachable (deploy/build-image.sh; docs/deploy.md).
IMAGE ?= yolo-mlops:latest

image:
	IMAGE='$(IMAGE)' deploy/build-image.sh

# Builds the image, then runs it offline as its non-root user: --help, the demo with its MLflow run read back
# outside, the flow entrypoints, bootstrap.sh and a worker against a Prefect server in the container.
image-test: image $(STAMP)
	YOLO_MLOPS_IMAGE_TEST='$(IMAGE)' $(BIN)/python -m pytest -p no:cacheprovider -v -s tests/deploy/test_image.py $(PYTEST_ARGS)
