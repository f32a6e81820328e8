"""Issue 32: a decision link, opened on a phone. A task's agent asks to run a command; its Allow link (as the list of
pending decisions posts to it, made by actions.decision_links) is opened at 390×844 in a browser that never logged
in; opening it decides nothing, tapping Allow does, once, and the task goes on to done.

Real headless Chromium against a real `runbridge` running the fake stream-json agent (tests/browser/chromium.py).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.bridge_server import BridgeServer
from tests.browser.chromium import expect, shot, start_browser
from tests.support import fake_agent_script

pytestmark = pytest.mark.e2e

PHONE = {"width": 390, "height": 844}
COMMAND = "touch tapped-on-a-phone.txt"


@pytest.fixture(scope="module")
def bridge(tmp_path_factory):
    root = tmp_path_factory.mktemp("decide-link")
    with BridgeServer(root, "http://127.0.0.1:9", fake_agent_script(root), {"BRIDGE_KILL_GRACE_S": "1"}) as server:
        yield server


@pytest.fixture
def phone(playwright_api, tmp_path):
    """A browser that has never logged in to Bridge, at a phone's size."""
    ctx = start_browser(playwright_api, tmp_path / "phone-profile")
    ctx.set_default_timeout(20_000)
    page = ctx.new_page()
    page.set_viewport_size(PHONE)
    yield page
    ctx.close()


def asked(bridge: BridgeServer, task_id: str) -> dict:
    """The task's permission request, once its event arrives."""
    for event in bridge.stream(task_id):
        if event["event"] == "permission_request":
            return event["data"]
    raise AssertionError(f"task {task_id} ended without asking")


def allow_link(page, bridge: BridgeServer, task_id: str) -> str:
    """The Allow link of the task's request, from the list of pending decisions (the page a logged-in person sees)."""
    page.set_viewport_size(PHONE)
    page.goto(f"{bridge.url}/decide/")
    card = page.locator(f'.pending-decision:has(a[href="/tasks/{task_id}/"])')
    expect()(card).to_contain_text(COMMAND)
    shot(page, "decide-pending-phone")
    return card.locator("form").first.evaluate("form => form.action")


def fits_the_width(page) -> None:
    scroll_width, window_width = page.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")
    assert scroll_width <= window_width, (scroll_width, window_width)


def test_an_allow_link_opened_on_a_phone_lets_the_task_go_on(page, phone, bridge):
    task_id = bridge.create_task(f"ask Bash {json.dumps({'command': COMMAND})}\nsay done", bridge.work, timeout_s=120)
    request = asked(bridge, task_id)
    link = allow_link(page, bridge, task_id)
    assert link.startswith(f"{bridge.url}/decide/"), link

    phone.goto(link)
    expect()(phone.locator("h1")).to_have_text("Allow Bash?")
    expect()(phone.locator("#decide-input")).to_contain_text(COMMAND)
    expect()(phone.get_by_role("link", name=task_id)).to_be_visible()
    expect()(phone.locator(".topbar .menu")).to_have_count(0)  # nobody is logged in
    fits_the_width(phone)
    button = phone.locator("#decide-confirm")
    box = button.bounding_box()
    assert box is not None and box["height"] >= 44 and box["width"] >= PHONE["width"] / 2, box
    shot(phone, "decide-link-phone")
    assert [p["status"] for p in bridge.permissions(task_id)] == ["pending"], "opening the link decided"

    button.click()
    expect()(phone.locator("#decide-outcome")).to_have_text("Allowed: the task goes on")
    shot(phone, "decide-link-allowed-phone")
    events = list(bridge.stream(task_id))
    assert events[-1]["event"] == "end" and events[-1]["data"]["status"] == "done", events[-1]
    assert (Path(bridge.work) / "tapped-on-a-phone.txt").exists(), "the agent ran what was allowed"
    [decided] = [event["data"]["data"] for event in events if event["event"] == "permission_decision"]
    assert decided["request_id"] == request["request_id"]
    assert (decided["status"], decided["decided_via"], decided["decided_by"]) == ("allowed", "link", "link")

    phone.goto(link)  # the same link again: it decides nothing more, and says how it was decided
    expect()(phone.locator("#decide-refused")).to_have_text("Nothing left to decide")
    expect()(phone.locator("#decide-reason")).to_contain_text("already allowed via link")
    fits_the_width(phone)
    shot(phone, "decide-link-used-phone")
