# Bridge: `make run` sets up and serves on http://127.0.0.1:8800/; `make test` sets up and runs the suite.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
CLAUDE_CODE_VERSION := 2.1.332
CLAUDE_DIR := .tools/claude
HOST ?= 127.0.0.1
PORT ?= 8800

.PHONY: run test lint bench install install-test claude-cli

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

$(VENV)/.installed-run: pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e '.[postgres,redis]'
	touch $@

$(VENV)/.installed-test: pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e '.[postgres,redis,test]'
	touch $@ $(VENV)/.installed-run

install: $(VENV)/.installed-run

install-test: $(VENV)/.installed-test

# The pinned Claude Code CLI for the end-to-end tests, installed into the repo (git-ignored).
claude-cli: $(CLAUDE_DIR)/node_modules/.bin/claude

$(CLAUDE_DIR)/node_modules/.bin/claude:
	@command -v npm >/dev/null || { echo "npm not found: the end-to-end tests with the real Claude Code CLI need it"; exit 1; }
	npm install --silent --no-audit --no-fund --prefix $(CLAUDE_DIR) @anthropic-ai/claude-code@$(CLAUDE_CODE_VERSION)

run: install
	$(BIN)/python manage.py migrate --no-input -v0
	$(BIN)/python manage.py token ensure
	$(BIN)/python manage.py runbridge --host $(HOST) --port $(PORT)

lint: install-test
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

test: install-test claude-cli lint
	$(BIN)/pytest

bench: install-test
	$(BIN)/python tests/bench/run.py
