"""End to end: jobs/agents/executors.py's Claude Code verdicts checked against the real Claude Code CLI, offline (a
closed port on 127.0.0.1 for its API): it is found, its version read, and it says "Not logged in" exactly when the
login verdict is "no" (the unit tests are in tests/unit/test_executors.py)."""

import json
import os
import subprocess

import pytest

from jobs.agents import executors
from tests.bridge_server import claude_bin
from tests.support import CREDENTIALS


@pytest.mark.e2e
def test_the_real_claude_cli(settings, tmp_path):
    settings.BRIDGE_CLAUDE_BIN = claude_bin()
    environ = {"PATH": os.environ.get("PATH", ""), "HOME": str(tmp_path), "ANTHROPIC_API_KEY": "sk-ant-fake"}

    status = executors.claude_status(environ)

    assert status.ready == executors.YES, status
    assert status.version and status.version[0].isdigit() and "Claude Code" in status.version


@pytest.mark.e2e
@pytest.mark.parametrize(
    "account",
    ["nothing", "ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "CLAUDE_CODE_OAUTH_TOKEN", *CREDENTIALS],
)
def test_the_login_verdict_agrees_with_the_real_cli(account, settings, tmp_path):
    """The real CLI, pointed at a closed local port: it says "Not logged in" exactly when the verdict is "no"."""
    settings.BRIDGE_CLAUDE_BIN = claude_bin()
    environ = {
        "HOME": str(tmp_path),
        "PATH": os.environ.get("PATH", ""),
        "ANTHROPIC_BASE_URL": "http://127.0.0.1:9",  # nothing listens: a logged-in CLI fails to connect instead
        "HTTPS_PROXY": "http://127.0.0.1:9",
        "DISABLE_AUTOUPDATER": "1",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "CLAUDE_CODE_MAX_RETRIES": "0",
    }
    if account in CREDENTIALS:
        (tmp_path / ".claude").mkdir()
        (tmp_path / ".claude" / ".credentials.json").write_text(json.dumps(CREDENTIALS[account]))
    elif account != "nothing":
        environ[account] = "sk-ant-fake"

    ready, words = executors.claude_login(environ, "linux")
    cli = subprocess.run(
        [settings.BRIDGE_CLAUDE_BIN, "-p", "hi"], env=environ, capture_output=True, text=True, timeout=120
    )

    assert ("Not logged in" in cli.stdout + cli.stderr) == (ready == executors.NO), (words, cli.stdout, cli.stderr)
