"""End-to-end tests: the real agent CLIs (and the MCP Inspector) against scripted LLM servers on 127.0.0.1. Each
module that asks for `bridge` gets its own Bridge server and fake Anthropic server, started once for the module."""

from pathlib import Path

import pytest

from tests import bridge_server
from tests.bridge_server import BridgeServer, Script
from tests.fakes.anthropic_server import FakeAnthropic


def pytest_collection_modifyitems(items):
    for item in items:
        if "/tests/e2e/" in str(item.path).replace("\\", "/"):
            item.add_marker(pytest.mark.e2e)


@pytest.fixture(scope="module")
def claude() -> str:
    return bridge_server.claude_bin()


@pytest.fixture(scope="module")
def fake():
    with FakeAnthropic() as server:
        yield server


@pytest.fixture(scope="module")
def bridge(tmp_path_factory, fake, claude):
    with BridgeServer(tmp_path_factory.mktemp("bridge"), fake.url, claude) as server:
        yield server


@pytest.fixture
def script(fake) -> Script:
    """The replies the module's scripted LLM server gives next."""
    return Script(fake)


@pytest.fixture
def cwd(bridge, request) -> Path:
    """A fresh directory for the test under the module's Bridge's work root, named after the test."""
    path = bridge.work / request.node.name.replace("[", "_").replace("]", "")
    path.mkdir()
    return path
