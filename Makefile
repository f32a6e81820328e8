# Bridge: `make run` sets up and serves on http://127.0.0.1:8800/; `make test` sets up and runs the suite.
# Every target calls bridge/bootstrap.py, which is also how Windows runs them without make:
#   py -m bridge.bootstrap run | test | lint | tools | bench | lock
PYTHON ?= python3
HOST ?= 127.0.0.1
PORT ?= 8800
BOOTSTRAP := $(PYTHON) -m bridge.bootstrap

.PHONY: run test lint tools bench lock

run:
	$(BOOTSTRAP) run --host $(HOST) --port $(PORT)

test:
	$(BOOTSTRAP) test

lint:
	$(BOOTSTRAP) lint

tools:
	$(BOOTSTRAP) tools

bench:
	$(BOOTSTRAP) bench

# after changing a dependency in pyproject.toml: resolve the lock files (requirements/*.txt) again
lock:
	$(BOOTSTRAP) lock
