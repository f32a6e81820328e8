"""End to end, issue 32: webhooks and one-tap decision links with the real Claude Code CLI (against the scripted
Anthropic server) behind a real `runbridge`, whose BRIDGE_PUBLIC_URL is its own address, so the links it sends work.

Receivers are HTTP servers on 127.0.0.1 in this process (tests/integration/test_webhooks.py's `Receiver`): each POST
is queued as it arrives, and the tests wait on those queues. One task asks to run a command: its request reaches a
receiver signed (checked with the README's snippet) and with links, the Allow link is tapped in a logged-out Chromium
at a phone's size, and the task's end reaches the receiver with its cost; a receiver that answers 500 three times
gets the same delivery on the fourth try. Then runbridge is stopped and started again while a receiver is down, and
every delivery it was owed arrives once it is back.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.bridge_server import BridgeServer
from tests.browser.chromium import expect, start_browser
from tests.browser.conftest import playwright_api  # noqa: F401 - the browser tests' Playwright, for the phone
from tests.fakes.anthropic_server import text, tool_use
from tests.integration.test_webhooks import Received, Receiver, free_port, verify
from tests.support import wait_until

pytestmark = pytest.mark.e2e

PHONE = {"width": 390, "height": 844}
COMMAND = "touch allowed-from-a-webhook.txt"
BACKOFF_S = 0.2
FAILURES = 3  # the flaky receiver's 500s before it takes a delivery
PINGS = 3  # deliveries owed to a receiver that is down across the restart


@pytest.fixture(scope="module")
def bridge(tmp_path_factory, fake, claude) -> Iterator[BridgeServer]:
    """runbridge on a port picked first, so that the links it makes (on BRIDGE_PUBLIC_URL) are its own address."""
    port = free_port()
    env = {"BRIDGE_PUBLIC_URL": f"http://127.0.0.1:{port}", "BRIDGE_WEBHOOK_BACKOFF_S": str(BACKOFF_S)}
    with BridgeServer(tmp_path_factory.mktemp("webhooks"), fake.url, claude, env, port=port) as server:
        yield server


@pytest.fixture
def phone(request: pytest.FixtureRequest, tmp_path: Path):
    """A browser that has never logged in to Bridge, at a phone's size."""
    ctx = start_browser(request.getfixturevalue("playwright_api"), tmp_path / "phone-profile")
    ctx.set_default_timeout(20_000)
    page = ctx.new_page()
    page.set_viewport_size(PHONE)
    yield page
    ctx.close()


def add_webhook(bridge: BridgeServer, url: str, root: Path, events: list[str] | None = None) -> dict:
    """A webhook for the tasks under `root` (its secret included, as the answer shows it this once)."""
    body = {"url": url, "root": str(root), **({"events": events} if events else {})}
    return bridge.ok(bridge.post("/v1/webhooks", body))


def deliveries(bridge: BridgeServer, webhook: dict) -> list[dict]:
    return bridge.ok(bridge.get(f"/v1/webhooks/{webhook['id']}/deliveries"))["deliveries"]


def signed(got: Received, webhook: dict, event: str) -> dict:
    """The delivery's body, once its headers name `event` and its signature is the webhook's over its raw body."""
    assert got.headers["X-Bridge-Event"] == event, got.headers
    assert verify(webhook["secret"], got.headers["X-Bridge-Signature"], got.body), f"a bad signature: {got.headers}"
    body = got.json
    assert (body["event"], body["delivery_id"]) == (event, got.delivery_id), body
    return body


def tap_allow(phone, link: str) -> None:
    """Open the decision link, check it shows the request without deciding, and tap Allow."""
    phone.goto(link)
    expect()(phone.locator("h1")).to_have_text("Allow Bash?")
    expect()(phone.locator("#decide-input")).to_contain_text(COMMAND)
    phone.locator("#decide-confirm").click()
    expect()(phone.locator("#decide-outcome")).to_have_text("Allowed: the task goes on")


