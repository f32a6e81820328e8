"""The Rules page and remembering a decision from a permission card, in real headless Chromium against a real
`runbridge` running the fake stream-json agent, whose `suggest` line makes its next request carry Claude Code's
permission_suggestions (tests/fakes/fake_claude.py). What the page did is checked in the server's database too.

The module's tests share one server; each works in a directory of its own, so one's rules decide nothing of another's.
"""

from __future__ import annotations

import json
import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

from tests.bridge_server import BridgeServer
from tests.browser.chromium import expect, shot
from tests.support import fake_agent_script

pytestmark = pytest.mark.e2e

PHONE = {"width": 390, "height": 844}
MARKER = "touch marker.txt"


def suggestion(*rules: str) -> dict:
    """Rules for the project (localSettings), as the Claude Code CLI offers them with a request
    (tests/fixtures/claude/bash_allowed.jsonl)."""
    entries = [{"toolName": "Bash", "ruleContent": rule} for rule in rules]
    return {"type": "addRules", "rules": entries, "behavior": "allow", "destination": "localSettings"}


@pytest.fixture(scope="module")
def bridge(tmp_path_factory):
    root = tmp_path_factory.mktemp("rules")
    with BridgeServer(root, "http://127.0.0.1:9", fake_agent_script(root), {"BRIDGE_KILL_GRACE_S": "1"}) as server:
        yield server


def workdir(bridge: BridgeServer, name: str) -> Path:
    path = bridge.work / name
    path.mkdir()
    return path


def database(bridge: BridgeServer, sql: str, *params: object) -> list[tuple]:
    """Rows of the server's own database, read-only, as it has committed them."""
    uri = f"file:{bridge.data_dir / 'bridge.sqlite3'}?mode=ro"
    with closing(sqlite3.connect(uri, uri=True, timeout=30)) as db:
        return db.execute(sql, params).fetchall()


def requests_of(bridge: BridgeServer, task_id: str) -> list[tuple]:
    """(id, status, decided_via, rule_id) of each permission request of a task."""
    return database(
        bridge,
        "SELECT r.id, r.status, r.decided_via, r.rule_id FROM jobs_permissionrequest r "
        "JOIN jobs_task t ON t.id = r.task_id WHERE t.public_id = ? ORDER BY r.id",
        task_id.replace("-", ""),
    )


def asking_task(bridge: BridgeServer, cwd: Path, command: str = MARKER, suggestions: list | None = None) -> str:
    """A task whose agent asks to run `command`, offering `suggestions` with the request."""
    offered = f"suggest {json.dumps(suggestions)}\n" if suggestions else ""
    ask = json.dumps({"command": command})
    return bridge.create_task(f"{offered}ask Bash {ask}\nsay finished", cwd, timeout_s=3600)


def fits_the_window(page) -> None:
    scroll_width, window_width = page.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")
    assert scroll_width <= window_width, f"the page is {scroll_width} px wide in a {window_width} px window"


# --- the Rules page --------------------------------------------------------------------------------------------------


def test_a_rule_added_through_the_form_is_listed_and_stored(page, bridge):
    root = workdir(bridge, "npm")
    page.goto(bridge.url + "/rules/")
    page.fill("input[name=rule]", "Bash(npm run test:*)")
    page.select_option("select[name=decision]", "deny")
    page.fill("textarea[name=message]", "run make test instead")
    page.fill("input[name=root]", str(root))
    page.click("#add-rule-submit")
    row = page.locator("tr.rule", has_text="Bash(npm run test:*)")
    expect()(row).to_contain_text("run make test instead")
    expect()(row.locator(".rule-scope")).to_contain_text(str(root))
    expect()(row.locator(".rule-deny")).to_have_text("deny")
    [(rule_id, decision, message, created_by)] = database(
        bridge,
        "SELECT id, decision, message, created_by FROM jobs_permissionrule WHERE pattern = ? AND root = ?",
        "Bash(npm run test:*)",
        str(root),
    )
    assert (decision, message, created_by) == ("deny", "run make test instead", "user:admin")
    expect()(row).to_have_attribute("id", f"rule-{rule_id}")
    shot(page, "rules")


