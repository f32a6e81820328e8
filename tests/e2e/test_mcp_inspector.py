"""One run of the MCP Inspector CLI (a client we did not write) against `manage.py mcp` over stdio."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import REPO, TOOLS, skip_or_fail

pytestmark = pytest.mark.django_db(transaction=True)
INSPECTOR_DIR = REPO / ".tools" / "inspector" / "node_modules"
INSPECTOR = INSPECTOR_DIR / ".bin" / "mcp-inspector"
NODE_CANDIDATES = (INSPECTOR_DIR / "node" / "bin" / "node", INSPECTOR_DIR / ".bin" / "node")


def inspector(env: dict[str, str], home: Path, *args: str) -> subprocess.CompletedProcess:
    """`mcp-inspector --cli` on `manage.py mcp`, passing the server its environment with -e."""
    node = next((n for n in NODE_CANDIDATES if n.exists()), None)
    if node is None or not INSPECTOR.exists():
        skip_or_fail(f"the MCP Inspector is not installed in {INSPECTOR_DIR} (run `make inspector`)")
    server_env = [f"-e{name}={env[name]}" for name in env if name.startswith(("BRIDGE_", "DATABASE_", "HERMES_"))]
    return subprocess.run(
        [str(node), str(INSPECTOR.resolve()), "--cli", *server_env]
        + [*args, "--", sys.executable, str(REPO / "manage.py"), "mcp"],
        cwd=REPO,
        env={**env, "HOME": str(home)},  # whatever the Inspector keeps in ~ stays in the test's folder
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_inspector_lists_and_calls_the_tools_over_stdio(mcp_env, supervisor, work_root, tmp_path):  # noqa: F811
    (work_root / "note.txt").write_text("checked by the inspector")
    listed = inspector(mcp_env, tmp_path, "--method", "tools/list")
    assert listed.returncode == 0, listed.stderr
    tools = json.loads(listed.stdout)["tools"]
    assert {t["name"] for t in tools} == TOOLS
    assert all(t["inputSchema"]["type"] == "object" for t in tools)

    called = inspector(
        mcp_env,
        tmp_path,
        "--method",
        "tools/call",
        "--tool-name",
        "hermes_read",
        "--tool-arg",
        f"path={work_root / 'note.txt'}",
    )
    assert called.returncode == 0, called.stderr
    result = json.loads(called.stdout)
    assert not result.get("isError") and "checked by the inspector" in result["content"][0]["text"]
