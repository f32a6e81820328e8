"""Issue 29: a phone is a first-class screen. Every page, at 390×844 (a phone) and at 1280×800, is no wider than the
window, with tasks whose prompts, directories, targets and output hold long words that have nowhere to break; at
the phone size the navigation collapses behind a menu button and the dashboard shows each task as a card.

Real headless Chromium against a real `runbridge` running the fake stream-json agent (tests/browser/chromium.py).
"""

from __future__ import annotations

import json
import random
import string
from dataclasses import dataclass

import pytest

from tests.bridge_server import BridgeServer
from tests.browser.chromium import expect, logged_in, shot, start_browser
from tests.support import fake_agent_script

pytestmark = pytest.mark.e2e

SIZES = {"phone": {"width": 390, "height": 844}, "desktop": {"width": 1280, "height": 800}}
# What a dashboard card shows, by the label each field carries.
CARD_FIELDS = ("Status", "Prompt", "Agent", "Directory", "Elapsed", "Cost")
SEED = 29

# The elements that stick out past the right edge of the window, for the failure message.
OVERFLOWING_JS = """() => [...document.querySelectorAll("body *")]
    .filter((node) => node.getBoundingClientRect().right > window.innerWidth + 0.5)
    .slice(-5)
    .map((node) => `${node.tagName}.${node.className}: right edge at ${node.getBoundingClientRect().right}`)"""


def unbroken(rng: random.Random, length: int) -> str:
    """A word with nowhere a line may break: letters and digits only."""
    return "".join(rng.choice(string.ascii_letters + string.digits) for _ in range(length))


def sentence(rng: random.Random, words: int) -> str:
    return " ".join("".join(rng.choices(string.ascii_lowercase, k=rng.randint(2, 11))) for _ in range(words))


@dataclass
class Scene:
    """Tasks in each state a page shows, made of generated words: a sentence to wrap, words that cannot."""

    finished: str
    waiting: str  # running, with a permission waiting for an answer
    queued: str  # for a supervisor that does not exist, so it waits and says why
    sentence: str  # the finished task's first words, which must wrap between words


@pytest.fixture(scope="module")
def bridge(tmp_path_factory):
    root = tmp_path_factory.mktemp("screens")
    with BridgeServer(root, "http://127.0.0.1:9", fake_agent_script(root), {"BRIDGE_KILL_GRACE_S": "1"}) as server:
        yield server


@pytest.fixture(scope="module")
def scene(bridge: BridgeServer) -> Scene:
    rng = random.Random(SEED)
    deep = bridge.work / unbroken(rng, 180) / unbroken(rng, 60)  # a directory name no line can break
    deep.mkdir(parents=True)
    words = sentence(rng, 30)
    finished = bridge.create_task(
        f"say {words} {unbroken(rng, 240)}\nflood 12 700\nsay {unbroken(rng, 900)}", deep, permission_mode="approve"
    )
    command = json.dumps({"command": f"touch {unbroken(rng, 300)}"})
    waiting = bridge.create_task(f"say {sentence(rng, 8)}\nask Bash {command}", deep, timeout_s=3600)
    queued = bridge.create_task(f"say {unbroken(rng, 400)}", deep, target=unbroken(rng, 120))
    return Scene(finished, waiting, queued, words)


@pytest.fixture(scope="module")
def context(playwright_api, bridge, tmp_path_factory):
    ctx = logged_in(playwright_api, bridge, tmp_path_factory.mktemp("profile"))
    yield ctx
    ctx.close()


@pytest.fixture(scope="module")
def stranger(playwright_api, tmp_path_factory):
    """A browser that has not logged in: it sees the login page."""
    ctx = start_browser(playwright_api, tmp_path_factory.mktemp("stranger"))
    ctx.set_default_timeout(20_000)
    yield ctx
    ctx.close()


def opened(ctx, url: str, size: str):
    page = ctx.new_page()
    page.set_viewport_size(SIZES[size])
    page.goto(url)
    return page


def ready_when_live(page) -> None:
    expect()(page.locator("#live")).to_have_text("live")