def test_a_refused_rule_says_why_and_keeps_what_was_typed(page, bridge):
    page.goto(bridge.url + "/rules/")
    page.fill("input[name=rule]", "Bash(git push")
    page.click("#add-rule-submit")
    expect()(page.locator("#rule-error")).to_contain_text("the rule 'Bash(git push' cannot be used")
    expect()(page.locator("input[name=rule]")).to_have_value("Bash(git push")
    assert database(bridge, "SELECT id FROM jobs_permissionrule WHERE pattern LIKE 'Bash(git push%'") == []


def test_the_read_only_preset_switched_on_for_a_root_and_off_again(page, bridge):
    root = workdir(bridge, "readonly")
    page.goto(bridge.url + "/rules/")
    preset = page.locator("#preset-read-only")
    preset.locator("input[name=root]").fill(str(root))
    preset.locator("button.switch-on").click()
    expect()(page.locator(".message.success")).to_contain_text(f"Preset read-only is on for {root}")
    expect()(preset.locator(".preset-root")).to_contain_text(str(root))
    live = (
        "SELECT pattern, decision FROM jobs_permissionrule "
        "WHERE preset = 'read-only' AND root = ? AND removed_at IS NULL"
    )
    offered = [" ".join(text.split()) for text in preset.locator(".preset-rules li").all_text_contents()]
    assert sorted(f"{pattern} {decision}" for pattern, decision in database(bridge, live, str(root))) == sorted(offered)
    expect()(page.locator("tr.rule", has_text="by the preset read-only")).to_have_count(len(offered))
    preset.locator(".preset-root", has_text=str(root)).locator("button.switch-off").click()
    expect()(preset.locator(".preset-roots")).to_have_text("Off everywhere.")
    assert database(bridge, live, str(root)) == []


# --- remembering a decision from a permission card ----------------------------------------------------------------


def test_one_click_on_a_suggested_rule_decides_and_remembers_it_for_the_project(page, bridge):
    cwd = workdir(bridge, "suggested")
    task_id = asking_task(bridge, cwd, suggestions=[suggestion(MARKER)])
    page.goto(f"{bridge.url}/tasks/{task_id}/")
    card = page.locator(".permission").first
    expect()(card.locator(".state")).to_have_text("pending")
    buttons = card.locator("button.suggestion")
    expect()(buttons).to_have_text(["Allow always: Bash(touch marker.txt) — this project"])
    shot(page, "task-permission-suggestions")
    [(request_pk, _, _, _)] = requests_of(bridge, task_id)

    buttons.click()
    expect()(card.locator(".state")).to_have_text("allowed")
    expect()(card.locator(".decision")).to_contain_text("allowed by user:admin via web")
    remembered = card.locator(".remembered")
    expect()(remembered).to_contain_text("Remembered as the rule Bash(touch marker.txt) (allow)")
    shot(page, "task-permission-remembered")
    expect()(page.locator("#status")).to_have_text("done")
    assert (cwd / "marker.txt").exists()
    [(rule_id, decision, root, task, created_by)] = database(
        bridge,
        "SELECT id, decision, root, task_id, created_by FROM jobs_permissionrule WHERE from_request_id = ?",
        request_pk,
    )
    assert (decision, root, task, created_by) == ("allow", str(cwd), None, "user:admin")
    assert requests_of(bridge, task_id) == [(request_pk, "allowed", "web", None)]

    remembered.locator("a.rule-link").click()
    page.wait_for_url(f"{bridge.url}/rules/#rule-{rule_id}")
    expect()(page.locator(f"#rule-{rule_id}")).to_contain_text("remembered from a request of task")

    following = asking_task(bridge, cwd)  # the next identical request in that project: the rule answers it
    events = list(bridge.stream(following))
    asked = [event["data"] for event in events if event["event"] == "permission_request"]
    assert [data["permission_status"] for data in asked] == ["allowed"], "it never waited for a person"
    assert events[-1]["data"]["status"] == "done"
    [(_, status, via, decided_by_rule)] = requests_of(bridge, following)
    assert (status, via, decided_by_rule) == ("allowed", "policy", rule_id)
    page.goto(f"{bridge.url}/tasks/{following}/")
    decided = page.locator(".permission .decision")
    expect()(decided).to_contain_text(f"allowed by rule {rule_id}: Bash(touch marker.txt) via policy")
    expect()(decided.locator("a.rule-link")).to_have_attribute("href", f"/rules/#rule-{rule_id}")
    expect()(page.locator(".permission form")).to_be_hidden()
    page.goto(f"{bridge.url}/rules/")
    expect()(page.locator(f"#rule-{rule_id} .uses-count")).to_have_text("1 request")
    expect()(page.locator(f"#rule-{rule_id} .uses a")).to_have_attribute("href", f"/tasks/{following}/")


