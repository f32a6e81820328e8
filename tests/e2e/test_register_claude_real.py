"""End to end: the `claude mcp add` line `manage.py register_claude` prints, run by the real Claude Code CLI on a
temporary home, registers Bridge there as the command the line named (the register_claude unit tests are in
tests/unit/test_register_claude.py)."""

import json
import os
import shlex
import subprocess
import sys

import pytest
from django.conf import settings

from tests.bridge_server import claude_bin
from tests.support import MANAGE_PY, register

# Each test's own data dir (tests/conftest.py): the address a running Bridge recorded in the real one must not leak in.
pytestmark = pytest.mark.usefixtures("data_dir")


@pytest.mark.e2e
def test_the_printed_line_registers_bridge_with_the_real_claude_code_cli(home, environ, tmp_path):
    claude = claude_bin()
    [line] = [line for line in register(home, environ, "linux").splitlines() if line.startswith("claude mcp add")]
    argv = [claude, *shlex.split(line)[1:]]
    cli_env = {"PATH": os.environ["PATH"], "HOME": str(home), "DISABLE_AUTOUPDATER": "1", "DISABLE_TELEMETRY": "1"}
    cli_env["CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC"] = "1"

    subprocess.run(argv, env=cli_env, cwd=tmp_path, check=True, capture_output=True, timeout=60)

    registered = json.loads((home / ".claude.json").read_text())["mcpServers"]["bridge"]
    assert registered["command"] == sys.executable
    assert registered["args"] == [MANAGE_PY, "mcp"]
    assert registered["env"]["BRIDGE_DATA_DIR"] == str(settings.DATA_DIR)
