"""Permission rules (jobs/actions/rules.py): the user's rules answer a request as it arrives, before it is pending;
deny beats ask beats allow, the most specific scope names the rule; REST, MCP and the transcript show the rule."""

import asyncio
import json
import sys
from datetime import timedelta
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from mcp import Client as McpClient
from mcp import StdioServerParameters

from jobs import actions
from jobs.actions import rules
from jobs.core.access import Scope
from jobs.core.errors import InvalidInput, Refused
from jobs.core.permission_rules import RuleError, approving, matches, parse, specificity
from jobs.core.vocabulary import Status
from jobs.models import PermissionRequest, PermissionRule, Task
from tests.support import REPO, has_event, make_task, wait_for

pytestmark = pytest.mark.django_db(transaction=True)


def ask(command: str) -> str:
    return "ask Bash " + json.dumps({"command": command})


def results(task: Task) -> list[dict]:
    return [e.data for e in actions.events_since(task) if e.kind == "tool_result"]


def decisions(task: Task) -> list[dict]:
    return [e.data for e in actions.events_since(task) if e.kind == "permission_decision"]


def request(task: Task, command: str, request_id: str = "r1") -> PermissionRequest:
    return actions.record_permission_request(
        task, request_id=request_id, tool_name="Bash", tool_input={"command": command}
    )


# --- with the fake agent ---------------------------------------------------------------------------------------------


def test_an_allow_rule_lets_git_status_run_without_a_pending_request_and_the_transcript_names_it(supervisor):
    rule = actions.add_rule("Bash(git status)", "allow", by="tester")
    task = wait_for(make_task(ask("git status") + "\nsay done"))
    assert task.status == Status.DONE
    perm = PermissionRequest.objects.get(task=task)
    named = f"rule {rule.pk}: Bash(git status)"
    assert (perm.status, perm.decided_via, perm.decided_by, perm.rule_id) == ("allowed", "policy", named, rule.pk)
    asked = next(e.data for e in actions.events_since(task) if e.kind == "permission_request")
    assert asked["status"] == "allowed", "it was never pending"
    assert [(d["status"], d["rule_id"], d["rule"]) for d in decisions(task)] == [
        ("allowed", rule.pk, "Bash(git status)")
    ]
    assert [r["is_error"] for r in results(task)] == [False], "the agent ran it"


def test_a_command_no_rule_allows_waits_for_a_person(supervisor):
    actions.add_rule("Bash(git status)", "allow")
    task = make_task(ask("rm -rf build") + "\nsay done")
    wait_for(task, has_event("permission_request"))
    [pending] = actions.pending_permissions(task)
    assert (pending.status, pending.rule_id, pending.decided_via) == ("pending", None, "")
    actions.request_cancel(task)
    wait_for(task)


def test_a_deny_rules_message_reaches_the_agent(supervisor, work_root):
    rule = actions.add_rule("Bash(touch *)", "deny", message="no new files here, ask the owner")
    task = wait_for(make_task(ask("touch denied.txt") + "\nsay done"))
    assert not (work_root / "denied.txt").exists()
    assert [(r["is_error"], r["content"]) for r in results(task)] == [(True, "no new files here, ask the owner")]
    assert [(d["status"], d["rule_id"], d["message"]) for d in decisions(task)] == [
        ("denied", rule.pk, "no new files here, ask the owner")
    ]


def test_a_compound_command_is_not_let_through_by_a_rule_for_its_first_part(supervisor, work_root):
    actions.add_rule("Bash(git status)", "allow")
    task = make_task(ask("git status && touch pwned.txt") + "\nsay done")
    wait_for(task, has_event("permission_request"))
    assert [p.status for p in actions.pending_permissions(task)] == ["pending"]
    actions.request_cancel(task)
    wait_for(task)
    assert not (work_root / "pwned.txt").exists()
    assert rules.decide_by_rules(task, "Bash", {"command": "git status && rm -rf /"}) is None


# --- decided as the request is recorded -------------------------------------------------------------------------------


def test_a_rule_for_one_root_does_not_apply_in_another(rooms):
    first, second = rooms
    actions.add_rule("Bash(git status)", "allow", root=str(first))
    assert request(make_task("x", cwd=str(first)), "git status").status == "allowed"
    assert request(make_task("x", cwd=str(second)), "git status").status == "pending"
    deeper = first / "deep"
    deeper.mkdir()
    assert request(make_task("x", cwd=str(deeper)), "git status").status == "allowed", "under the root: applies"


