"""End to end, issue 33: a real Bridge server driving the real Gemini CLI (`gemini --acp`, pinned by `make tools`)
against the scripted Gemini API of tests/fakes/gemini_server.py, seen through REST, SSE, MCP and the task page.

Two executors run the same CLI: `gemini`, the preset (jobs/supervision/runners/gemini.py knows its ways), and
`plain-acp`, declared only in the server's agents file, which Bridge drives as any ACP agent with nothing but the
protocol. Every HTTP(S) attempt that is not to 127.0.0.1 goes to a recording proxy, and each test fails if that proxy
saw anything. Synchronisation follows the SSE stream (act when an event arrives), never sleeps.
"""

from __future__ import annotations

import os
import sqlite3
from datetime import UTC, datetime, timedelta
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
from tests.fakes.gemini_server import API_KEY, MODEL, FakeGemini, error, function_call, text, write_settings
from tests.fakes.hermes_env import PROXY_VARS, RecordingProxy
from tests.fakes.record_gemini import DEFAULT_GEMINI_BIN, restamp, session_files
from tests.support import skip_or_fail

pytestmark = pytest.mark.e2e

STOP_GRACE_S = 30  # as in test_hermes.py: a cancel test asserts no signal was needed, so Bridge must not hurry
COMMAND = "touch made.txt"


def gemini_bin() -> Path:
    """The real CLI: $BRIDGE_TEST_GEMINI_BIN, else the one `make tools` installs."""
    configured = os.environ.get("BRIDGE_TEST_GEMINI_BIN")
    path = Path(configured) if configured else DEFAULT_GEMINI_BIN
    if not (path.is_file() and os.access(path, os.X_OK)):
        skip_or_fail(f"Gemini CLI is not installed at {path} (run `make tools`, or set BRIDGE_TEST_GEMINI_BIN)")
    return path


@pytest.fixture(scope="module")
def fake():
    with FakeGemini() as server:
        yield server


@pytest.fixture(scope="module")
def proxy():
    with RecordingProxy() as server:
        yield server


@pytest.fixture(scope="module")
def bridge(tmp_path_factory, fake, proxy):
    gemini = gemini_bin()
    root = tmp_path_factory.mktemp("gemini")
    agents_file = root / "agents.toml"
    agents_file.write_text(
        f'[agents.gemini]\nprotocol = "acp"\ncommand = ["{gemini}", "--acp"]\n\n'
        f'[agents.plain-acp]\nprotocol = "acp"\ncommand = ["{gemini}", "--acp"]\n'
        'pass_env = ["GEMINI_API_KEY", "GOOGLE_GEMINI_BASE_URL", "GEMINI_MODEL", "GEMINI_CLI_NO_RELAUNCH"]\n'
    )
    env = {
        "BRIDGE_AGENTS_FILE": str(agents_file),
        "GEMINI_API_KEY": API_KEY,
        "GOOGLE_GEMINI_BASE_URL": fake.url,
        "GEMINI_MODEL": MODEL,
        "GEMINI_CLI_NO_RELAUNCH": "true",
        "BRIDGE_PASS_ENV": ",".join(PROXY_VARS),
        "BRIDGE_KILL_GRACE_S": str(STOP_GRACE_S),
        **{name: proxy.url for name in PROXY_VARS if not name.lower().startswith("no_")},
        "NO_PROXY": "127.0.0.1,localhost",
        "no_proxy": "127.0.0.1,localhost",
    }
    server = BridgeServer(root, fake.url, extra_env=env)
    write_settings(server.home)  # no usage statistics, no update checks, one attempt per model call
    server.start()
    yield server
    server.stop()


@pytest.fixture(autouse=True)
def offline_only(proxy):
    """The safety net: Gemini CLI must not have tried to reach anything but 127.0.0.1 during the test."""
    before = len(proxy.requests)
    yield
    assert proxy.requests[before:] == [], f"Gemini CLI tried to leave loopback: {proxy.requests[before:]}"


@pytest.fixture
def script(fake):
    fake.clear()
    return fake


def test_a_shell_command_asks_on_rest_mcp_and_the_page_is_allowed_there_and_ends_done_with_usage(
    bridge,
    script,
    cwd,
    request,
    tmp_path,
):
    script.push(function_call("run_shell_command", {"command": COMMAND, "description": "Make it"}), text("Made it."))
    playwright = request.getfixturevalue("playwright_api")
    task_id, listed, events = asked_everywhere_then_allowed_on_the_page(
        bridge, "gemini", cwd, playwright, tmp_path / "profile", COMMAND
    )
    assert listed["input"]["command"] == COMMAND and str(cwd) in listed["input"]["description"], listed

    assert final_status(events)["status"] == "done", final_status(events)
    assert (cwd / "made.txt").exists(), "the allowed command did not run"
    task = bridge.output_of(task_id)["task"]
    assert task["result"] == "Made it."
    # two model calls (the command, then the answer), 100 prompt tokens each; output: 1 function call + 2 words
    assert (task["usage"]["input_tokens"], task["usage"]["output_tokens"]) == (200, 3), task["usage"]
    assert "".join(d["text"] for d in of_kind(events, "text_delta")) == "Made it."


