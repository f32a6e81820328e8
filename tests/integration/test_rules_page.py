"""The Rules page (/rules/) and remembering a decision on a task page's permission card, through Django's test
client: login and scopes, adding a rule (a refusal keeps what was typed), removing one, presets, the requests each
rule met, and the card's remember choice and one-click suggestions."""

import html
import re
from pathlib import Path

import pytest
from django.test import Client
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from jobs import actions
from jobs.core.access import Scope
from jobs.core.errors import BridgeError
from jobs.models import PermissionRequest, PermissionRule, Task, TaskEvent
from jobs.web import views
from jobs.web.forms import REMEMBER_CHOICES
from tests.support import make_task

pytestmark = pytest.mark.django_db(transaction=True)

# A suggestion in the shape the Claude Code CLI sends with a request (tests/fixtures/claude/bash_allowed.jsonl).
TOUCH_SUGGESTION = {
    "type": "addRules",
    "rules": [{"toolName": "Bash", "ruleContent": "touch:*"}],
    "behavior": "allow",
    "destination": "localSettings",
}


def asking(command: str, cwd: Path | None = None, suggestions: list | None = None) -> tuple[Task, PermissionRequest]:
    """A task with one request to run `command`, recorded as its executor would."""
    task = make_task("ask Bash", cwd=str(cwd) if cwd else None)
    perm = actions.record_permission_request(
        task, request_id="r1", tool_name="Bash", tool_input={"command": command}, suggestions=suggestions
    )
    return task, perm


def row_of(page: str, rule_id: int) -> str:
    """The Rules page's row of one rule ("" when it is not listed)."""
    found = re.search(rf'<tr id="rule-{rule_id}".*?</tr>', page, re.S)
    return found.group() if found else ""


def decide_url(task: Task, perm: PermissionRequest) -> str:
    return f"/tasks/{task.public_id}/permissions/{perm.request_id}"


def bearer(scope: Scope, *roots: Path) -> dict:
    token = actions.create_token(f"{scope}-{len(roots)}", scope, [str(root) for root in roots])[1]
    return {"Authorization": f"Bearer {token}"}


# --- login and scopes ----------------------------------------------------------------------------------------------


def test_the_rules_page_and_its_buttons_need_a_login(work_root):
    rule = actions.add_rule("Bash(git status)", "allow")
    client = Client()
    asked = [
        client.get("/rules/"),
        client.post("/rules/", {"rule": "Bash(ls)", "decision": "allow"}),
        client.post(f"/rules/{rule.pk}/remove"),
        client.post("/rules/presets", {"preset": "read-only", "root": str(work_root), "on": "1"}),
    ]
    for response in asked:
        assert response.status_code == 302 and response["Location"].startswith("/login/"), response
    assert list(PermissionRule.objects.live()) == [rule]


def test_a_read_token_sees_the_rules_but_changes_none(work_root, user):
    rule = actions.add_rule("Bash(git status)", "allow")
    client = Client()
    client.force_login(user)
    headers = bearer(Scope.READ)
    page = client.get("/rules/", headers=headers)
    assert page.status_code == 200 and "Bash(git status)" in row_of(page.content.decode(), rule.pk)
    assert 'id="add-rule"' not in page.content.decode(), "no form it may not use"
    refused = [
        client.post("/rules/", {"rule": "Bash(ls)", "decision": "allow"}, headers=headers),
        client.post(f"/rules/{rule.pk}/remove", headers=headers),
        client.post("/rules/presets", {"preset": "read-only", "root": str(work_root), "on": "1"}, headers=headers),
    ]
    for response in refused:
        assert response.status_code == 403 and b"scope_missing" in response.content, response
    assert list(PermissionRule.objects.all()) == [rule] and rule.removed_at is None


def test_a_decide_token_changes_rules_in_its_own_name(work_root, user):
    client = Client()
    client.force_login(user)
    response = client.post("/rules/", {"rule": "Bash(ls)", "decision": "allow"}, headers=bearer(Scope.DECIDE))
    assert response.status_code == 302
    assert PermissionRule.objects.get().created_by == "token:decide-0"


def test_a_token_limited_to_roots_sees_only_the_rules_that_can_apply_under_them(rooms, user):
    mine, theirs = rooms
    everywhere = actions.add_rule("Bash(git status)", "allow")
    under_mine = actions.add_rule("Bash(make)", "allow", root=str(mine))
    under_theirs = actions.add_rule("Bash(make test)", "allow", root=str(theirs))
    client = Client()
    client.force_login(user)
    page = client.get("/rules/", headers=bearer(Scope.READ, mine)).content.decode()
    assert row_of(page, everywhere.pk) and row_of(page, under_mine.pk)
    assert not row_of(page, under_theirs.pk)


# --- adding and removing ---------------------------------------------------------------------------------------------


