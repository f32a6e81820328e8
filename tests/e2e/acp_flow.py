"""What the ACP agents' end-to-end tests (test_gemini.py, test_qwen.py) do alike: follow a task's SSE stream, and
see one permission request reach REST, MCP and the task page, where it is allowed."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from tests.bridge_server import BridgeServer, data_events
from tests.browser.chromium import expect, logged_in
from tests.integration.test_mcp import Session, over_http

TIMEOUT_S = 120


def run(bridge: BridgeServer, prompt: str, cwd: Path, agent: str, react=None, **fields) -> tuple[str, list[dict]]:
    """Create a task and follow its SSE stream to the end, calling react(task_id, event) on each event."""
    task_id = bridge.create_task(prompt, cwd, agent=agent, timeout_s=TIMEOUT_S, **fields)
    events = []
    for event in bridge.stream(task_id, deadline_s=TIMEOUT_S):
        events.append(event)
        if react is not None:
            react(task_id, event)
    assert events and events[-1]["event"] == "end", f"the stream closed without an `end` event: {events[-3:]}"
    return task_id, data_events(events)


def of_kind(events: list[dict], kind: str) -> list[dict]:
    return [e["data"]["data"] for e in events if e["event"] == kind]


def final_status(events: list[dict]) -> dict:
    assert events[-1]["event"] == "status", events[-1]
    return events[-1]["data"]["data"]


def allow_via_rest(bridge: BridgeServer, asked: list[dict]):
    def react(task_id, event):
        if event["event"] == "permission_request":
            asked.append(event["data"]["data"])
            bridge.ok(bridge.decide(task_id, "allow", request_id=event["data"]["data"]["request_id"]))

    return react


def cancel_on_first_request(bridge: BridgeServer):
    cancelled: list[dict] = []

    def react(task_id, event):
        if event["event"] == "permission_request" and not cancelled:
            cancelled.append(event)
            bridge.ok(bridge.post("/v1/task/cancel", {"task_id": task_id}))

    return react


def asked_everywhere_then_allowed_on_the_page(
    bridge: BridgeServer, agent: str, cwd: Path, playwright_api, profile: Path, shown: str
) -> tuple[str, dict, list[dict]]:
    """A task of `agent` whose agent asks to run a command: the request, shown as `shown`, is listed by REST and by
    MCP's permissions_pending, then allowed by a click on the task page. (task id, the request REST listed, every
    event of the task)."""
    task_id = bridge.create_task("Make the file.", cwd, agent=agent, timeout_s=TIMEOUT_S)
    stream = bridge.stream(task_id, deadline_s=TIMEOUT_S)
    events = []
    for event in stream:
        events.append(event)
        if event["event"] == "permission_request":
            break
    [listed] = bridge.permissions(task_id)
    assert (listed["status"], listed["tool_name"]) == ("pending", shown), listed

    async def pending(session: Session):
        return await session.call("permissions_pending", job_id=task_id)

    with ThreadPoolExecutor(1) as other_thread:  # this one runs Playwright's event loop
        reply = other_thread.submit(over_http, bridge, bridge.token, pending).result()
    assert not reply.is_error and shown in reply.text and task_id in reply.text, reply

    browser = logged_in(playwright_api, bridge, profile)
    try:
        page = browser.new_page()
        page.goto(f"{bridge.url}/tasks/{task_id}/")
        card = page.locator(".permission").first
        expect()(card).to_contain_text(shown)
        card.locator("button.allow").click()
        expect()(card.locator(".decision")).to_contain_text("allowed by user:admin via web")
        expect()(page.locator("#status")).to_have_text("done")
    finally:
        browser.close()
    events += list(stream)
    return task_id, listed, data_events(events)