def test_a_rule_for_one_agent_or_one_creator_applies_only_to_their_tasks(work_root):
    actions.add_rule("Bash(ls)", "allow", agent="hermes")
    actions.add_rule("Bash(pwd)", "allow", created_for="token:ci")
    claude, hermes = make_task("x"), make_task("x", agent="hermes")
    assert (request(claude, "ls").status, request(hermes, "ls").status) == ("pending", "allowed")
    ours = make_task("x")
    Task.objects.filter(pk=ours.pk).update(created_by="token:ci")
    ours.refresh_from_db()
    assert (request(claude, "pwd", "r2").status, request(ours, "pwd").status) == ("pending", "allowed")


def test_an_expired_rule_never_decides(work_root, monkeypatch):
    actions.add_rule("Bash(git status)", "allow", expires_at=timezone.now() + timedelta(hours=1))
    task = make_task("x")
    assert request(task, "git status").status == "allowed"
    later = timezone.now() + timedelta(hours=2)
    monkeypatch.setattr(rules.timezone, "now", lambda: later)
    assert request(task, "git status", "r2").status == "pending"
    assert actions.list_rules() == []


def test_a_removed_rule_never_decides_and_its_removal_is_recorded(work_root):
    rule = actions.add_rule("Bash(git status)", "allow")
    task = make_task("x")
    assert request(task, "git status").status == "allowed"  # this process's book now holds the rule
    actions.remove_rule(rule.pk, by="user:ann")
    assert request(task, "git status", "r2").status == "pending"
    removed = PermissionRule.objects.get(pk=rule.pk)
    assert removed.removed_by == "user:ann" and removed.removed_at is not None
    assert [r.pk for r in actions.list_rules(include_ended=True)] == [rule.pk] and actions.list_rules() == []


def test_deny_beats_allow_and_ask_leaves_it_to_a_person(rooms):
    first, _ = rooms
    actions.add_rule("Bash(rm -rf build)", "allow", root=str(first))
    deny = actions.add_rule("Bash(rm *)", "deny")
    task = make_task("x", cwd=str(first))
    denied = request(task, "rm -rf build")
    assert (denied.status, denied.rule_id, denied.message) == (
        "denied",
        deny.pk,
        f"Denied by the user's permission rule {deny.pk} (Bash(rm *))",
    )
    actions.add_rule("Bash(git push:*)", "allow")
    asking = actions.add_rule("Bash(git push --force:*)", "ask")
    asked = request(task, "git push --force origin main", "r2")
    assert (asked.status, asked.rule_id, asked.decided_via) == ("pending", asking.pk, "")
    assert request(task, "git push origin main", "r3").status == "allowed"


def test_bypass_mode_stays_as_it_was(work_root):
    actions.add_rule("Bash", "deny")
    perm = request(make_task("x", permission_mode="bypass"), "ls")
    assert (perm.status, perm.decided_by, perm.rule_id) == ("allowed", "permission_mode=bypass", None)


def test_a_pattern_that_does_not_parse_or_a_root_outside_is_refused_with_the_reason(work_root, tmp_path):
    with pytest.raises(InvalidInput) as refused:
        actions.add_rule("Bash()", "allow")
    assert "empty parentheses" in refused.value.message and refused.value.detail["field"] == "rule"
    with pytest.raises(Refused):
        actions.add_rule("Bash", "allow", root=str(tmp_path))
    with pytest.raises(InvalidInput):
        actions.add_rule("Bash", "allow", message="only a deny rule tells the agent something")
    assert not PermissionRule.objects.exists()


# --- generated: the decision against a reference model ----------------------------------------------------------------

PATTERNS = [
    "Bash",
    "Bash(git status)",
    "Bash(git *)",
    "Bash(git push:*)",
    "Bash(rm *)",
    "Bash(rm -rf build)",
    "Bash(npm test)",
    "Bash(* --version)",
    "Read",
    "Edit(src/**)",
]
COMMANDS = [
    "git status",
    "git push origin main",
    "git status && rm -rf /",
    "rm -rf build",
    "sudo rm -rf x",
    "npm test; git status",
    "timeout 5 npm test",
    "sh -c 'rm -rf x'",
    "node --version",
    "ls | grep x",
]
ROOTS = ["", "a", "a/deep", "b"]
CWDS = ["a", "a/deep", "b"]
RULE = st.tuples(st.sampled_from(PATTERNS), st.sampled_from(["allow", "ask", "deny"]), st.sampled_from(ROOTS))