def test_a_rule_added_through_the_form_is_stored_and_listed(work_root, browser):
    (work_root / "proj").mkdir()
    fields = {
        "rule": "Bash(npm run test:*)",
        "decision": "deny",
        "message": "run make test instead",
        "root": str(work_root / "proj"),
        "agent": "claude",
        "expires_at": "2099-01-31T18:00",
    }
    response = browser.post("/rules/", fields)
    assert (response.status_code, response["Location"]) == (302, "/rules/")
    rule = PermissionRule.objects.get()
    assert (rule.pattern, rule.decision, rule.message, rule.root, rule.agent, rule.created_by) == (
        "Bash(npm run test:*)",
        "deny",
        "run make test instead",
        str(work_root / "proj"),
        "claude",
        "user:alice",
    )
    assert rule.expires_at.isoformat() == "2099-01-31T18:00:00+00:00"
    page = browser.get("/rules/").content.decode()
    row = row_of(page, rule.pk)
    for shown in ("Bash(npm run test:*)", "deny", "run make test instead", str(work_root / "proj"), "claude tasks"):
        assert shown in row, shown
    assert "2099-01-31 18:00" in row and "user:alice" in row
    assert f"Rule {rule.pk} added" in page


def typed(page: str, name: str) -> str:
    """What the add-rule form shows in its field `name` (an input's value, a textarea's text)."""
    found = re.search(rf'<input type="text" name="{name}" value="([^"]*)"', page) or re.search(
        rf'<textarea name="{name}"[^>]*>\n?(.*?)</textarea>', page, re.S
    )
    assert found, f"no field {name} with a value"
    return html.unescape(found.group(1))


printable = st.text(st.characters(blacklist_categories=("Cc", "Cs")), min_size=1, max_size=80)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rule=printable.filter(str.strip), message=printable.filter(str.strip))
@example(rule="Bash(", message="no")
@example(rule='<b>"Bash(ls)"</b>', message="<script>alert(1)</script>")
def test_a_refused_rule_shows_the_service_layers_reason_and_keeps_what_was_typed(work_root, browser, rule, message):
    """An allow rule with a message is refused (and so is a pattern that does not parse): the page says what
    actions.add_rule says, and the form holds what was typed."""
    with pytest.raises(BridgeError) as refused:
        actions.add_rule(rule.strip(), "allow", message=message.strip())
    response = browser.post("/rules/", {"rule": rule, "decision": "allow", "message": message})
    page = response.content.decode()
    assert response.status_code == 200 and 'id="rule-error"' in page
    assert html.escape(refused.value.message) in page
    assert (typed(page, "rule"), typed(page, "message")) == (rule, message)
    assert not PermissionRule.objects.exists()


def test_a_rule_for_a_directory_outside_the_allowed_roots_is_refused_in_words(work_root, browser, tmp_path):
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    page = browser.post("/rules/", {"rule": "Bash(ls)", "decision": "allow", "root": str(outside)}).content.decode()
    assert "outside the allowed roots" in page and typed(page, "root") == str(outside)
    assert not PermissionRule.objects.exists()


def test_remove_stops_a_rule_records_who_removed_it_and_lists_it_with_the_ended(work_root, browser):
    rule = actions.add_rule("Bash(touch x)", "allow")
    response = browser.post(f"/rules/{rule.pk}/remove")
    assert (response.status_code, response["Location"]) == (302, "/rules/")
    rule.refresh_from_db()
    assert rule.removed_by == "user:alice" and rule.removed_at is not None
    assert not row_of(browser.get("/rules/").content.decode(), rule.pk)
    ended = row_of(browser.get("/rules/?all=1").content.decode(), rule.pk)
    assert "removed by user:alice" in ended and "Remove</button>" not in ended
    _, perm = asking("touch x")
    assert perm.status == "pending", "the removed rule decides nothing"


def test_removing_a_rule_that_does_not_exist_says_so(work_root, browser):
    page = browser.post("/rules/4242/remove", follow=True).content.decode()
    assert "no permission rule &#x27;4242&#x27;" in page


# --- presets -------------------------------------------------------------------------------------------------------


def test_a_preset_switched_on_for_a_root_and_off_again(work_root, browser):
    [preset] = [p for p in actions.presets_data() if p["preset"] == "read-only"]
    on = {"preset": "read-only", "root": str(work_root), "on": "1"}
    assert browser.post("/rules/presets", on)["Location"] == "/rules/"
    made = list(PermissionRule.objects.live())
    assert sorted((r.pattern, r.decision) for r in made) == sorted((r["rule"], r["decision"]) for r in preset["rules"])
    assert {(r.preset, r.root, r.created_by) for r in made} == {("read-only", str(work_root), "user:alice")}
    page = browser.get("/rules/").content.decode()
    section = re.search(r'<div class="preset" id="preset-read-only">.*?</form>\s*</div>', page, re.S).group()
    assert f"On for <code>{work_root}</code>" in section and "Switch off" in section
    browser.post("/rules/presets", {**on, "on": "0"})
    assert not PermissionRule.objects.live().exists()
    assert {r.removed_by for r in PermissionRule.objects.all()} == {"user:alice"}
    assert "Off everywhere." in browser.get("/rules/").content.decode()


