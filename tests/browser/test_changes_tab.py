"""The task page's Changes tab, in real headless Chromium against a real `runbridge` whose fake agent edits its
directory: the supervisor snapshots it as the agent starts and records what changed at the end
(jobs/actions/changes.py). The tab lists the files as text, draws the patch with the vendored diff2html, updates
when the task ends while the page is open, and says why when nothing is recorded.

Each test opens its own page on the module's one server; the tasks are run once per module (tests/browser/chromium.py).
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from tests.bridge_server import BridgeServer
from tests.browser.chromium import expect, shot
from tests.support import fake_agent_script

pytestmark = pytest.mark.e2e

MAX_FILES = 10  # the module server's BRIDGE_CHANGES_MAX_FILES (it runs one task at a time: BRIDGE_MAX_CONCURRENT=1)
HTML_NAME = "<img src=x onerror=alert(1)>.txt"
HTML_TEXT = "<b>bold</b><img src=y onerror=alert(2)>"  # that file's one line
QUOTED_NAME = 'café "quoted".txt'  # a name git's patch writes in C quotes
LONG_LINE = "w" * 400  # a word no line can break, in the patch
# What the edit below changes, sorted by path as the record lists it: (status, path as listed, lines).
EDITED = [
    ("added", HTML_NAME, "+1 −0"),
    ("added", QUOTED_NAME, "+1 −0"),
    ("deleted", "gone.txt", "+0 −1"),
    ("added", "logo.bin", "binary"),
    ("renamed", "old-name.txt → new-name.txt", "+0 −0"),
    ("modified", "notes.txt", "+2 −1"),
]
EDIT = (
    f"printf 'one\\nTWO\\nthree\\n{LONG_LINE}\\n' > notes.txt && rm gone.txt && mv old-name.txt new-name.txt"
    f" && printf '{HTML_TEXT}\\n' > '{HTML_NAME}' && head -c 64 /dev/zero > logo.bin && echo bonjour > '{QUOTED_NAME}'"
)


@pytest.fixture(scope="module")
def bridge(tmp_path_factory):
    root = tmp_path_factory.mktemp("changes")
    env = {"BRIDGE_KILL_GRACE_S": "1", "BRIDGE_CHANGES_MAX_FILES": str(MAX_FILES), "BRIDGE_MAX_CONCURRENT": "1"}
    with BridgeServer(root, "http://127.0.0.1:9", fake_agent_script(root), env) as server:
        yield server


def bash(command: str) -> str:
    """The fake agent's script for one Bash call running `command` in the task's directory."""
    return f"ask Bash {json.dumps({'command': command})}"


def repository(path: Path, files: dict[str, str]) -> Path:
    """A git repository at `path` with `files` committed."""
    path.mkdir()
    for name, text in files.items():
        (path / name).write_text(text)
    git = ["git", "-C", str(path), "-c", "user.name=Test", "-c", "user.email=test@example.invalid"]
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "start"]):
        subprocess.run([*git, *args], check=True, capture_output=True)
    return path


def run_to_end(bridge: BridgeServer, cwd: Path, command: str) -> str:
    """A task that runs `command` (allowed by policy) and has ended: its id."""
    task_id = bridge.create_task(bash(command), cwd, permission_mode="bypass")
    ending = list(bridge.stream(task_id))[-1]
    assert ending["event"] == "end" and ending["data"]["status"] == "done", ending
    return task_id


def changes_tab(page, bridge: BridgeServer, task_id: str):
    page.goto(f"{bridge.url}/tasks/{task_id}/")
    page.get_by_role("tab", name=re.compile("^Changes")).click()
    return page.locator("#panel-changes")


@pytest.fixture(scope="module")
def edited(bridge) -> str:
    """A finished task that added (a text file named like HTML, one whose name git's patch quotes, and a binary
    file), modified, deleted and renamed files in a git repository."""
    files = {"notes.txt": "one\ntwo\nthree\n", "gone.txt": "bye\n", "old-name.txt": "moved\nas\nit\nwas\n"}
    return run_to_end(bridge, repository(bridge.work / "edited", files), EDIT)


def test_the_changes_tab_lists_each_changed_file_with_its_status_and_lines(page, bridge, edited):
    panel = changes_tab(page, bridge, edited)
    expect()(panel.locator("#changes-summary")).to_have_text("6 files changed: +4 −2")
    expect()(panel.locator(".change-status")).to_have_text([status for status, _, _ in EDITED])
    expect()(panel.locator(".change-path")).to_have_text([path for _, path, _ in EDITED])
    expect()(panel.locator(".change-lines")).to_have_text([lines for _, _, lines in EDITED])
    expect()(page.locator("#changes-count")).to_have_text("6")
    expect()(page.locator("#changes-reason")).to_be_hidden()
    expect()(page.locator("#changes-truncated")).to_be_hidden()


def test_the_patch_is_drawn_by_diff2html_with_its_added_and_removed_lines(page, bridge, edited):
    panel = changes_tab(page, bridge, edited)
    files = panel.locator("#changes-diff .d2h-file-wrapper")
    expect()(files).to_have_count(5)  # the text files: the binary one has no patch
    notes = files.filter(has=page.locator(".d2h-file-name", has_text="notes.txt"))
    expect()(notes.locator(".d2h-del .d2h-code-line-ctn")).to_have_text(["two"])
    expect()(notes.locator(".d2h-ins .d2h-code-line-ctn")).to_have_text(["TWO", LONG_LINE])
    expect()(files.locator(".d2h-file-name")).to_have_text(
        [HTML_NAME, QUOTED_NAME, "gone.txt", "old-name.txt → new-name.txt", "notes.txt"]
    )
    shot(page, "task-changes")


def test_a_file_name_and_lines_written_like_html_show_as_text(page, bridge, edited):
    panel = changes_tab(page, bridge, edited)
    expect()(panel.locator(".change-path").first).to_have_text(HTML_NAME)
    expect()(panel.locator(".d2h-file-name").first).to_have_text(HTML_NAME)
    expect()(panel.locator(".d2h-file-wrapper").first.locator(".d2h-ins .d2h-code-line-ctn")).to_have_text([HTML_TEXT])
    assert page.locator("img, b").count() == 0, page.locator("#panel-changes").inner_html()


def test_the_patch_downloads_as_the_record_has_it(page, bridge, edited):
    panel = changes_tab(page, bridge, edited)
    link = panel.locator("#changes-download")
    expect()(link).to_be_visible()
    expect()(link).to_have_attribute("download", f"{edited}.patch")
    downloaded = link.evaluate("(a) => fetch(a.href).then((answer) => answer.text())")
    assert downloaded == bridge.ok(bridge.get("/v1/task/changes", task_id=edited))["patch"]


def test_the_transcripts_line_for_the_changes_opens_the_tab(page, bridge, edited):
    page.goto(f"{bridge.url}/tasks/{edited}/")
    entry = page.locator("#transcript .changes-line")
    expect()(entry).to_have_text("Changed 6 files in its directory (+4 −2) Show the changes")
    expect()(page.locator("#panel-changes")).to_be_hidden()
    entry.get_by_role("button", name="Show the changes").click()
    expect()(page.locator("#panel-changes .d2h-file-wrapper").first).to_be_visible()
    expect()(page.locator("#panel-transcript")).to_be_hidden()
    expect()(page.get_by_role("tab", name=re.compile("^Changes"))).to_have_attribute("aria-selected", "true")


def test_the_changes_tab_opens_from_its_address_and_fits_a_phone(page, bridge, edited):
    page.set_viewport_size({"width": 390, "height": 844})
    page.goto(f"{bridge.url}/tasks/{edited}/#changes")
    expect()(page.locator("#changes-diff .d2h-file-wrapper").first).to_be_visible()
    expect()(page.locator("#panel-transcript")).to_be_hidden()
    shot(page, "task-changes-phone")
    width = page.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")
    assert width[0] <= width[1], width


def asking(bridge: BridgeServer, cwd: Path, command: str) -> str:
    """A task whose agent asks to run `command` and waits for the answer."""
    return bridge.create_task(bash(command), cwd, permission_mode="approve")


def allow_when_asked(bridge: BridgeServer, task_id: str) -> None:
    for event in bridge.stream(task_id):
        if event["event"] == "permission_request":
            bridge.ok(bridge.decide(task_id, "allow", request_id=event["data"]["request_id"]))
            return
    raise AssertionError(f"task {task_id} ended without asking")


def test_the_tab_follows_a_task_that_starts_and_ends_while_the_page_is_open(page, bridge):
    """Queued (behind another task: the server runs one at a time), then running, then recorded: each shown as it
    happens, in the same document."""
    cwd = bridge.work / "live"
    cwd.mkdir()
    (cwd / "kept.txt").write_text("kept\n")
    ahead, watched = asking(bridge, cwd, "true"), asking(bridge, cwd, "printf 'fresh\\n' > fresh.txt")
    try:
        panel = changes_tab(page, bridge, watched)
        reason = panel.locator("#changes-reason")
        expect()(reason).to_have_text("Nothing recorded: its agent has not started yet")
        page.evaluate("window.sameDocument = true")

        allow_when_asked(bridge, ahead)
        expect()(page.locator(".permission .state")).to_have_text("pending")
        expect()(reason).to_have_text("Not recorded yet: the task has not ended yet")
        expect()(reason).to_be_visible()

        page.locator(".permission .allow").click()
        expect()(panel.locator("#changes-summary")).to_be_visible()
        expect()(panel.locator("#changes-summary")).to_have_text("1 file changed: +1 −0")
        expect()(panel.locator(".change-path")).to_have_text(["fresh.txt"])
        expect()(panel.locator(".d2h-ins .d2h-code-line-ctn")).to_have_text(["fresh"])
        expect()(reason).to_be_hidden()
        expect()(page.locator("#transcript .changes-line")).to_have_text(
            "Changed 1 file in its directory (+1 −0) Show the changes"
        )
        assert page.evaluate("window.sameDocument") is True
    finally:
        for task_id in (ahead, watched):  # nothing left running for the next test to queue behind
            bridge.post("/v1/task/cancel", {"task_id": task_id})


@pytest.fixture(scope="module")
def large(bridge) -> str:
    """A finished task whose patch is larger than one batch of drawing (256 KiB): four files of about 100 KiB, and
    one of more changed lines than diff2html is let draw (5,000)."""
    cwd = bridge.work / "large"
    cwd.mkdir()
    line = "a line of text that is long enough to weigh fifty"
    command = f"for n in 1 2 3 4; do yes '{line}' | head -n 2000 > big-$n.txt; done && seq 6000 > many-lines.txt"
    return run_to_end(bridge, cwd, command)


def test_a_large_patch_is_drawn_a_batch_at_a_time(page, bridge, large):
    panel = changes_tab(page, bridge, large)
    files = panel.locator(".d2h-file-wrapper .d2h-file-name")
    expect()(files).to_have_text(["big-1.txt", "big-2.txt"])
    more = panel.locator("#changes-more")
    expect()(more).to_have_text("Draw 3 more files")
    more.click()
    expect()(files).to_have_text(["big-1.txt", "big-2.txt", "big-3.txt", "big-4.txt", "many-lines.txt"])
    expect()(more).to_be_hidden()


def test_a_file_of_too_many_changed_lines_is_not_drawn_and_says_so(page, bridge, large):
    panel = changes_tab(page, bridge, large)
    panel.locator("#changes-more").click()
    many = panel.locator(".d2h-file-wrapper", has=page.locator(".d2h-file-name", has_text="many-lines.txt"))
    expect()(many).to_contain_text("Too large to draw here: download the patch to read it.")
    expect()(many.locator(".d2h-ins")).to_have_count(0)


def test_past_the_file_limit_the_tab_says_what_was_left_out(page, bridge):
    cwd = bridge.work / "many"
    cwd.mkdir()
    task_id = run_to_end(bridge, cwd, "for n in $(seq 12); do echo $n > file-$n.txt; done")
    panel = changes_tab(page, bridge, task_id)
    expect()(panel.locator("#changes-summary")).to_have_text("12 files changed: +10 −0")
    expect()(panel.locator(".change")).to_have_count(MAX_FILES)
    truncated = panel.locator("#changes-truncated")
    expect()(truncated).to_be_visible()
    expect()(truncated).to_have_text(f"Not everything is shown: 2 more files past BRIDGE_CHANGES_MAX_FILES={MAX_FILES}")


def test_a_task_whose_directory_is_gone_says_why_its_changes_are_unavailable(page, bridge):
    cwd = bridge.work / "vanishing"
    cwd.mkdir()
    task_id = run_to_end(bridge, cwd, 'rm -rf "$PWD"')
    panel = changes_tab(page, bridge, task_id)
    reason = panel.locator("#changes-reason")
    expect()(reason).to_be_visible()
    expect()(reason).to_have_attribute("data-state", "unavailable")
    expect()(reason).to_have_text(f"Could not be recorded: the working directory {cwd} no longer exists")
    expect()(panel.locator("#changes-summary")).to_be_hidden()
    expect()(page.locator("#changes-count")).to_be_hidden()


def test_a_task_that_never_started_says_nothing_was_recorded_and_why(page, bridge):
    cwd = bridge.work / "never"
    cwd.mkdir()
    task_id = bridge.create_task(bash("true"), cwd, target="no-such-supervisor")
    panel = changes_tab(page, bridge, task_id)
    reason = panel.locator("#changes-reason")
    expect()(reason).to_be_visible()
    expect()(reason).to_have_attribute("data-state", "none")
    expect()(reason).to_have_text("Nothing recorded: its agent has not started yet")
    expect()(panel.locator(".change")).to_have_count(0)
    expect()(panel.locator("#changes-diff")).to_be_empty()


def test_the_admin_shows_the_patch_on_a_phone_scrolling_its_long_lines(page, bridge, edited):
    """The admin clips what sticks out of a field's row: a long patch line must scroll into view, not be cut off."""
    page.set_viewport_size({"width": 390, "height": 844})
    page.goto(f"{bridge.url}/tasks/{edited}/")
    page.get_by_role("link", name="In admin").click()
    patch = page.locator("pre.changes-patch")
    expect()(patch).to_contain_text(LONG_LINE)
    expect()(page.locator(".changed-files li").first).to_have_text(f"added {HTML_NAME} +1 −0")
    shot(page, "admin-task-changes-phone")
    right, scrolled, window = patch.evaluate(
        "(pre) => { pre.scrollLeft = 200; return [pre.getBoundingClientRect().right, pre.scrollLeft, innerWidth]; }"
    )
    assert right <= window and scrolled > 0, (right, scrolled, window)