def expected(rule_rows: list[tuple[int, str, str, str]], command: str, cwd: str) -> tuple[str, int] | None:
    """The reference: of the rules whose root holds cwd, deny if any deny rule matches, else ask if any ask rule
    does, else allow if allow rules approve the command; the rule named has the deepest root, then the most
    specific pattern, then the newest id."""
    in_scope = [row for row in rule_rows if not row[3] or cwd == row[3] or cwd.startswith(row[3] + "/")]

    def best(rows: list) -> int:
        return max(rows, key=lambda r: (r[3].count("/") + 1 if r[3] else 0, specificity(parse(r[1])), r[0]))[0]

    call = ("Bash", {"command": command}, cwd)
    for decision in ("deny", "ask"):
        found = [row for row in in_scope if row[2] == decision and matches(parse(row[1]), *call, decision)]
        if found:
            return decision, best(found)
    allows = [row for row in in_scope if row[2] == "allow"]
    alone = [row for row in allows if matches(parse(row[1]), *call, "allow")]
    if alone:
        return "allow", best(alone)
    together = set(approving([parse(row[1]) for row in allows], *call))
    found = [row for row in allows if parse(row[1]) in together]
    return ("allow", best(found)) if found else None


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rule_set=st.lists(RULE, max_size=8), command=st.sampled_from(COMMANDS), where=st.sampled_from(CWDS))
def test_the_decision_is_deny_then_ask_then_allow_with_the_most_specific_scope_naming_the_rule(
    work_root, rule_set, command, where
):
    for name in ("a/deep", "b"):
        (work_root / name).mkdir(parents=True, exist_ok=True)
    for earlier in actions.list_rules():  # the last example's
        actions.remove_rule(earlier.pk)
    rule_rows = []
    for pattern, decision, root in rule_set:
        made = actions.add_rule(pattern, decision, root=str(work_root / root) if root else "")
        rule_rows.append((made.pk, pattern, decision, made.root))
    cwd = str(work_root / where)
    task = make_task("x", cwd=cwd)
    found = rules.decide_by_rules(task, "Bash", {"command": command})
    assert (None if found is None else (found[0], found[1].pk)) == expected(rule_rows, command, cwd)


WORDS = ["git", "status", "rm", "-rf", "x", "npm", "test", "sudo", "timeout", "5", "sh", "-c", "*", "node"]
SHELL = WORDS + [
    "&&",
    "|",
    ";",
    "'rm'",
    '"git"',
    "r\\m",
    "$(rm x)",
    "`git log`",
    "x=1",
    "git.exe",
    "/bin/rm",
    "'a b'",
    "gitk",
    "rmdir",
]


@settings(max_examples=1000, deadline=None)
@given(
    rule_words=st.lists(st.sampled_from(WORDS + ["git*", "'rm'", "*rm", "r\\m"]), min_size=1, max_size=3),
    suffix=st.sampled_from(["", ":*", " *"]),
    command_parts=st.lists(st.sampled_from(SHELL), min_size=1, max_size=5),
    decision=st.sampled_from(["allow", "ask", "deny"]),
)
@example(rule_words=["git*"], suffix="", command_parts=["gitk"], decision="allow")  # a word that runs into a *
@example(rule_words=["rm"], suffix=" *", command_parts=["sudo", "'rm'", "-rf", "x"], decision="deny")
def test_a_bash_rule_matches_only_commands_holding_its_indexed_word(rule_words, suffix, command_parts, decision):
    """The book looks at a Bash rule only for commands whose words hold its `command_word`: never one it matches."""
    try:
        pattern = parse(f"Bash({' '.join(rule_words)}{suffix})")
    except RuleError:
        return
    command = " ".join(command_parts)
    word = rules.command_word(pattern)
    if matches(pattern, "Bash", {"command": command}, "/w", decision):
        assert word is None or word in rules.command_words(command), (pattern, command)


# --- REST ------------------------------------------------------------------------------------------------------------


def rest(method: str, path: str, token: str, body: dict | None = None):
    headers = {"Authorization": f"Bearer {token}"}
    if method == "post":
        return Client().post(path, json.dumps(body), content_type="application/json", headers=headers)
    return getattr(Client(), method)(path, headers=headers)


def test_rules_are_added_listed_and_removed_over_rest(rooms):
    first, _ = rooms
    token = actions.create_token("planner", Scope.DECIDE)[1]
    added = rest("post", "/v1/rules", token, {"rule": "Bash(git  status:*)", "decision": "allow", "root": str(first)})
    assert added.status_code == 200, added.content
    rule = added.json()
    assert (rule["rule"], rule["root"], rule["created_by"], rule["live"]) == (
        "Bash(git status:*)",
        str(first),
        "token:planner",
        True,
    )
    listed = rest("get", "/v1/rules", token).json()["rules"]
    assert [r["id"] for r in listed] == [rule["id"]]
    removed = rest("delete", f"/v1/rules/{rule['id']}", token)
    assert (removed.status_code, removed.json()["removed_by"], removed.json()["live"]) == (200, "token:planner", False)
    assert rest("get", "/v1/rules", token).json()["rules"] == []
    assert [r["id"] for r in rest("get", "/v1/rules?all=1", token).json()["rules"]] == [rule["id"]]
    gone = rest("delete", "/v1/rules/999999", token)
    assert (gone.status_code, gone.json()["code"]) == (404, "no_such_rule")