def test_a_decision_that_cannot_be_remembered_says_why_on_the_card_and_waits(page, bridge):
    cwd = workdir(bridge, "unrememberable")
    task_id = asking_task(bridge, cwd, "echo made > marker.txt")
    page.goto(f"{bridge.url}/tasks/{task_id}/")
    card = page.locator(".permission").first
    card.locator("select.remember-scope").select_option("project")
    card.locator("button.allow").click()
    expect()(card.locator(".error-text")).to_contain_text("redirects its output into a file")
    expect()(card.locator(".state")).to_have_text("pending")
    [(request_pk, status, _, _)] = requests_of(bridge, task_id)
    assert status == "pending"
    card.locator("select.remember-scope").select_option("")
    card.locator("button.allow").click()
    expect()(card.locator(".state")).to_have_text("allowed")
    expect()(card.locator(".remembered")).to_be_hidden()
    assert database(bridge, "SELECT id FROM jobs_permissionrule WHERE from_request_id = ?", request_pk) == []


def test_a_decision_remembered_for_this_task_by_the_remember_choice(page, bridge):
    cwd = workdir(bridge, "remember-task")
    task_id = asking_task(bridge, cwd)
    page.goto(f"{bridge.url}/tasks/{task_id}/")
    card = page.locator(".permission").first
    expect()(card.locator(".suggestions")).to_be_hidden()
    card.locator("select.remember-scope").select_option("task")
    card.locator("button.allow").click()
    expect()(card.locator(".remembered")).to_contain_text("Remembered as the rule")
    [(request_pk, _, _, _)] = requests_of(bridge, task_id)
    [(task, root)] = database(
        bridge,
        "SELECT t.public_id, r.root FROM jobs_permissionrule r JOIN jobs_task t ON t.id = r.task_id "
        "WHERE r.from_request_id = ?",
        request_pk,
    )
    assert (task, root) == (task_id.replace("-", ""), str(cwd))


# --- a phone -------------------------------------------------------------------------------------------------------


def test_at_phone_size_the_rules_page_and_a_card_with_suggestions_fit_the_window(context, bridge):
    cwd = workdir(bridge, "phone-" + "x" * 200)  # a directory name with nowhere to break
    long_command = "touch " + "y" * 300  # and a rule with nowhere to break
    task_id = asking_task(bridge, cwd, long_command, [suggestion(long_command, "touch:*")])
    page = context.new_page()
    try:
        page.set_viewport_size(PHONE)
        page.goto(f"{bridge.url}/rules/")
        page.fill("input[name=rule]", f"Bash(touch {'z' * 300})")
        page.fill("input[name=root]", str(cwd))
        page.click("#add-rule-submit")
        expect()(page.locator("tr.rule", has_text="z" * 300)).to_be_visible()
        shot(page, "screen-rules-phone")
        fits_the_window(page)
        page.goto(f"{bridge.url}/tasks/{task_id}/")
        expect()(page.locator(".permission button.suggestion")).to_have_count(2)
        shot(page, "screen-task-suggestions-phone")
        fits_the_window(page)
    finally:
        page.close()
