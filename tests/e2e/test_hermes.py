"""End to end: a real Bridge server driving the real Hermes CLI (ACP mode, and one-shot mode), seen only through
REST and SSE.

Hermes talks only to the scripted fake OpenAI server on 127.0.0.1 (tests/fakes/openai_server.py) with the offline
HERMES_HOME of tests/fakes/hermes_env.py; every other HTTP(S) attempt goes to a recording proxy, and each test fails
if that proxy saw anything. Synchronisation follows the SSE stream (act when an event arrives), never sleeps.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

import pytest

from tests.bridge_server import BridgeServer
from tests.e2e import acp_flow
from tests.e2e.acp_flow import final_status, of_kind
from tests.fakes.hermes_env import DEFAULT_HERMES_BIN, PROXY_VARS, RecordingProxy, offline_env, write_hermes_home
from tests.fakes.openai_server import FakeOpenAI, error, split_text, text, tool_call
from tests.support import skip_or_fail

pytestmark = pytest.mark.e2e

TIMEOUT_S = 120  # Hermes' cold start is 2-10 s, and its API retries take ~10 s
# BRIDGE_KILL_GRACE_S for these servers: how long Hermes has, after a cancel, to end its turn and exit before SIGTERM.
# Hermes takes 0.5-1 s on a quiet machine and over 2 s on a loaded one, so tests/bridge_server.py's 2 s made Bridge
# signal a Hermes that was exiting by itself, and the cancel tests (which assert no signal was needed) failed. A passing
# test never waits for it (the stream ends when Hermes exits); a wedged Hermes is signalled after it, and killed at
# twice it, still well inside TIMEOUT_S.
STOP_GRACE_S = 30


def hermes_bin() -> Path:
    """The real CLI: $BRIDGE_TEST_HERMES_BIN, else the one `make hermes-cli` installs."""
    configured = os.environ.get("BRIDGE_TEST_HERMES_BIN")
    path = Path(configured) if configured else DEFAULT_HERMES_BIN
    if not (path.is_file() and os.access(path, os.X_OK)):
        skip_or_fail(
            f"the Hermes CLI is not installed at {path} (run `make hermes-cli`, or set BRIDGE_TEST_HERMES_BIN)"
        )
    return path


# --- fixtures -------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def hermes() -> Path:
    return hermes_bin()


@pytest.fixture(scope="module")
def fake():
    with FakeOpenAI() as server:
        yield server


@pytest.fixture(scope="module")
def proxy():
    with RecordingProxy() as server:
        yield server


def start_bridge(root: Path, fake: FakeOpenAI, proxy: RecordingProxy, hermes: Path, mode: str) -> BridgeServer:
    hermes_home = write_hermes_home(root / "hermes_home", fake.url, hermes)
    env = offline_env(hermes_home, root / "home", proxy.url)
    env.update(
        {
            "BRIDGE_HERMES_BIN": str(hermes),
            "BRIDGE_HERMES_MODE": mode,
            "BRIDGE_PASS_ENV": ",".join(PROXY_VARS),
            "BRIDGE_KILL_GRACE_S": str(STOP_GRACE_S),
        }
    )
    return BridgeServer(root, fake.url, extra_env=env).start()


@pytest.fixture(scope="module")
def bridge(tmp_path_factory, fake, proxy, hermes):
    server = start_bridge(tmp_path_factory.mktemp("hermes-acp"), fake, proxy, hermes, "acp")
    yield server
    server.stop()


@pytest.fixture(scope="module")
def oneshot_bridge(tmp_path_factory, fake, proxy, hermes):
    server = start_bridge(tmp_path_factory.mktemp("hermes-oneshot"), fake, proxy, hermes, "oneshot")
    yield server
    server.stop()


@pytest.fixture(autouse=True)
def offline_only(proxy):
    """The safety net: Hermes must not have tried to reach anything but 127.0.0.1 during the test."""
    before = len(proxy.requests)
    yield
    assert proxy.requests[before:] == [], f"Hermes tried to leave loopback: {proxy.requests[before:]}"


@pytest.fixture
def oneshot_cwd(oneshot_bridge, request) -> Path:
    path = oneshot_bridge.work / request.node.name
    path.mkdir()
    return path


# --- helpers ----------------------------------------------------------------------------------------------------


def run(bridge: BridgeServer, prompt: str, cwd: Path, react=None, **fields) -> tuple[str, list[dict]]:
    """A Hermes task, followed to its end (tests/e2e/acp_flow.py `run`)."""
    return acp_flow.run(bridge, prompt, cwd, "hermes", react, **fields)


def kinds(events: list[dict]) -> list[str]:
    return [e["event"] for e in events]


def since_the_stop(events: list[dict]) -> str:
    """Each event from the stop on, with its seconds after the stop began: how a cancel test says what took long."""
    kinds_seen = kinds(events)
    if "stopping" not in kinds_seen:
        return f"no stop began: {kinds_seen}"
    after = events[kinds_seen.index("stopping") :]
    times = [datetime.fromisoformat(e["data"]["time"]) for e in after]
    return ", ".join(f"{e['event']} +{(t - times[0]).total_seconds():.2f} s" for e, t in zip(after, times, strict=True))


def message_texts(request: dict) -> list[tuple[str, str]]:
    """(role, text) of each message in a chat-completions request."""
    out = []
    for message in request.get("messages") or []:
        content = message.get("content")
        if isinstance(content, list):
            content = "".join(part.get("text", "") for part in content if isinstance(part, dict))
        out.append((message.get("role"), content or ""))
    return out


# --- ACP mode ---------------------------------------------------------------------------------------------------


def test_plain_answer_streams_before_the_end(bridge, script, cwd):
    gate = threading.Event()
    answer = "Hello from Hermes, streamed in several pieces."
    script.push(text(answer, chunks=5, gate=gate))
    seen_while_streaming = []

    def react(task_id, event):
        if event["event"] == "text_delta" and not gate.is_set():
            seen_while_streaming.append(event)
            gate.set()  # the fake holds the rest of the answer until Bridge has shown the first piece

    try:
        task_id, events = run(bridge, "Say hello", cwd, react)
    finally:
        gate.set()
    assert final_status(events)["status"] == "done", final_status(events)
    assert seen_while_streaming, "no text reached the API while the model was still answering"
    deltas = of_kind(events, "text_delta")
    assert len(deltas) >= 3 and "".join(d["text"] for d in deltas) == answer
    assert kinds(events).index("text_delta") < kinds(events).index("result")
    output = bridge.output_of(task_id)["task"]
    assert output["result"] == answer
    assert output["usage"]["input_tokens"] == 100 and output["usage"]["output_tokens"] >= 1
    init = of_kind(events, "init")[0]
    assert init["session_id"] and bridge.task(task_id)["session_id"] == init["session_id"]
    assert [r["stream"] for r in script.requests] == [True]


def decide_on_ask(bridge: BridgeServer, behavior: str, asked: list[dict]):
    def react(task_id, event):
        if event["event"] == "permission_request":
            asked.append(event["data"]["data"])
            request_id = event["data"]["data"]["request_id"]
            bridge.ok(bridge.decide(task_id, behavior, request_id=request_id))

    return react


def test_file_written_after_an_approved_permission(bridge, script, cwd):
    script.push(tool_call("write_file", {"path": "a.txt", "content": "hello\n"}), text("Wrote it."))
    asked: list[dict] = []
    task_id, events = run(bridge, "Write a.txt", cwd, decide_on_ask(bridge, "allow", asked))
    assert final_status(events)["status"] == "done", final_status(events)
    assert len(asked) == 1 and asked[0]["request_id"] == "0"  # Hermes' first JSON-RPC request id is 0
    assert asked[0]["input"] == {"tool": "write_file", "arguments": {"path": "a.txt", "content": "hello\n"}}
    assert (cwd / "a.txt").read_text() == "hello\n"
    assert [d["status"] for d in of_kind(events, "permission_decision")] == ["allowed"]
    assert of_kind(events, "tool_use")[0]["kind"] == "edit"
    assert bridge.output_of(task_id)["task"]["result"] == "Wrote it."


def test_file_not_written_after_a_denied_permission(bridge, script, cwd):
    script.push(tool_call("write_file", {"path": "a.txt", "content": "hello\n"}), text("Could not."))
    asked: list[dict] = []
    task_id, events = run(bridge, "Write a.txt", cwd, decide_on_ask(bridge, "deny", asked))
    assert final_status(events)["status"] == "done", final_status(events)
    assert len(asked) == 1
    assert not (cwd / "a.txt").exists()
    assert [d["status"] for d in of_kind(events, "permission_decision")] == ["denied"]
    roles = [role for role, _ in message_texts(script.requests[-1])]
    assert roles[-1] == "tool", "the model was not told the outcome of its tool call"


def test_bypass_allows_by_policy(bridge, script, cwd):
    script.push(tool_call("write_file", {"path": "b.txt", "content": "by policy\n"}), text("Done."))
    task_id, events = run(bridge, "Write b.txt", cwd, permission_mode="bypass")
    assert final_status(events)["status"] == "done", final_status(events)
    assert (cwd / "b.txt").read_text() == "by policy\n"
    decision = of_kind(events, "permission_decision")[0]
    assert decision["status"] == "allowed" and decision["decided_via"] == "policy"


def test_skip_permissions_edits_without_asking(bridge, script, cwd):
    script.push(tool_call("write_file", {"path": "c.txt", "content": "unasked\n"}), text("Done."))
    task_id, events = run(bridge, "Write c.txt", cwd, skip_permissions=True)
    assert final_status(events)["status"] == "done", final_status(events)
    assert (cwd / "c.txt").read_text() == "unasked\n"
    assert "permission_request" not in kinds(events)


def cancel_on_first(bridge: BridgeServer, kind: str, **fields) -> Callable[[str, dict], None]:
    """A react that cancels the task when the first `kind` event arrives, and only then: asking again after the task
    has ended would be refused (409), and whatever comes after the first is not what the test waits for."""
    asked: list[dict] = []

    def react(task_id: str, event: dict) -> None:
        if event["event"] == kind and not asked:
            asked.append(event)
            bridge.ok(bridge.post("/v1/task/cancel", {"task_id": task_id, **fields}))

    return react


def test_cancel_while_streaming(bridge, script, cwd):
    gate = threading.Event()
    answer = "A slow answer that will be cut short."
    script.push(text(answer, chunks=6, gate=gate))  # the fake holds the rest of the answer until the test ends
    try:
        task_id, events = run(bridge, "Talk slowly", cwd, cancel_on_first(bridge, "text_delta", reason="test cancel"))
    finally:
        gate.set()
    status = final_status(events)
    assert status["status"] == "cancelled" and status["error"] == "test cancel", status
    streamed = "".join(d["text"] for d in of_kind(events, "text_delta"))
    assert streamed == split_text(answer, 6)[0], f"the cancel did not come while the fake held the answer: {streamed!r}"
    assert "signal" not in kinds(events), f"Hermes needed a signal to end the cancelled turn: {since_the_stop(events)}"
    assert of_kind(events, "result")[0]["stopReason"] == "cancelled"


def test_cancel_while_a_permission_is_pending(bridge, script, cwd):
    script.push(tool_call("write_file", {"path": "a.txt", "content": "hello\n"}), text("After the deny."))
    task_id, events = run(bridge, "Write a.txt", cwd, cancel_on_first(bridge, "permission_request"))
    assert final_status(events)["status"] == "cancelled", final_status(events)
    assert not (cwd / "a.txt").exists()
    assert "signal" not in kinds(events), f"deny-then-cancel did not end the turn by itself: {since_the_stop(events)}"
    assert [d["status"] for d in of_kind(events, "permission_decision")] == ["cancelled"]


def test_resume_carries_the_history(bridge, script, cwd):
    script.push(text("The first answer is 41."))
    first_id, events = run(bridge, "First question", cwd)
    assert final_status(events)["status"] == "done", final_status(events)
    session_id = bridge.task(first_id)["session_id"]
    assert session_id

    script.push(text("And the next is 42."))
    second_id, events = run(bridge, "Second question", cwd, sessionId=session_id)
    assert final_status(events)["status"] == "done", final_status(events)
    assert bridge.task(second_id)["session_id"] == session_id
    assert bridge.output_of(second_id)["task"]["result"] == "And the next is 42."
    history = message_texts(script.requests[-1])
    assert ("user", "First question") in history and ("assistant", "The first answer is 41.") in history
    assert history[-1] == ("user", "Second question")
    replayed = of_kind(events, "history")
    assert [h["text"] for h in replayed] == ["First question", "The first answer is 41."]


def test_resume_of_an_unknown_session_fails_clearly(bridge, script, cwd):
    task_id, events = run(bridge, "Continue", cwd, sessionId="no-such-session")
    status = final_status(events)
    assert status["status"] == "failed" and "no session 'no-such-session'" in status["error"], status
    assert script.requests == []


def test_api_error_fails_with_its_words(bridge, script, cwd):
    script.push(error(500, "Boom from the fake"))
    task_id, events = run(bridge, "Say hello", cwd)
    status = final_status(events)
    assert status["status"] == "failed", status
    assert "Boom from the fake" in status["error"], status
    assert len(script.requests) >= 1


# --- one-shot mode ------------------------------------------------------------------------------------------------


def test_oneshot_plain_answer_and_resume(oneshot_bridge, script, oneshot_cwd):
    script.push(text("One-shot answer."))
    first_id, events = run(oneshot_bridge, "First question", oneshot_cwd)
    assert final_status(events)["status"] == "done", final_status(events)
    assert oneshot_bridge.output_of(first_id)["task"]["result"] == "One-shot answer."
    assert [e["text"] for e in of_kind(events, "output")] == ["One-shot answer."]
    session_id = oneshot_bridge.task(first_id)["session_id"]
    assert session_id, "no session id was parsed from stderr"
    argv = of_kind(events, "spawned")[0]["argv"]
    assert "chat" in argv and "-Q" in argv and not any("First question" in a for a in argv), "no task in argv"

    script.push(text("Resumed answer."))
    second_id, events = run(oneshot_bridge, "Second question", oneshot_cwd, sessionId=session_id)
    assert final_status(events)["status"] == "done", final_status(events)
    assert oneshot_bridge.output_of(second_id)["task"]["result"] == "Resumed answer."
    assert oneshot_bridge.task(second_id)["session_id"] == session_id
    history = message_texts(script.requests[-1])
    assert ("assistant", "One-shot answer.") in history and history[-1] == ("user", "Second question")


def test_oneshot_api_error_fails_with_its_words(oneshot_bridge, script, oneshot_cwd):
    script.push(error(500, "Boom one-shot"))
    task_id, events = run(oneshot_bridge, "Say hello", oneshot_cwd)
    status = final_status(events)
    assert status["status"] == "failed" and status["exit_code"] == 1, status
    assert "Boom one-shot" in status["error"], status