def test_an_agent_declared_only_in_the_file_streams_asks_and_ends_done(bridge, script, cwd):
    script.push(function_call("run_shell_command", {"command": COMMAND}), text("Declared and done.", chunks=3))
    asked: list[dict] = []
    task_id, events = run(bridge, "Make the file.", cwd, "plain-acp", allow_via_rest(bridge, asked))

    assert final_status(events)["status"] == "done", final_status(events)
    assert [a["tool_name"] for a in asked] == [COMMAND]
    assert (cwd / "made.txt").exists()
    deltas = of_kind(events, "text_delta")
    assert len(deltas) == 3 and "".join(d["text"] for d in deltas) == "Declared and done."
    task = bridge.output_of(task_id)["task"]
    assert (bridge.task(task_id)["agent"], task["result"]) == ("plain-acp", "Declared and done.")
    # the protocol's own `usage` is optional: an agent that reports none ends done, with no tokens made up
    assert task["usage"]["input_tokens"] is None, task["usage"]


def test_cancel_while_a_permission_is_pending_ends_the_turn_without_a_signal(bridge, script, cwd):
    script.push(function_call("run_shell_command", {"command": COMMAND}), text("Never said."))
    task_id, events = run(bridge, "Make the file.", cwd, "gemini", cancel_on_first_request(bridge))
    assert final_status(events)["status"] == "cancelled", final_status(events)
    assert not (cwd / "made.txt").exists()
    assert "signal" not in [e["event"] for e in events], "Gemini CLI needed a signal to end the cancelled turn"
    assert of_kind(events, "result")[0]["stopReason"] == "cancelled"
    assert [d["status"] for d in of_kind(events, "permission_decision")] == ["cancelled"]


def test_skip_runs_the_command_unasked_and_an_api_error_fails_with_its_words(bridge, script, cwd):
    script.push(function_call("run_shell_command", {"command": COMMAND}), text("Done unasked."))
    task_id, events = run(bridge, "Make the file.", cwd, "gemini", skip_permissions=True)
    assert final_status(events)["status"] == "done", final_status(events)
    assert (cwd / "made.txt").exists() and "permission_request" not in [e["event"] for e in events]
    assert not [d for d in of_kind(events, "text_delta") if "MODE_UPDATE" in d["text"]], "a mode change as output"

    script.push(error(500, "Boom from the fake"))
    task_id, events = run(bridge, "Fail.", cwd, "gemini")
    status = final_status(events)
    assert status["status"] == "failed" and "Boom from the fake" in status["error"], status


def test_resume_from_a_later_minute_carries_the_history_and_the_replay_is_not_output(bridge, script, cwd):
    """Within the session's first minute a resume is refused (tests/integration/test_agents.py); here, as if a minute
    had passed, the session's row and its chat file are put two minutes back."""
    script.push(text("The first answer is 41."))
    first_id, events = run(bridge, "First question", cwd, "gemini")
    assert final_status(events)["status"] == "done", final_status(events)
    session_id = bridge.task(first_id)["session_id"]
    age_session(bridge, session_id)
    [chat] = session_files(bridge.home, session_id)
    restamp(chat, minutes_ago=2)

    script.push(text("And the next is 42."))
    second_id, events = run(bridge, "Second question", cwd, "gemini", sessionId=session_id)
    assert final_status(events)["status"] == "done", final_status(events)
    assert bridge.output_of(second_id)["task"]["result"] == "And the next is 42."
    assert "".join(d["text"] for d in of_kind(events, "text_delta")) == "And the next is 42.", "replay as output"
    replayed = " ".join(h["text"] for h in of_kind(events, "history"))
    assert "First question" in replayed and "The first answer is 41." in replayed
    said = [part.get("text", "") for content in script.main_requests[-1]["contents"] for part in content["parts"]]
    assert "The first answer is 41." in said, "the resumed turn did not carry the history"


def age_session(bridge: BridgeServer, session_id: str) -> None:
    earlier = (datetime.now(UTC) - timedelta(minutes=2)).replace(tzinfo=None).isoformat(sep=" ")
    with sqlite3.connect(bridge.data_dir / "bridge.sqlite3") as db:
        db.execute("UPDATE jobs_agentsession SET created_at = ? WHERE session_id = ?", (earlier, session_id))