def test_rest_refuses_a_rule_that_does_not_parse_and_a_root_outside_with_the_reason(rooms, tmp_path):
    token = actions.create_token("planner", Scope.DECIDE)[1]
    bad = rest("post", "/v1/rules", token, {"rule": "Write(src/**)", "decision": "allow"})
    assert (bad.status_code, bad.json()["code"], bad.json()["field"]) == (400, "invalid_input", "rule")
    assert "Write(src/**) would never match" in bad.json()["error"] and "Edit(src/**)" in bad.json()["error"]
    outside = rest("post", "/v1/rules", token, {"rule": "Bash", "decision": "allow", "root": str(tmp_path)})
    assert (outside.status_code, outside.json()["code"]) == (403, "refused")
    wrong = rest("post", "/v1/rules", token, {"rule": "Bash", "decision": "maybe"})
    assert (wrong.status_code, wrong.json()["code"]) == (422, "invalid_request")
    assert not PermissionRule.objects.exists()


def test_a_token_limited_to_roots_adds_and_removes_rules_only_under_them(rooms):
    first, second = rooms
    token = actions.create_token("limited", Scope.DECIDE, [str(first)])[1]
    everywhere = rest("post", "/v1/rules", token, {"rule": "Bash", "decision": "allow"})
    elsewhere = rest("post", "/v1/rules", token, {"rule": "Bash", "decision": "allow", "root": str(second)})
    assert [r.json()["code"] for r in (everywhere, elsewhere)] == ["outside_token_roots"] * 2
    mine = rest("post", "/v1/rules", token, {"rule": "Bash(ls)", "decision": "allow", "root": str(first)})
    assert mine.status_code == 200
    theirs = actions.add_rule("Bash(pwd)", "allow", root=str(second))
    assert rest("delete", f"/v1/rules/{theirs.pk}", token).json()["code"] == "outside_token_roots"
    assert [r["id"] for r in rest("get", "/v1/rules", token).json()["rules"]] == [mine.json()["id"]]


def test_rest_shows_the_rule_that_decided_a_request(work_root):
    token = actions.create_token("planner", Scope.DECIDE)[1]
    asking = actions.add_rule("Bash(rm *)", "ask")
    task = make_task("x")
    request(task, "rm -rf build")
    [pending] = rest("get", f"/v1/permissions?task_id={task.public_id}", token).json()["permissions"]
    assert (pending["status"], pending["rule_id"], pending["rule"]) == ("pending", asking.pk, "Bash(rm *)")


# --- MCP -------------------------------------------------------------------------------------------------------------


def over_stdio(env: dict[str, str], calls: list[tuple[str, dict[str, Any]]]) -> list[str]:
    async def main() -> list[str]:
        params = StdioServerParameters(command=sys.executable, args=[str(REPO / "manage.py"), "mcp"], env=env, cwd=REPO)
        async with McpClient(params, read_timeout_seconds=60) as client:
            replies = []
            for tool, arguments in calls:
                result = await client.call_tool(tool, arguments)
                replies.append("\n".join(c.text for c in result.content if c.type == "text"))
            return replies

    return asyncio.run(main())


def test_mcp_tools_add_list_and_remove_rules(mcp_env, work_root):
    added, refused = over_stdio(
        mcp_env,
        [
            ("rule_add", {"rule": "Bash(rm *)", "decision": "deny", "message": "never", "root": str(work_root)}),
            ("rule_add", {"rule": "Bash(", "decision": "allow"}),
        ],
    )
    rule = PermissionRule.objects.get()
    assert added.splitlines()[:4] == ["STATUS: added", f"RULE_ID: {rule.pk}", "RULE: Bash(rm *)", "DECISION: deny"]
    assert "MESSAGE: never" in added and rule.created_by == "mcp"
    assert (
        refused.startswith("STATUS: error\nERROR: the rule 'Bash(' cannot be used") and "CODE: invalid_input" in refused
    )
    task = make_task("x")
    request(task, "rm -rf x")
    listed, removed, listed_after, decided = over_stdio(
        mcp_env,
        [
            ("rules_list", {}),
            ("rule_remove", {"rule_id": rule.pk}),
            ("rules_list", {}),
            ("permission_decide", {"job_id": str(task.public_id), "behavior": "allow"}),
        ],
    )
    assert listed.splitlines()[:3] == ["RULES: 1", "", f"RULE_ID: {rule.pk}"]
    assert removed.startswith("STATUS: removed") and "REMOVED: " in removed and listed_after == "RULES: 0"
    assert "CODE: nothing_pending" in decided, "the deny rule answered it: nothing waits"
