"""End to end, issue 33: a real Bridge server driving the real Qwen Code CLI (`qwen --acp`, pinned by `make tools`,
on the Node 22 installed beside it) against the scripted OpenAI chat-completions server of tests/fakes/openai_server.py
(the settings and environment of tests/fakes/qwen_server.py), seen through REST, SSE, MCP and the task page.

The preset `qwen` is pointed at the pinned install by the server's agents file; jobs/supervision/runners/qwen.py knows
its ways. Every HTTP(S) attempt that is not to 127.0.0.1 goes to a recording proxy, and each test fails if that proxy
saw anything. Synchronisation follows the SSE stream (act when an event arrives), never sleeps.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.bridge_server import BridgeServer
from tests.browser.conftest import playwright_api  # noqa: F401 - the browser tests' Playwright, for the task page
from tests.e2e.acp_flow import (
    allow_via_rest,
    asked_everywhere_then_allowed_on_the_page,
    cancel_on_first_request,
    final_status,
    of_kind,
    run,
)
from tests.fakes.hermes_env import PROXY_VARS, RecordingProxy
from tests.fakes.openai_server import MODEL, FakeOpenAI, error, text, tool_call
from tests.fakes.qwen_server import API_KEY, DEFAULT_QWEN_PREFIX, qwen_command, write_settings
from tests.support import skip_or_fail

pytestmark = pytest.mark.e2e

STOP_GRACE_S = 30  # as in test_hermes.py: a cancel test asserts no signal was needed, so Bridge must not hurry
COMMAND = "touch made.txt"
SHOWN = f"{COMMAND} (Make it)"  # Qwen titles a command request "<command> (<description>)"


def qwen_prefix() -> Path:
    """The npm prefix holding the real CLI and its Node: $BRIDGE_TEST_QWEN_PREFIX, else the one `make tools` fills."""
    configured = os.environ.get("BRIDGE_TEST_QWEN_PREFIX")
    prefix = Path(configured) if configured else DEFAULT_QWEN_PREFIX
    node, cli = (Path(path) for path in qwen_command(prefix)[:2])
    if not (os.access(node, os.X_OK) and cli.is_file()):
        skip_or_fail(f"Qwen Code is not installed under {prefix} (run `make tools`, or set BRIDGE_TEST_QWEN_PREFIX)")
    return prefix


@pytest.fixture(scope="module")
def fake():
    with FakeOpenAI() as server:
        yield server


@pytest.fixture(scope="module")
def proxy():
    with RecordingProxy() as server:
        yield server


@pytest.fixture(scope="module")
def bridge(tmp_path_factory, fake, proxy):
    command = qwen_command(qwen_prefix())
    root = tmp_path_factory.mktemp("qwen")
    agents_file = root / "agents.toml"
    agents_file.write_text(f'[agents.qwen]\nprotocol = "acp"\ncommand = {json.dumps(command)}\n')
    env = {
        "BRIDGE_AGENTS_FILE": str(agents_file),
        "OPENAI_API_KEY": API_KEY,
        "OPENAI_BASE_URL": fake.url,
        "OPENAI_MODEL": MODEL,
        "BRIDGE_PASS_ENV": ",".join(PROXY_VARS),
        "BRIDGE_KILL_GRACE_S": str(STOP_GRACE_S),
        **{name: proxy.url for name in PROXY_VARS if not name.lower().startswith("no_")},
        "NO_PROXY": "127.0.0.1,localhost",
        "no_proxy": "127.0.0.1,localhost",
    }
    server = BridgeServer(root, fake.url, extra_env=env)
    write_settings(server.home)  # no usage statistics, no background model calls, no retries inside the SDK
    server.start()
    yield server
    server.stop()


@pytest.fixture(autouse=True)
def offline_only(proxy):
    """The safety net: Qwen Code must not have tried to reach anything but 127.0.0.1 during the test."""
    before = len(proxy.requests)
    yield
    assert proxy.requests[before:] == [], f"Qwen Code tried to leave loopback: {proxy.requests[before:]}"


@pytest.fixture
def script(fake):
    fake.clear()
    fake.main_requests.clear()
    return fake


def test_a_shell_command_asks_on_rest_mcp_and_the_page_is_allowed_there_and_ends_done_with_usage(
    bridge, script, cwd, request, tmp_path
):
    script.push(tool_call("run_shell_command", {"command": COMMAND, "description": "Make it"}), text("Made it."))
    playwright = request.getfixturevalue("playwright_api")
    task_id, listed, events = asked_everywhere_then_allowed_on_the_page(
        bridge, "qwen", cwd, playwright, tmp_path / "profile", SHOWN
    )
    assert listed["input"] == {"command": COMMAND, "description": "Make it"}, listed

    assert final_status(events)["status"] == "done", final_status(events)
    assert (cwd / "made.txt").exists(), "the allowed command did not run"
    task = bridge.output_of(task_id)["task"]
    assert task["result"] == "Made it."
    # two model calls (the command, then the answer), 100 prompt tokens each; output: 1 for the call + 2 words
    assert (task["usage"]["input_tokens"], task["usage"]["output_tokens"]) == (200, 3), task["usage"]
    assert "".join(d["text"] for d in of_kind(events, "text_delta")) == "Made it."
    spawned = of_kind(events, "spawned")[0]["argv"]
    assert spawned[-2:] == ["--approval-mode", "default"], spawned


def test_a_rule_allows_a_command_and_skip_runs_one_unasked(bridge, script, cwd):
    rule = bridge.ok(bridge.post("/v1/rules", {"rule": "Bash(touch:*)", "decision": "allow", "root": str(cwd)}))
    script.push(tool_call("run_shell_command", {"command": COMMAND, "description": "Make it"}), text("By rule."))
    _, events = run(bridge, "Make the file.", cwd, "qwen")
    assert final_status(events)["status"] == "done", final_status(events)
    [decided] = of_kind(events, "permission_decision")
    assert (decided["status"], decided["decided_via"], decided["rule_id"]) == ("allowed", "policy", rule["id"])
    bridge.ok(bridge.client.delete(f"/v1/rules/{rule['id']}"))

    (cwd / "made.txt").unlink()
    script.push(tool_call("run_shell_command", {"command": COMMAND, "description": "Make it"}), text("Unasked."))
    _, events = run(bridge, "Make the file.", cwd, "qwen", skip_permissions=True)
    assert final_status(events)["status"] == "done", final_status(events)
    assert (cwd / "made.txt").exists() and "permission_request" not in [e["event"] for e in events]


def test_cancel_while_a_permission_is_pending_ends_the_turn_without_a_signal(bridge, script, cwd):
    script.push(tool_call("run_shell_command", {"command": COMMAND, "description": "Make it"}), text("Never said."))
    _, events = run(bridge, "Make the file.", cwd, "qwen", cancel_on_first_request(bridge))
    assert final_status(events)["status"] == "cancelled", final_status(events)
    assert not (cwd / "made.txt").exists()
    assert "signal" not in [e["event"] for e in events], "Qwen Code needed a signal to end the cancelled turn"


def test_resume_carries_the_history_and_counts_only_the_new_turns_tokens(bridge, script, cwd):
    script.push(text("The first answer is 41."))
    first_id, events = run(bridge, "First question", cwd, "qwen")
    assert final_status(events)["status"] == "done", final_status(events)
    session_id = bridge.task(first_id)["session_id"]

    script.push(text("And the next is 42."))
    asked: list[dict] = []
    second_id, events = run(bridge, "Second question", cwd, "qwen", allow_via_rest(bridge, asked), sessionId=session_id)
    assert final_status(events)["status"] == "done", final_status(events)
    task = bridge.output_of(second_id)["task"]
    assert task["result"] == "And the next is 42." and task["usage"]["input_tokens"] == 100, task
    replayed = " ".join(h["text"] for h in of_kind(events, "history"))
    assert "First question" in replayed and "The first answer is 41." in replayed
    said = [str(message.get("content")) for message in script.main_requests[-1]["messages"]]
    assert any("The first answer is 41." in content for content in said), "the resumed turn lost the history"


def test_an_api_error_fails_with_its_words(bridge, script, cwd):
    script.push(*[error(401, "Bad key from the fake")] * 8)  # a 401 is not retried; spare replies do no harm
    _, events = run(bridge, "Fail.", cwd, "qwen")
    status = final_status(events)
    assert status["status"] == "failed" and "401" in status["error"], status
