"""Issue 32, in the browser: the "Notify me" button, a desktop notification when a task needs a decision or ends, and
the count of waiting decisions in the tab's title and favicon (static/bridge/notify.js), in real headless Chromium
against a real `runbridge` running the fake stream-json agent (tests/fakes/fake_claude.py).

Chromium shows no desktop notification a test can read, so an init script wraps window.Notification: each one shown
is recorded in the tab's sessionStorage (kept across reloads), and requestPermission calls are counted, before the
real ones run. Chromium's permission is granted to the test's context (`grant_permissions`).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urljoin

import pytest

from tests.bridge_server import BridgeServer
from tests.browser.chromium import expect, shot
from tests.support import fake_agent_script

if TYPE_CHECKING:
    from playwright.sync_api import Page

pytestmark = pytest.mark.e2e

RECORDER = """(() => {
  const Real = window.Notification;
  const read = (key) => JSON.parse(sessionStorage.getItem(key) || "[]");
  window.notificationsShown = () => read("test.notifications");
  window.notificationsOnPage = [];
  window.Notification = class extends Real {
    constructor(title, options) {
      super(title, options);
      const shown = { title, body: options.body, tag: options.tag };
      sessionStorage.setItem("test.notifications", JSON.stringify([...read("test.notifications"), shown]));
      window.notificationsOnPage.push(this);
    }
    static requestPermission() {
      sessionStorage.setItem("test.asked", JSON.stringify([...read("test.asked"), Real.permission]));
      return Real.requestPermission();
    }
  };
})()"""
ASKS = 'ask Bash {"command": "true"}\nsay finished'
ICON = "document.querySelector('link[rel=icon]').href"
# A pixel of the upper left corner of an icon drawn at 64×64 px, where the badge leaves the favicon as it was.
CORNER = """async (href) => {
  const image = new Image();
  image.src = href;
  await image.decode();
  const canvas = document.createElement("canvas");
  canvas.width = canvas.height = 64;
  const pen = canvas.getContext("2d");
  pen.drawImage(image, 0, 0, 64, 64);
  return [...pen.getImageData(12, 12, 1, 1).data];
}"""


@pytest.fixture(scope="module")
def bridge(tmp_path_factory):
    root = tmp_path_factory.mktemp("notify")
    with BridgeServer(root, "http://127.0.0.1:9", fake_agent_script(root), {"BRIDGE_KILL_GRACE_S": "1"}) as server:
        yield server


@pytest.fixture
def allowed(context, bridge):
    """Notifications allowed for Bridge's origin, for one test."""
    context.grant_permissions(["notifications"], origin=bridge.url)
    yield
    context.clear_permissions()


def workdir(bridge: BridgeServer, name: str) -> Path:
    path = bridge.work / name
    path.mkdir()
    return path


def recorded_page(context, bridge: BridgeServer, path: str, on_socket=None) -> tuple[Page, str, str]:
    """A new page with the recorder, opened at `path`; with the title and the favicon's address the server rendered
    (the page's script may count in them before a test reads them)."""
    page = context.new_page()
    if on_socket is not None:
        page.on("websocket", on_socket)
    page.add_init_script(RECORDER)
    response = page.goto(bridge.url + path)
    assert response is not None
    html = response.text()
    title = re.search(r"<title>(.*?)</title>", html, re.DOTALL)
    icon = re.search(r'<link rel="icon" href="([^"]+)"', html)
    assert title and icon, "the page has a title and a favicon"
    return page, title.group(1), urljoin(page.url, icon.group(1))


def shown(page, tag: str) -> list[dict]:
    """The notifications the tab has shown whose tag begins with `tag`."""
    return [
        notification for notification in page.evaluate("notificationsShown()") if notification["tag"].startswith(tag)
    ]


def wait_shown(page, tag: str) -> dict:
    """The notification whose tag begins with `tag`, once the page has shown it."""
    page.wait_for_function("(tag) => notificationsShown().some((n) => n.tag.startsWith(tag))", arg=tag)
    return shown(page, tag)[0]


def decision_tag(task_id: str) -> str:
    """The tag of a notification of any of the task's requests (each request's id follows it)."""
    return f"bridge-decision-{task_id}-"


def wait_for_request(bridge: BridgeServer, task_id: str) -> None:
    """Until the task's agent has asked, as the task's event stream says."""
    events = bridge.stream(task_id)
    assert any(event["event"] == "permission_request" for event in events), f"task {task_id} ended without asking"
    events.close()


# --- tests --------------------------------------------------------------------------------------------------------


def test_the_notify_button_shows_while_the_browser_has_not_been_asked_and_asks(context, bridge):
    context.clear_permissions()
    page, _, _ = recorded_page(context, bridge, "/usage/")
    assert page.evaluate("Notification.permission") == "default"
    button = page.locator("#notify-me")
    expect()(button).to_be_visible()
    shot(page, "notify-me-button")
    button.click()
    page.wait_for_function("() => JSON.parse(sessionStorage.getItem('test.asked') || '[]').length === 1")
    # headless Chromium answers at once (denied): once asked, the button is gone
    expect()(button).to_be_hidden()
    assert page.evaluate("Notification.permission") != "default"
    page.close()


