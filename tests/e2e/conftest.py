"""End-to-end tests: the real agent CLIs (and the MCP Inspector) against scripted LLM servers on 127.0.0.1."""

import pytest


def pytest_collection_modifyitems(items):
    for item in items:
        if "/tests/e2e/" in str(item.path).replace("\\", "/"):
            item.add_marker(pytest.mark.e2e)