def test_switching_a_preset_on_outside_the_allowed_roots_is_refused_in_words(work_root, browser, tmp_path):
    response = browser.post("/rules/presets", {"preset": "read-only", "root": str(tmp_path), "on": "1"}, follow=True)
    assert "outside the allowed roots" in response.content.decode()
    assert not PermissionRule.objects.exists()


# --- the requests each rule met --------------------------------------------------------------------------------------


def test_each_rule_lists_how_many_requests_it_met_and_the_newest_with_their_tasks(work_root, browser):
    rule = actions.add_rule("Bash(git status)", "allow")
    idle = actions.add_rule("Bash(ls)", "deny")
    met = [asking("git status")[1] for _ in range(views.RULE_USES_SHOWN + 2)]
    row = row_of(browser.get("/rules/").content.decode(), rule.pk)
    assert f"{len(met)} requests" in row
    links = re.findall(r'<li><a href="/tasks/([0-9a-f-]{36})/">', row)
    assert links == [str(perm.task.public_id) for perm in reversed(met)][: views.RULE_USES_SHOWN]
    assert row.count("perm-allowed") == views.RULE_USES_SHOWN
    assert "none yet" in row_of(browser.get("/rules/").content.decode(), idle.pk)


# --- remembering a decision on a permission card -------------------------------------------------------------------


def test_the_task_page_offers_every_way_to_remember_a_decision(work_root, browser):
    task, _ = asking("touch x")
    page = browser.get(f"/tasks/{task.public_id}/").content.decode()
    select = re.search(r'<select class="remember-scope".*?</select>', page, re.S).group()
    assert re.findall(r'<option value="([^"]*)">', select) == [value for value, _ in REMEMBER_CHOICES]
    assert 'data-rules-url="/rules/"' in page


def test_allow_remembered_for_the_project_decides_the_next_identical_request_there(rooms, browser):
    mine, theirs = rooms
    task, perm = asking("touch x", mine)
    response = browser.post(decide_url(task, perm), {"behavior": "allow", "remember": "project"})
    assert response.status_code == 200, response.content
    [made] = response.json()["remembered"]
    rule = PermissionRule.objects.get()
    assert made == {"id": rule.pk, "rule": rule.pattern, "decision": "allow"}
    assert (rule.root, rule.from_request_id, rule.created_by) == (str(mine), perm.pk, "user:alice")
    decided = TaskEvent.objects.filter(task=task, kind="permission_decision").get().data
    assert decided["remembered"] == [made]
    _, again = asking("touch x", mine)
    assert (again.status, again.decided_via, again.rule_id) == ("allowed", "policy", rule.pk)
    _, elsewhere = asking("touch x", theirs)
    assert elsewhere.status == "pending"


def test_a_suggested_rule_is_made_as_offered(work_root, browser):
    task, perm = asking("touch marker.txt", suggestions=[TOUCH_SUGGESTION])
    [offered] = actions.permission_data(perm)["suggested_rules"]
    response = browser.post(decide_url(task, perm), {"behavior": offered["decision"], **offered})
    assert response.status_code == 200, response.content
    rule = PermissionRule.objects.get()
    assert (rule.pattern, rule.decision, rule.root) == (offered["rule"], offered["decision"], task.cwd)
    _, again = asking("touch other.txt")
    assert (again.status, again.rule_id) == ("allowed", rule.pk), "the suggested rule covers more than the request"


@pytest.mark.parametrize(
    "fields, words",
    [
        ({"remember": "session"}, "has not named its session yet"),
        ({"remember": "project", "rule": "Bash(rm:*)"}, "would not allow this request"),
        ({"rule": "Bash(touch x)"}, "give remember too"),
        ({"remember": "forever"}, "Select a valid choice"),
    ],
)
def test_a_refused_remember_leaves_the_request_pending_and_says_why(work_root, browser, fields, words):
    task, perm = asking("touch x")
    response = browser.post(decide_url(task, perm), {"behavior": "allow", **fields})
    assert response.status_code == 400 and words in response.json()["error"]
    perm.refresh_from_db()
    assert perm.status == "pending" and not PermissionRule.objects.exists()
    assert not TaskEvent.objects.filter(task=task, kind="permission_decision").exists()


def test_a_token_limited_to_roots_remembers_only_under_them(rooms, user):
    mine, _ = rooms
    task, perm = asking("touch x", mine)
    client = Client()
    client.force_login(user)
    headers = bearer(Scope.DECIDE, mine)
    refused = client.post(decide_url(task, perm), {"behavior": "allow", "remember": "always"}, headers=headers)
    assert (refused.status_code, refused.json()["code"]) == (403, "outside_token_roots")
    perm.refresh_from_db()
    assert perm.status == "pending"
    allowed = client.post(decide_url(task, perm), {"behavior": "allow", "remember": "project"}, headers=headers)
    assert allowed.status_code == 200 and PermissionRule.objects.get().root == str(mine)
