# The two commands of the README: `make demo` and `make test`.
# Both create the virtual environment on first use, so a fresh machine needs nothing before them.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test install

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/yolo-mlops demo

test: $(STAMP)
	$(BIN)/python -m pytest $(PYTEST_ARGS)
