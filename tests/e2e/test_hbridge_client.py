"""End to end: a client written only from hbridge's README and DESIGN, unchanged, against a real Bridge running the
real Claude Code CLI (which talks only to the scripted fake Anthropic server on 127.0.0.1).

What the client knows is hbridge's protocol: HTTP Basic auth with user `bridge` and the key as password; create
answers `{"task_id", "status": "created"}`; the SSE stream at /v1/task/output/stream sends `connected`, `chunk`,
`tool_progress`, `permission_request`, `status`, `error` and `done`, named by `event:` lines and also by the `type`
in each `data:` line; a permission is answered by POST /v1/task/permission with `task_id`, `request_id` and
`behavior`; /v1/task/output is polled until `status` is done or failed. Synchronisation follows the stream; the
client's poll only ever runs after `done`, so it answers at once.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Iterator

import httpx
import pytest

from tests import bridge_server
from tests.bridge_server import BridgeServer, Script
from tests.fakes.anthropic_server import FakeAnthropic, text, tool_use

pytestmark = pytest.mark.e2e


class HbridgeClient:
    """An hbridge client, from hbridge's documentation alone (nothing Bridge-specific)."""

    def __init__(self, base_url: str, key: str) -> None:
        auth = base64.b64encode(f"bridge:{key}".encode()).decode()
        self.http = httpx.Client(
            base_url=base_url, headers={"Authorization": f"Basic {auth}"}, timeout=30.0, trust_env=False
        )

    def close(self) -> None:
        self.http.close()

    def _json(self, response: httpx.Response) -> dict:
        assert response.status_code == 200, f"{response.request.url}: {response.status_code} {response.text}"
        return response.json()

    def create(self, prompt: str, **fields) -> dict:
        return self._json(self.http.post("/v1/task/create", json={"prompt": prompt, **fields}))

    def respond(self, event: dict, behavior: str = "allow") -> dict:
        body = {"task_id": event["task_id"], "request_id": event["request_id"], "behavior": behavior}
        return self._json(self.http.post("/v1/task/permission", json=body))

    def cancel(self, task_id: str) -> dict:
        return self._json(self.http.post("/v1/task/cancel", json={"task_id": task_id}))

    def output(self, task_id: str, interval_s: float = 3.0, max_polls: int = 100) -> tuple[dict, int]:
        """Poll until status is done or failed, as hbridge says; returns the reply and how many polls it took."""
        for polls in range(1, max_polls + 1):
            reply = self._json(self.http.get("/v1/task/output", params={"task_id": task_id}))
            if reply["task"]["status"] in ("done", "failed"):
                return reply, polls
            time.sleep(interval_s)
        raise AssertionError(f"task {task_id} never reached done or failed")

    def stream(self, task_id: str, named: bool, deadline_s: float = 90.0) -> Iterator[dict]:
        """SSE events until `done`, each as its payload with `type`: from the `event:` line when `named`, else only
        from the `data:` line (the unnamed form, where every payload says its own type)."""
        deadline = time.monotonic() + deadline_s
        params = {"task_id": task_id}
        with self.http.stream("GET", "/v1/task/output/stream", params=params) as response:
            assert response.status_code == 200, response.read()
            name, data = "message", []
            for line in response.iter_lines():
                assert time.monotonic() < deadline, f"the stream of {task_id} is still open after {deadline_s} s"
                if line:
                    field, _, value = line.partition(":")
                    value = value[1:] if value.startswith(" ") else value
                    if field == "event" and named:
                        name = value
                    elif field == "data":
                        data.append(value)
                    continue
                if data:
                    payload = json.loads("\n".join(data))
                    kind = name if named else payload["type"]
                    yield {**payload, "type": kind}
                    if kind == "done":
                        return
                name, data = "message", []


def follow(client: HbridgeClient, task_id: str, named: bool, react=None) -> list[dict]:
    events = []
    for event in client.stream(task_id, named):
        events.append(event)
        if react is not None:
            react(event)
    assert events and events[-1]["type"] == "done", f"the stream ended without `done`: {events[-3:]}"
    return events