def test_a_decision_and_an_end_are_told_once_and_the_title_and_icon_count_what_waits(context, bridge, allowed):
    """On a page with no live rows of its own (Usage): the request is told once even as later news repeats it and
    after a reload, the title and favicon count it until it is decided, and each end is told once."""
    cwd = workdir(bridge, "told-once")
    page, plain_title, plain_icon = recorded_page(context, bridge, "/usage/")
    expect()(page.locator("#notify-me")).to_be_hidden()
    asking = bridge.create_task(ASKS, cwd, timeout_s=600)
    decision = wait_shown(page, decision_tag(asking))
    assert decision["title"] == "Decision needed" and decision["body"] == f"Bash · {ASKS}"
    expect()(page).to_have_title(f"(1) {plain_title}")
    page.wait_for_function(f"() => {ICON}.startsWith('data:image/png')")
    assert page.evaluate(CORNER, page.evaluate(ICON)) == page.evaluate(CORNER, plain_icon) != [0] * 4
    shot(page, "notify-pending-count")

    quick = bridge.create_task("say quick one", cwd)  # news that repeats the waiting request in the list
    assert wait_shown(page, f"bridge-end-{quick}") == {
        "title": "Task done",
        "body": "say quick one",
        "tag": f"bridge-end-{quick}",
    }
    page.reload()
    expect()(page).to_have_title(f"(1) {plain_title}")  # the first message after the reload is read
    assert len(shown(page, decision_tag(asking))) == 1

    assert bridge.decide(asking, "allow").status_code == 200
    expect()(page).to_have_title(plain_title)
    page.wait_for_function(f"(plain) => {ICON} === plain", arg=plain_icon)
    end = wait_shown(page, f"bridge-end-{asking}")
    assert (end["title"], end["body"]) == ("Task done", ASKS)
    last = bridge.create_task("say last one", cwd)  # news after the end, with the ended task's row again
    wait_shown(page, f"bridge-end-{last}")
    assert [len(shown(page, f"bridge-end-{task}")) for task in (asking, quick, last)] == [1, 1, 1]
    assert len(shown(page, decision_tag(asking))) == 1
    page.close()


def test_a_request_that_waited_before_the_tab_opened_is_not_told(context, bridge, allowed):
    """A new tab counts what waits already, and tells only of what comes after it opened."""
    cwd = workdir(bridge, "before-the-tab")
    earlier = bridge.create_task(ASKS, cwd, timeout_s=600)
    wait_for_request(bridge, earlier)
    page, plain_title, _ = recorded_page(context, bridge, "/usage/")
    expect()(page).to_have_title(f"(1) {plain_title}")
    later = bridge.create_task(ASKS, cwd, timeout_s=600)
    wait_shown(page, decision_tag(later))
    expect()(page).to_have_title(f"(2) {plain_title}")
    assert shown(page, decision_tag(earlier)) == []
    for task_id in (earlier, later):
        assert bridge.decide(task_id, "allow").status_code == 200
    page.close()


def test_a_click_on_a_notification_opens_its_task(context, bridge, allowed):
    page, _, _ = recorded_page(context, bridge, "/usage/")
    task_id = bridge.create_task(ASKS, workdir(bridge, "clicked"), timeout_s=600)
    wait_shown(page, decision_tag(task_id))
    page.evaluate("notificationsOnPage[0].dispatchEvent(new Event('click'))")
    page.wait_for_url(f"{bridge.url}/tasks/{task_id}/")
    expect()(page.locator(".permission .state")).to_have_text("pending")
    assert bridge.decide(task_id, "allow").status_code == 200
    page.close()


def test_the_dashboard_counts_over_its_own_socket(context, bridge, allowed):
    """The dashboard follows /ws/tasks/ already: the count and the notifications read that socket, no second one."""
    sockets: list[str] = []
    page, plain_title, _ = recorded_page(context, bridge, "/", lambda socket: sockets.append(socket.url))
    task_id = bridge.create_task(ASKS, workdir(bridge, "dashboard"), timeout_s=600)
    wait_shown(page, decision_tag(task_id))
    expect()(page).to_have_title(f"(1) {plain_title}")
    expect()(page.locator("#pending-permissions")).to_have_text("1")
    assert [url.split("?")[0].removeprefix(bridge.url.replace("http", "ws")) for url in sockets] == ["/ws/tasks/"]
    assert bridge.decide(task_id, "allow").status_code == 200
    expect()(page).to_have_title(plain_title)
    page.close()


def test_the_task_page_in_front_does_not_tell_of_its_own_task(context, bridge, allowed):
    """The person sees a request arrive on its task's page; a request of another task is told."""
    cwd = workdir(bridge, "in-front")
    twice = json.dumps({"command": "true"})
    shown_task = bridge.create_task(f"ask Bash {twice}\nask Bash {twice}\nsay finished", cwd, timeout_s=600)
    page, _, _ = recorded_page(context, bridge, f"/tasks/{shown_task}/")
    expect()(page.locator(".permission .state")).to_have_text("pending")
    assert bridge.decide(shown_task, "allow").status_code == 200  # its second request comes after the page
    expect()(page.locator(".permission .state")).to_have_text(["pending", "allowed"])  # newest first
    other = bridge.create_task(ASKS, cwd, timeout_s=600)
    wait_shown(page, decision_tag(other))
    assert [n for n in page.evaluate("notificationsShown()") if shown_task in n["tag"]] == []
    for task_id in (shown_task, other):
        assert bridge.decide(task_id, "allow").status_code == 200
    page.close()
