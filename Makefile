# Bridge: `make run` sets up and serves on http://127.0.0.1:8800/; `make test` sets up and runs the suite.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
CLAUDE_CODE_VERSION := 2.1.332
CLAUDE_DIR := .tools/claude
HERMES_VERSION := 0.19.0
HERMES_DIR := .tools/hermes
INSPECTOR_VERSION := 2.12.0
NODE22_VERSION := 22.23.3
INSPECTOR_DIR := .tools/inspector
HOST ?= 127.0.0.1
PORT ?= 8800

.PHONY: run test lint bench install install-test claude-cli hermes-cli inspector browser tools

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

# The pinned Hermes Agent CLI (with ACP) in its own virtual environment, for the end-to-end tests.
hermes-cli: $(HERMES_DIR)/bin/hermes

$(HERMES_DIR)/bin/hermes:
	$(PYTHON) -m venv $(HERMES_DIR)
	$(HERMES_DIR)/bin/pip install -q 'hermes-agent[acp]==$(HERMES_VERSION)'

# The MCP Inspector CLI needs Node >= 22.19; the npm package `node` brings one without touching the system's.
inspector: $(INSPECTOR_DIR)/node_modules/.bin/mcp-inspector

$(INSPECTOR_DIR)/node_modules/.bin/mcp-inspector:
	npm install --silent --no-audit --no-fund --prefix $(INSPECTOR_DIR) \
		@modelcontextprotocol/inspector@$(INSPECTOR_VERSION) node@$(NODE22_VERSION)

# Debian's chromium for the browser tests (Playwright drives it; it never downloads a browser of its own).
browser:
	@command -v chromium >/dev/null || { \
		if [ "$$(id -u)" = 0 ]; then apt-get update -qq && apt-get install -y -qq chromium >/dev/null; \
		else echo "chromium is missing: sudo apt-get install chromium (browser tests skip without it)"; fi; }

tools: claude-cli hermes-cli inspector browser

run: install
	$(BIN)/python manage.py migrate --no-input -v0
	$(BIN)/python manage.py token ensure
	$(BIN)/python manage.py runbridge --host $(HOST) --port $(PORT)

# Style, the layers of docs/architecture.md (import-linter contracts in pyproject.toml), and functions that fit a screen.
lint: install-test
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports --no-cache
	$(BIN)/python tests/lint/long_functions.py 60

test: install-test tools lint
	$(BIN)/pytest

bench: install-test hermes-cli
	$(BIN)/python tests/bench/run.py
	$(BIN)/python tests/bench/mcp_first_output.py