def isolated_to_end(bridge: BridgeServer, repo: Path, command: str) -> str:
    task_id = bridge.create_task(bash(command), repo, permission_mode="bypass", isolation="worktree")
    ending = list(bridge.stream(task_id))[-1]
    assert ending["event"] == "end" and ending["data"]["status"] == "done", ending
    return task_id


def test_the_merge_button_lands_the_work_and_a_conflict_is_shown_with_nothing_lost(page, bridge):
    repo = repository(bridge.work / "to-merge", {"shared.txt": "one\n"})
    first = isolated_to_end(bridge, repo, "echo FIRST > shared.txt")
    second = isolated_to_end(bridge, repo, "echo SECOND > shared.txt")

    panel = changes_tab(page, bridge, first)
    expect()(panel.locator("#changes-diff .d2h-ins .d2h-code-line-ctn")).to_have_text(["FIRST"])
    panel.get_by_role("button", name=re.compile("^Squash into")).click()
    expect()(page.locator(".messages")).to_contain_text("Merged into")
    shown = subprocess.run(["git", "-C", str(repo), "show", "HEAD:shared.txt"], capture_output=True, text=True)
    assert shown.stdout == "FIRST\n"
    expect()(page.locator("#worktree")).to_have_attribute("data-state", "merged")

    panel = changes_tab(page, bridge, second)
    panel.get_by_role("button", name=re.compile("^Merge into")).click()
    expect()(page.locator(".messages")).to_contain_text("Files: shared.txt.")
    expect()(page.locator("#worktree-refused")).to_contain_text("Files: shared.txt.")
    expect()(page.locator("#worktree")).to_have_attribute("data-state", "live")
    worktree = bridge.task(second)["worktree"]
    assert Path(worktree["cwd"], "shared.txt").read_text() == "SECOND\n", "the task's work is kept"
    page.get_by_role("tab", name=re.compile("^Changes")).click()
    page.get_by_role("button", name="Discard").click()
    expect()(page.locator("#worktree")).to_have_attribute("data-state", "discarded")
    assert not Path(worktree["path"]).exists()
