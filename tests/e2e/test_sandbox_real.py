"""End to end: the real Claude Code and Hermes CLIs, each told by its scripted model to run one shell command that
looks for Bridge's secrets, inside a real Bridge started with canaries in its environment and BRIDGE_SANDBOX=on.

What the command printed comes back to the scripted model as the tool's result, which is where it is read here.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from jobs import processes
from jobs.processes import sandbox
from tests.bridge_server import BridgeServer, Script, claude_bin, data_events
from tests.e2e.test_hermes import hermes_bin
from tests.fakes import hermes_env
from tests.fakes.anthropic_server import FakeAnthropic, text, tool_use
from tests.fakes.openai_server import FakeOpenAI, tool_call
from tests.fakes.openai_server import text as hermes_text
from tests.support import skip_or_fail

pytestmark = pytest.mark.e2e

CANARY = "canary-e2e-93c4a7"
# Secrets no agent is given (Hermes is given its provider's key, OPENAI_API_KEY among them: not a leak).
CANARIES = {name: f"{CANARY}-{name}" for name in ("AWS_SECRET_ACCESS_KEY", "GITHUB_TOKEN", "BRIDGE_TEST_SECRET")}


def spy(data_dir: Path) -> str:
    """Count the canaries in every environment the agent can read; list Bridge's data dir; count the processes."""
    return (
        f"echo canaries=$(cat /proc/[0-9]*/environ 2>/dev/null | tr '\\0' '\\n' | grep -c {CANARY}); "
        f"echo data=$(ls -A {data_dir} | wc -l); echo processes=$(ls -d /proc/[0-9]* | wc -l)"
    )


def findings(tool_output: str) -> dict[str, int]:
    pairs = (line.split("=", 1) for line in tool_output.splitlines() if "=" in line)
    return {name: int(value) for name, value in pairs}


def assert_nothing_found(tool_output: str) -> None:
    found = findings(tool_output)
    assert found["canaries"] == 0, tool_output
    assert found["data"] == 0, "Bridge's data dir (its database, secret key, logs) is empty from inside"
    assert 1 <= found["processes"] <= 12, "the agent's own processes only, none of Bridge's"


@pytest.fixture(scope="module", autouse=True)
def a_sandbox():
    found = sandbox.find("on", processes.PLATFORM)
    if not found.available:
        skip_or_fail(f"no sandbox on this machine: {found.reason}")


def spawned_under_bwrap(events: list[dict]) -> bool:
    [argv] = [e["data"]["data"]["argv"] for e in events if e["event"] == "spawned"]
    return "--unshare-pid" in argv


def test_claude_code_inside_the_sandbox_finds_nothing_of_bridges(tmp_path):
    with FakeAnthropic() as fake:
        script = Script(fake)
        env = {**CANARIES, "BRIDGE_SANDBOX": "on"}
        with BridgeServer(tmp_path, fake.url, claude_bin(), env) as bridge:
            script.push(tool_use("Bash", {"command": spy(bridge.data_dir), "description": "e2e"}), text("Looked."))
            task_id = bridge.create_task("Look around.", bridge.work, permission_mode="bypass")
            events = data_events(list(bridge.stream(task_id)))
            assert bridge.task(task_id)["status"] == "done", events[-3:]
    [request] = [r for r in script.requests if tool_result_text(r)]
    assert_nothing_found(tool_result_text(request))
    assert spawned_under_bwrap(events)


def test_hermes_inside_the_sandbox_finds_nothing_of_bridges(tmp_path):
    hermes = hermes_bin()
    with FakeOpenAI() as fake, hermes_env.RecordingProxy() as proxy:
        script = Script(fake)
        home = hermes_env.write_hermes_home(tmp_path / "hermes_home", fake.url, hermes)
        env = hermes_env.offline_env(home, tmp_path / "home", proxy.url)
        env.update(CANARIES | {"BRIDGE_SANDBOX": "on", "BRIDGE_HERMES_BIN": str(hermes), "BRIDGE_HERMES_MODE": "acp"})
        env["BRIDGE_PASS_ENV"] = ",".join(hermes_env.PROXY_VARS)
        with BridgeServer(tmp_path, fake.url, extra_env=env) as bridge:
            script.push(tool_call("terminal", {"command": spy(bridge.data_dir)}), hermes_text("Looked."))
            task_id = bridge.create_task(
                "Look around.", bridge.work, agent="hermes", permission_mode="bypass", timeout_s=120
            )
            events = data_events(list(bridge.stream(task_id, deadline_s=120)))
            assert bridge.task(task_id)["status"] == "done", events[-3:]
        assert proxy.requests == [], "Hermes tried to leave loopback"
    tool_messages = [m for r in script.requests for m in r.get("messages", []) if m.get("role") == "tool"]
    assert tool_messages, "the model never got the command's output"
    assert_nothing_found(json.loads(tool_messages[-1]["content"])["output"])  # Hermes' terminal tool answers JSON
    assert spawned_under_bwrap(events)


def tool_result_text(request: dict) -> str:
    """The text of the tool_result blocks in an Anthropic request's last message ('' when it has none)."""
    content = (request.get("messages") or [{}])[-1].get("content")
    blocks = [b for b in content if isinstance(b, dict) and b.get("type") == "tool_result"] if content else []
    parts = []
    for block in blocks:
        inner = block.get("content")
        parts += [p.get("text", "") for p in inner if isinstance(p, dict)] if isinstance(inner, list) else [str(inner)]
    return "\n".join(parts)