def dashboard(page, scene: Scene) -> None:
    ready_when_live(page)
    for task in (scene.finished, scene.waiting, scene.queued):
        expect()(page.locator(f"#task-{task}")).to_be_visible()


def finished_task(page, scene: Scene) -> None:
    expect()(page.locator("#status")).to_have_text("done")
    expect()(page.locator("#outcome")).to_be_visible()


def waiting_task(page, scene: Scene) -> None:
    expect()(page.locator(".permission .state")).to_have_text("pending")


def queued_task(page, scene: Scene) -> None:
    expect()(page.locator("#wait-reason")).to_be_visible()


def shown(selector: str):
    def ready(page, scene: Scene) -> None:
        expect()(page.locator(selector).first).to_be_visible()

    return ready


def in_admin(page, scene: Scene) -> None:
    """The finished task's page in Django's admin, by the task page's own link to it."""
    page.get_by_role("link", name="In admin").click()
    expect()(page.locator("#task_form")).to_be_visible()


def decision_link(page, scene: Scene) -> None:
    """The waiting task's Allow link, where the list of pending decisions posts it, opened (which decides nothing)."""
    card = page.locator(f'.pending-decision:has(a[href="/tasks/{scene.waiting}/"])')
    page.goto(card.locator("form").first.evaluate("form => form.action"))
    expect()(page.locator("#decide-confirm")).to_be_visible()


# Every page, by name: its path (given the scene) and what shows it is ready to be measured.
PAGES = {
    "dashboard": (lambda s: "/", dashboard),
    "task-finished": (lambda s: f"/tasks/{s.finished}/", finished_task),
    "task-waiting": (lambda s: f"/tasks/{s.waiting}/", waiting_task),
    "task-queued": (lambda s: f"/tasks/{s.queued}/", queued_task),
    "new-task": (lambda s: "/tasks/new", shown("#new-task")),
    "usage": (lambda s: "/usage/", shown("svg.chart")),
    "webhooks": (lambda s: "/webhooks/", shown("#webhooks-none")),
    "error": (lambda s: f"/tasks/{s.sentence.replace(' ', '')}/", shown("#error-message")),
    "admin": (lambda s: "/admin/", shown("#content")),
    "admin-tasks": (lambda s: "/admin/jobs/task/", shown("#result_list")),
    "admin-task": (lambda s: f"/tasks/{s.finished}/", in_admin),
    "decide-pending": (lambda s: "/decide/", shown(".pending-decision .tap")),
    "decide-link": (lambda s: "/decide/", decision_link),
    "decide-refused": (lambda s: f"/decide/{s.sentence.replace(' ', '')}", shown("#decide-refused")),
}


def scroll_and_window_width(page) -> tuple[int, int]:
    return tuple(page.evaluate("[document.documentElement.scrollWidth, window.innerWidth]"))


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("name", PAGES)
def test_every_page_fits_the_width_of_the_window(context, bridge, scene, name, size):
    path, ready = PAGES[name]
    page = opened(context, bridge.url + path(scene), size)
    try:
        ready(page, scene)
        shot(page, f"screen-{name}-{size}")
        scroll_width, window_width = scroll_and_window_width(page)
        assert scroll_width <= window_width, page.evaluate(OVERFLOWING_JS)
    finally:
        page.close()


@pytest.mark.parametrize("size", SIZES)
def test_the_login_page_fits_the_width_of_the_window(stranger, bridge, size):
    page = opened(stranger, bridge.url + "/", size)
    try:
        expect()(page.locator("input[name=password]")).to_be_visible()
        shot(page, f"screen-login-{size}")
        scroll_width, window_width = scroll_and_window_width(page)
        assert scroll_width <= window_width, page.evaluate(OVERFLOWING_JS)
    finally:
        page.close()


# What each field of a dashboard row shows: its label (the ::before a card shows), where the cell is, and where the
# cell's own content begins.
CARD_CELLS_JS = """(row) => [...row.querySelectorAll("td[data-label]")].map((cell) => {
    const box = cell.getBoundingClientRect();
    const content = document.createRange();
    content.selectNodeContents(cell);
    return {label: cell.dataset.label, shown: getComputedStyle(cell, "::before").content, text: cell.innerText.trim(),
            top: box.top, left: box.left, right: box.right, contentLeft: content.getBoundingClientRect().left};
})"""


