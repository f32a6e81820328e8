"""Fixtures the integration modules share (the suite-wide ones are in tests/conftest.py)."""

from pathlib import Path

import pytest
from django.test import Client

from tests.bridge_server import BridgeServer


@pytest.fixture
def user(django_user_model):
    """A logged-in person for the pages' tests: a superuser, who may do everything."""
    return django_user_model.objects.create_superuser("alice", password="pw-alice-123")


@pytest.fixture
def browser(user) -> Client:
    """A test client logged in as `user`."""
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def rooms(work_root) -> tuple[Path, Path]:
    """Two directories inside the allowed root: one that a rule, a token or a preset is limited to, and one beside
    it that it must not reach."""
    mine, theirs = work_root / "a", work_root / "b"
    mine.mkdir()
    theirs.mkdir()
    return mine, theirs


@pytest.fixture
def bridge(tmp_path, fake_agent):
    """A real `runbridge` running the fake agent, with no Hermes installed (a module may define its own `bridge`)."""
    server = BridgeServer(tmp_path / "bridge", fake_url="http://127.0.0.1:9", claude=str(fake_agent))
    server.env["BRIDGE_HERMES_BIN"] = str(tmp_path / "no-such-hermes")
    with server:
        yield server