def test_a_request_is_signed_its_link_allows_from_a_phone_a_failing_receiver_gets_it_later_and_the_end_is_told(
    bridge, script, cwd, phone
):
    with Receiver() as receiver, Receiver(answers=(500,) * FAILURES) as flaky:
        webhook = add_webhook(bridge, receiver.url(), cwd, ["permission.requested", "task.finished"])
        flaky_webhook = add_webhook(bridge, flaky.url(), cwd, ["permission.requested"])
        script.push(tool_use("Bash", {"command": COMMAND, "description": "e2e"}), text("Finished."))
        task_id = bridge.create_task("Run the command.", cwd, permission_mode="approve")

        requested = signed(receiver.next(timeout=45), webhook, "permission.requested")
        assert requested["task"]["id"] == task_id, requested
        assert requested["permission"]["input"]["command"] == COMMAND, requested
        link = requested["permission"]["links"]["allow"]
        assert link.startswith(f"{bridge.url}/decide/"), link

        tries = [signed(flaky.next(), flaky_webhook, "permission.requested") for _ in range(FAILURES + 1)]
        assert len({body["delivery_id"] for body in tries}) == 1, "a retry came as another delivery"
        [logged] = deliveries(bridge, flaky_webhook)
        assert (logged["delivery_id"], logged["status"]) == (tries[0]["delivery_id"], "delivered"), logged
        assert (logged["attempts"], logged["last_status_code"]) == (FAILURES + 1, 200), logged
        assert [p["status"] for p in bridge.permissions(task_id)] == ["pending"], "something decided before the tap"

        tap_allow(phone, link)
        finished = signed(receiver.next(timeout=45), webhook, "task.finished")

    task = bridge.task(task_id)
    ended = (finished["task"]["id"], finished["task"]["status"], task["bridge_status"])
    assert ended == (task_id, "done", "done"), (finished, task)
    assert (cwd / "allowed-from-a-webhook.txt").exists(), "the command the link allowed did not run"
    usage = {name: count for name, count in task["usage"].items() if name != "total_cost_usd"}
    cost = task["usage"]["total_cost_usd"]
    assert finished["cost_usd"] == cost and cost > 0, (finished, task)
    assert finished["usage"] == {**usage, "num_turns": task["num_turns"]}, (finished["usage"], task)
    assert usage["output_tokens"] > 0 and task["num_turns"] > 0, task
    events = bridge.ok(bridge.get("/v1/task/events", task_id=task_id))["events"]
    [decided] = [event["data"] for event in events if event["kind"] == "permission_decision"]
    assert (decided["status"], decided["decided_via"]) == ("allowed", "link"), decided


def test_deliveries_pending_across_a_restart_all_arrive_once_the_receiver_is_back(bridge, cwd):
    port = free_port()  # nothing listens there until the restart is over
    webhook = add_webhook(bridge, f"http://127.0.0.1:{port}/hook", cwd)
    owed = {bridge.ok(bridge.post(f"/v1/webhooks/{webhook['id']}/test", {}))["delivery_id"] for _ in range(PINGS)}
    wait_until(
        lambda: any(d["attempts"] for d in deliveries(bridge, webhook)), what="a try at the receiver that is down"
    )

    bridge.stop()
    bridge.start()
    assert {d["delivery_id"] for d in deliveries(bridge, webhook) if d["status"] == "pending"} == owed

    with Receiver(port=port) as receiver:
        got = [signed(receiver.next(timeout=30), webhook, "ping") for _ in owed]
        wait_until(
            lambda: all(d["status"] == "delivered" for d in deliveries(bridge, webhook)),
            what="every delivery recorded as delivered",
        )
        assert receiver.got.empty(), f"a delivery came twice: {receiver.got.get().delivery_id}"
    assert sorted(body["delivery_id"] for body in got) == sorted(owed)