def of_type(events: list[dict], kind: str) -> list[dict]:
    return [e for e in events if e["type"] == kind]


def chunks(events: list[dict]) -> str:
    return "".join(e["chunk"] for e in of_type(events, "chunk"))


# --- fixtures -------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def fake():
    with FakeAnthropic() as server:
        yield server


@pytest.fixture(scope="module")
def bridge(tmp_path_factory, fake):
    with BridgeServer(tmp_path_factory.mktemp("hbridge"), fake.url, bridge_server.claude_bin()) as server:
        yield server


@pytest.fixture
def client(bridge):
    hb = HbridgeClient(bridge.url, bridge.token)
    yield hb
    hb.close()


# --- scenarios --------------------------------------------------------------------------------------------------


def test_a_write_that_needs_permission_answered_from_the_named_stream(bridge, fake, client, cwd):
    target = cwd / "hello.txt"
    answer = "Wrote hello.txt for the hbridge client."
    script = Script(fake)
    script.push(tool_use("Write", {"file_path": str(target), "content": "hello from hbridge\n"}), text(answer))
    created = client.create("Write hello.txt.", cwd=str(cwd), taskTimeoutMs=120_000)
    assert created["status"] == "created" and created["task_id"]
    task_id = created["task_id"]
    answered = []

    def react(event):
        if event["type"] == "permission_request":
            answered.append(client.respond(event))

    events = follow(client, task_id, named=True, react=react)

    assert events[0]["type"] == "connected" and events[0]["task_id"] == task_id
    [asked] = of_type(events, "permission_request")
    assert (asked["task_id"], asked["tool_name"], asked["input"]["file_path"]) == (task_id, "Write", str(target))
    assert [a["status"] for a in answered] == ["allowed"]
    assert target.read_text() == "hello from hbridge\n"
    assert chunks(events) == answer, "the answer's text, streamed once (deltas, not again as the whole block)"
    assert any(p["tool_name"] == "Write" for p in of_type(events, "tool_progress"))
    assert [s["status"] for s in of_type(events, "status")][-1] == "done"
    assert set(s["status"] for s in of_type(events, "status")) <= {"running", "done"}
    assert of_type(events, "error") == []
    assert (events[-1]["status"], events[-1]["exitCode"]) == ("done", 0)
    reply, polls = client.output(task_id)
    assert (reply["retrieval_status"], reply["task"]["status"], reply["task"]["result"], polls) == (
        "success",
        "done",
        answer,
        1,
    )
    assert reply["task"]["usage"]["output_tokens"] is not None
    assert len(script.requests) == 2

    # the same stream again, now read in the unnamed form: the same text and the same end
    again = follow(client, task_id, named=False)
    assert chunks(again) == answer and again[-1] == events[-1]
    assert [e["request_id"] for e in of_type(again, "permission_request")] == [asked["request_id"]]


def test_a_cancelled_task_ends_failed_with_bridges_status_in_the_unnamed_stream(bridge, fake, client, cwd):
    script = Script(fake)
    script.push(tool_use("Bash", {"command": "touch never.txt", "description": "e2e"}), text("Never requested."))
    task_id = client.create("Create never.txt.", cwd=str(cwd))["task_id"]
    cancels = []

    def react(event):
        if event["type"] == "permission_request" and not cancels:
            cancels.append(client.cancel(task_id))

    events = follow(client, task_id, named=False, react=react)

    assert len(cancels) == 1 and cancels[0]["cancel_requested"] is True
    done = events[-1]
    assert (done["status"], done["bridge_status"]) == ("failed", "cancelled")
    assert [s["status"] for s in of_type(events, "status")][-1] == "failed"
    [error] = of_type(events, "error")
    assert error["task_id"] == task_id and error["error"]
    reply, polls = client.output(task_id)
    task = reply["task"]
    assert (task["status"], task["bridge_status"], polls) == ("failed", "cancelled", 1)
    assert task["reason"] == error["error"]
    assert not (cwd / "never.txt").exists()
    assert len(script.requests) == 1, "the CLI asked the model again after the cancel"
