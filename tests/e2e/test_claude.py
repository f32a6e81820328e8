"""End to end: a real Bridge server driving the real Claude Code CLI, seen only through REST and SSE.

The CLI talks only to the scripted fake Anthropic server on 127.0.0.1 (tests/fakes/anthropic_server.py) with the
offline environment of tests/fakes/claude_env.py. No Django test database: these tests are black-box over HTTP.
Synchronisation follows the SSE stream (act when an event arrives), never sleeps.
"""

from __future__ import annotations

import json
import os

import pytest

from tests.bridge_server import BridgeServer, Script, data_events
from tests.fakes.anthropic_server import error, text, tool_use

pytestmark = pytest.mark.e2e


# --- fixtures -------------------------------------------------------------------------------------------------


# --- helpers ----------------------------------------------------------------------------------------------------


def follow(bridge: BridgeServer, task_id: str, react=None) -> list[dict]:
    """Read the task's SSE stream to its `end`, calling react(event) on each event as it arrives."""
    events = []
    for event in bridge.stream(task_id):
        events.append(event)
        if react is not None:
            react(event)
    assert events and events[-1]["event"] == "end", f"the stream closed without an `end` event: {events[-3:]}"
    return events


def check_stream(bridge: BridgeServer, task_id: str, events: list[dict], status: str) -> list[dict]:
    """Seqs 1..n without gaps, a final `status` event, then `end`; replays after k give exactly the rest."""
    data = data_events(events)
    seqs = [e["id"] for e in data]
    assert seqs == list(range(1, len(seqs) + 1)), f"seqs are not 1..n without gaps: {seqs}"
    for e in data:
        assert e["data"]["seq"] == e["id"] and e["data"]["kind"] == e["event"], e
    assert data[0]["event"] == "status" and data[0]["data"]["data"]["status"] == "queued"
    last = data[-1]
    assert last["event"] == "status" and last["data"]["data"]["status"] == status, last
    end = events[-1]
    assert end["event"] == "end" and end["id"] is None
    assert end["data"] == {"type": "end", "task_id": task_id, "status": status, "last_seq": len(data)}
    assert bridge.task(task_id)["last_seq"] == len(data)

    n = len(data)
    for kwargs, k in (({"last_event_id": n // 2}, n // 2), ({"since": n - 2}, n - 2)):
        again = list(bridge.stream(task_id, **kwargs))
        assert data_events(again) == data[k:], f"replay after {k} ({kwargs}) differs from the first pass"
        assert again[-1] == end
    return data


def kinds(events: list[dict]) -> list[str]:
    return [e["event"] for e in events]


def of_kind(events: list[dict], kind: str) -> list[dict]:
    """The `data` payloads of the events of one kind."""
    return [e["data"]["data"] for e in events if e["event"] == kind]


def tool_results(request: dict) -> list[dict]:
    """The tool_result blocks of an API request's last user message."""
    user = [m for m in request["messages"] if m["role"] == "user"][-1]
    content = user["content"] if isinstance(user["content"], list) else []
    return [b for b in content if b.get("type") == "tool_result"]


def result_text(block: dict) -> str:
    content = block.get("content")
    if isinstance(content, list):
        return "\n".join(part.get("text", "") for part in content if isinstance(part, dict))
    return str(content)


def bash(command: str):
    return tool_use("Bash", {"command": command, "description": "e2e"})


def on_first_permission(action):
    """A react() callback that calls action(event) for the first permission_request only."""
    seen = []

    def react(event):
        if event["event"] == "permission_request" and not seen:
            seen.append(event)
            action(event)

    react.seen = seen
    return react


# --- scenarios --------------------------------------------------------------------------------------------------


def test_plain_answer(bridge, script, cwd):
    answer = "Hello from the fake Anthropic server."
    script.push(text(answer))
    task_id = bridge.create_task("Say hello.", cwd)

    events = follow(bridge, task_id)
    data = check_stream(bridge, task_id, events, "done")

    out = bridge.output_of(task_id)
    assert out["retrieval_status"] == "success"
    task = out["task"]
    assert (task["status"], task["result"], task["exitCode"]) == ("done", answer, 0)
    usage = task["usage"]
    assert usage["input_tokens"] == 100
    assert usage["output_tokens"] == len(answer.split())
    assert usage["cache_creation_input_tokens"] == 20
    assert usage["cache_read_input_tokens"] == 30
    assert usage["total_cost_usd"] is not None and usage["total_cost_usd"] > 0
    assert len(script.requests) == 1
    assert "Say hello." in json.dumps(script.requests[0]["messages"])
    # the transcript: init, the streamed text (deltas add up to the answer), the result
    assert {"init", "text", "result"} <= set(kinds(data))
    assert "".join(d["text"] for d in of_kind(data, "text_delta")) == answer
    assert of_kind(data, "init")[0]["cwd"] == str(cwd)


def test_bash_allowed(bridge, script, cwd):
    script.push(bash("touch allowed.txt"), text("Created it."))
    task_id = bridge.create_task("Create allowed.txt.", cwd)

    def allow(event):
        perm = event["data"]["data"]
        assert perm["tool_name"] == "Bash" and perm["input"]["command"] == "touch allowed.txt"
        assert perm["status"] == "pending"
        body = bridge.ok(bridge.decide(task_id, "allow", request_id=perm["request_id"]))
        assert body["status"] == "allowed"

    react = on_first_permission(allow)
    events = follow(bridge, task_id, react)
    data = check_stream(bridge, task_id, events, "done")

    assert react.seen, "no permission_request event"
    assert (cwd / "allowed.txt").exists()
    assert bridge.output_of(task_id)["task"]["result"] == "Created it."
    assert len(script.requests) == 2
    [block] = tool_results(script.requests[1])
    assert not block.get("is_error"), block
    decisions = of_kind(data, "permission_decision")
    assert [d["status"] for d in decisions] == ["allowed"]
    assert bridge.permissions(task_id) == []


def test_bash_denied_with_message(bridge, script, cwd):
    message = "Not today: E2E-DENY-7781."
    script.push(bash("touch denied.txt"), text("Understood, I did not create it."))
    task_id = bridge.create_task("Create denied.txt.", cwd)

    def deny(event):
        body = bridge.ok(
            bridge.decide(task_id, "deny", request_id=event["data"]["data"]["request_id"], message=message)
        )
        assert (body["status"], body["message"]) == ("denied", message)

    react = on_first_permission(deny)
    events = follow(bridge, task_id, react)
    check_stream(bridge, task_id, events, "done")

    assert react.seen
    assert not (cwd / "denied.txt").exists()
    assert bridge.output_of(task_id)["task"]["status"] == "done"
    assert len(script.requests) == 2
    [block] = tool_results(script.requests[1])
    assert block.get("is_error") is True
    assert message in result_text(block)


def test_allow_with_edited_command(bridge, script, cwd):
    script.push(bash("touch original.txt"), text("Done."))
    task_id = bridge.create_task("Create original.txt.", cwd)

    def allow_edited(event):
        perm = event["data"]["data"]
        edited = {**perm["input"], "command": "touch edited.txt"}
        body = bridge.ok(bridge.decide(task_id, "allow", request_id=perm["request_id"], updatedInput=edited))
        assert body["updated_input"]["command"] == "touch edited.txt"

    react = on_first_permission(allow_edited)
    events = follow(bridge, task_id, react)
    check_stream(bridge, task_id, events, "done")

    assert react.seen
    assert (cwd / "edited.txt").exists(), "the edited command did not run"
    assert not (cwd / "original.txt").exists(), "the original command ran"


def test_two_pending_permissions(bridge, script, cwd):
    outside = bridge.root / "outside"
    outside.mkdir(exist_ok=True)
    (outside / "x.txt").write_text("E2E-CONTENT-X\n")
    (outside / "y.txt").write_text("E2E-CONTENT-Y\n")
    script.push(
        tool_use("Read", {"file_path": str(outside / "x.txt")}, ("Read", {"file_path": str(outside / "y.txt")})),
        text("Read both."),
    )
    task_id = bridge.create_task("Read x.txt and y.txt.", cwd)
    asked: list[dict] = []
    answered: dict = {}

    def react(event):
        if event["event"] != "permission_request":
            return
        asked.append(event["data"]["data"])
        if len(asked) < 2:
            return
        pending = bridge.permissions(task_id)
        assert [p["request_id"] for p in pending] == [a["request_id"] for a in asked]
        assert [p["tool_name"] for p in pending] == ["Read", "Read"]
        assert {p["input"]["file_path"] for p in pending} == {str(outside / "x.txt"), str(outside / "y.txt")}
        older, newer = pending
        # the newer one by request_id first
        first = bridge.ok(bridge.decide(task_id, "allow", request_id=newer["request_id"]))
        assert (first["request_id"], first["status"]) == (newer["request_id"], "allowed")
        assert [p["request_id"] for p in bridge.permissions(task_id)] == [older["request_id"]]
        # then without request_id: the oldest pending one is answered
        second = bridge.ok(bridge.decide(task_id, "allow"))
        assert (second["request_id"], second["status"]) == (older["request_id"], "allowed")
        assert bridge.permissions(task_id) == []
        # answering an already answered request is a conflict, and nothing changes
        again = bridge.decide(task_id, "deny", request_id=newer["request_id"], message="too late")
        assert again.status_code == 409, again.text
        answered.update(older=older, newer=newer)

    events = follow(bridge, task_id, react)
    data = check_stream(bridge, task_id, events, "done")

    assert len(asked) == 2 and answered, f"expected two pending permission requests, saw {len(asked)}"
    decisions = of_kind(data, "permission_decision")
    assert [(d["request_id"], d["status"]) for d in decisions] == [
        (answered["newer"]["request_id"], "allowed"),
        (answered["older"]["request_id"], "allowed"),
    ]
    assert len(script.requests) == 2
    results = tool_results(script.requests[1])
    assert len(results) == 2 and not any(b.get("is_error") for b in results), results
    contents = "\n".join(result_text(b) for b in results)
    assert "E2E-CONTENT-X" in contents and "E2E-CONTENT-Y" in contents


def test_cancel_while_permission_pending(bridge, script, cwd):
    script.push(bash("touch never.txt"), text("This reply must never be requested."))
    task_id = bridge.create_task("Create never.txt.", cwd)

    def cancel(event):
        body = bridge.ok(bridge.post("/v1/task/cancel", {"task_id": task_id, "reason": "e2e cancel"}))
        assert body["cancel_requested"] is True

    react = on_first_permission(cancel)
    events = follow(bridge, task_id, react)
    data = check_stream(bridge, task_id, events, "cancelled")

    assert react.seen
    request_id = react.seen[0]["data"]["data"]["request_id"]
    task = bridge.output_of(task_id)["task"]
    assert (task["status"], task["bridge_status"]) == ("failed", "cancelled")  # hbridge's word, then Bridge's
    assert "e2e cancel" in task["error"]
    decisions = [d for d in of_kind(data, "permission_decision") if d["request_id"] == request_id]
    assert [d["status"] for d in decisions] == ["cancelled"]
    assert bridge.permissions(task_id) == []
    assert not (cwd / "never.txt").exists()
    assert len(script.requests) == 1, "the CLI asked the model again after the cancel"
    # the output so far is kept, and the events endpoint has the same transcript
    assert {"init", "tool_use", "permission_request", "cancel_requested"} <= set(kinds(data))
    recorded = bridge.ok(bridge.get("/v1/task/events", task_id=task_id))["events"]
    assert [(e["seq"], e["kind"], e["data"]) for e in recorded] == [
        (e["data"]["seq"], e["data"]["kind"], e["data"]["data"]) for e in data
    ]


def test_permission_timeout(tmp_path, fake, claude):
    script = Script(fake)
    script.push(bash("touch late.txt"), text("No permission; giving up."))
    with BridgeServer(tmp_path, fake.url, claude, {"BRIDGE_PERMISSION_TIMEOUT_S": "2"}) as bridge:
        cwd = bridge.work / "timeout"
        cwd.mkdir()
        task_id = bridge.create_task("Create late.txt.", cwd)
        events = follow(bridge, task_id)  # nobody answers
        data = check_stream(bridge, task_id, events, "done")

        [asked] = of_kind(data, "permission_request")
        [decision] = of_kind(data, "permission_decision")
        assert decision["request_id"] == asked["request_id"]
        assert decision["status"] == "expired" and decision["decided_via"] == "timeout"
        assert "No decision within 2 s" in decision["message"]
        assert bridge.output_of(task_id)["task"]["result"] == "No permission; giving up."
        assert not (cwd / "late.txt").exists()
        assert len(script.requests) == 2
        [block] = tool_results(script.requests[1])
        assert block.get("is_error") is True
        assert "No decision within 2 s" in result_text(block)


def test_resume(bridge, script, cwd):
    first_prompt = "Remember the secret word."
    first_answer = "Noted: the secret word is PAPAYA-E2E."
    script.push(text(first_answer), text("It was PAPAYA-E2E."))
    first = bridge.create_task(first_prompt, cwd)
    check_stream(bridge, first, follow(bridge, first), "done")
    session_id = bridge.task(first)["session_id"]
    assert session_id

    second = bridge.create_task("What was the secret word?", cwd, sessionId=session_id)
    data = check_stream(bridge, second, follow(bridge, second), "done")

    assert len(script.requests) == 2
    history = json.dumps(script.requests[1]["messages"])
    assert first_prompt in history and first_answer in history and "What was the secret word?" in history
    detail = bridge.task(second)
    assert detail["session_id"] == session_id and detail["resume_session_id"] == session_id
    assert of_kind(data, "init")[0]["session_id"] == session_id
    assert of_kind(data, "result")[0]["session_id"] == session_id
    assert bridge.output_of(second)["task"]["result"] == "It was PAPAYA-E2E."


def test_api_500(bridge, script, cwd):
    script.push(error(500, "Fake boom E2E"))
    task_id = bridge.create_task("Say hello.", cwd)
    check_stream(bridge, task_id, follow(bridge, task_id), "failed")

    task = bridge.output_of(task_id)["task"]
    assert task["status"] == "failed"
    assert task["exitCode"] == 1
    assert "API Error: 500" in task["error"] and "Fake boom E2E" in task["error"], task["error"]
    assert len(script.requests) == 1


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="the CLI refuses only when run as root")
def test_skip_permissions_as_root(bridge, script, cwd):
    task_id = bridge.create_task("Create marker.txt.", cwd, skip_permissions=True)
    data = check_stream(bridge, task_id, follow(bridge, task_id), "failed")

    detail = bridge.task(task_id)
    assert detail["status"] == "failed"
    assert detail["exitCode"] == 1
    assert "--dangerously-skip-permissions cannot be used with root/sudo privileges" in detail["error"]
    assert "--dangerously-skip-permissions" in of_kind(data, "spawned")[0]["argv"]
    assert script.requests == [], "the CLI called the API although it refused to run"