def test_at_phone_size_each_task_on_the_dashboard_is_a_card_of_labelled_fields(context, bridge, scene):
    page = opened(context, bridge.url + "/", "phone")
    try:
        dashboard(page, scene)
        expect()(page.locator("#tasks thead")).to_be_hidden()
        width = page.evaluate("window.innerWidth")
        for task in (scene.finished, scene.waiting, scene.queued):
            cells = {cell["label"]: cell for cell in page.locator(f"#task-{task}").evaluate(CARD_CELLS_JS)}
            fields = [cells[label] for label in CARD_FIELDS]
            for cell in fields:
                assert cell["shown"] == f'"{cell["label"]}"' and cell["text"], cell
                assert cell["left"] >= 0 and cell["right"] <= width, cell
                assert cell["contentLeft"] >= cell["left"] + 80, f"the value overlaps its label: {cell}"
            tops = [cell["top"] for cell in fields]
            assert tops == sorted(tops) and len(set(tops)) == len(tops), f"not one field under another: {fields}"
        shot(page, "screen-dashboard-cards")
    finally:
        page.close()


def test_at_phone_size_the_menu_folds_behind_its_button(context, bridge):
    page = opened(context, bridge.url + "/usage/", "phone")
    try:
        links = page.locator(".topbar nav a")
        expect()(links.first).to_be_hidden()
        page.get_by_text("Menu", exact=True).click()
        expect()(links).to_have_text(["Tasks", "New task", "Decisions", "Rules", "Usage", "Webhooks", "Admin"])
        for link in links.all():
            expect()(link).to_be_visible()
        expect()(page.get_by_role("button", name="Log out")).to_be_visible()
        shot(page, "screen-menu-open-phone")
    finally:
        page.close()


def test_at_desktop_size_the_menu_is_always_shown(context, bridge):
    page = opened(context, bridge.url + "/usage/", "desktop")
    try:
        for link in page.locator(".topbar nav a").all():
            expect()(link).to_be_visible()
        expect()(page.get_by_text("Menu", exact=True)).to_be_hidden()
    finally:
        page.close()


# Which words of an element's text do not lie on one line (words too long for a line, and one cut short with "…",
# aside), and how many lines that text takes.
WORDS_JS = """(element) => {
    const node = [...element.childNodes].find((child) => child.nodeType === Node.TEXT_NODE);
    const text = node.textContent;
    const words = [...text.matchAll(/\\S+/g)].filter((word) => word[0].length <= 30 && !word[0].includes("…"));
    const split = words.filter((word) => {
        const range = document.createRange();
        range.setStart(node, word.index);
        range.setEnd(node, word.index + word[0].length);
        return range.getClientRects().length !== 1;
    }).map((word) => word[0]);
    const all = document.createRange();
    all.setStart(node, 0);
    all.setEnd(node, text.length);
    return {words: words.length, split, lines: new Set([...all.getClientRects()].map((r) => Math.round(r.top))).size};
}"""


# Where a prompt of words is shown: the page's path, and the prompt's element there.
PROMPTS = {
    "dashboard-finished": (lambda s: "/", lambda s: f"#task-{s.finished} .prompt"),
    "dashboard-waiting": (lambda s: "/", lambda s: f"#task-{s.waiting} .prompt"),
    "task-page": (lambda s: f"/tasks/{s.finished}/", lambda s: ".prompt-title"),
}


@pytest.mark.parametrize("where", PROMPTS)
def test_at_phone_size_a_long_prompt_wraps_between_its_words(context, bridge, scene, where):
    path, selector = PROMPTS[where]
    page = opened(context, bridge.url + path(scene), "phone")
    try:
        prompt = page.locator(selector(scene))
        expect()(prompt).to_be_visible()
        layout = prompt.evaluate(WORDS_JS)
        assert layout["words"] >= 8 and layout["lines"] >= 2, layout
        assert layout["split"] == [], f"words broken across lines on the {where}: {layout}"
    finally:
        page.close()
