"""Remembered decisions and presets (jobs/actions/rules.py): a decision can be remembered as the rule that answers the
next identical request the same way, for a task, its agent session, its project or everywhere; the agent's own
suggestions are one-click rules; a preset switches a set of rules on per root. REST, MCP and the terminal command
all go through the same functions."""

from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from jobs import actions
from jobs.actions import rules
from jobs.core.access import Caller, Scope
from jobs.core.errors import InvalidInput, Refused
from jobs.core.vocabulary import PermissionStatus
from jobs.models import AgentSession, PermissionRequest, PermissionRule, Task
from tests.integration.test_permission_rules import over_stdio, rest
from tests.support import make_task

pytestmark = pytest.mark.django_db(transaction=True)

CLAUDE_SUGGESTION = {
    "type": "addRules",
    "rules": [{"toolName": "Bash", "ruleContent": "npm test:*"}],
    "behavior": "allow",
    "destination": "localSettings",
}
HERMES_OPTIONS = [  # what Hermes 0.19 offers for a dangerous command (tests/fakes/HERMES_NOTES.md)
    {"optionId": "allow_once", "name": "Allow once", "kind": "allow_once"},
    {"optionId": "allow_session", "name": "Allow for session", "kind": "allow_always"},
    {"optionId": "allow_always", "name": "Allow always", "kind": "allow_always"},
    {"optionId": "deny", "name": "Deny", "kind": "reject_once"},
    {"optionId": "deny_always", "name": "Deny always", "kind": "reject_always"},
]


def asked(task: Task, command: str, request_id: str, **more) -> PermissionRequest:
    return actions.record_permission_request(
        task, request_id=request_id, tool_name="Bash", tool_input={"command": command}, **more
    )


def decided_by(perm: PermissionRequest) -> tuple[str, int | None]:
    return perm.status, perm.rule_id


# --- remember ---------------------------------------------------------------------------------------------------------


def test_remember_project_lets_the_next_identical_request_through_there_and_not_in_another_root(rooms):
    first, second = rooms
    task = make_task("x", cwd=str(first))
    perm = asked(task, "npm run build", "r1")
    actions.decide_permission(task, behavior="allow", request_id="r1", by="alice", remember="project")
    [rule] = PermissionRule.objects.all()
    assert (rule.pattern, rule.decision, rule.root, rule.from_request_id, rule.created_by) == (
        "Bash(npm run build)",
        "allow",
        str(first),
        perm.pk,
        "alice",
    )
    (first / "sub").mkdir()
    again = asked(make_task("y", cwd=str(first / "sub")), "npm run build", "r2")
    assert decided_by(again) == ("allowed", rule.pk)
    assert decided_by(asked(make_task("z", cwd=str(second)), "npm run build", "r3")) == ("pending", None)
    assert decided_by(asked(make_task("w", cwd=str(first)), "npm run build --watch", "r4")) == ("pending", None)


def test_remember_task_applies_to_that_task_only_and_always_everywhere(rooms):
    first, second = rooms
    task, other = make_task("x", cwd=str(first)), make_task("y", cwd=str(first))
    asked(task, "make", "r1")
    actions.decide_permission(task, behavior="allow", request_id="r1", remember="task")
    assert decided_by(asked(task, "make", "r2"))[0] == "allowed"
    assert decided_by(asked(other, "make", "r3")) == ("pending", None)
    actions.decide_permission(other, behavior="allow", request_id="r3", remember="always")
    assert decided_by(asked(make_task("z", cwd=str(second)), "make", "r4"))[0] == "allowed"


def test_remember_session_follows_the_agent_session_and_is_refused_before_it_is_known(rooms):
    first, _ = rooms
    task = make_task("x", cwd=str(first))
    asked(task, "pytest", "r1")
    with pytest.raises(InvalidInput, match="has not named its session yet"):
        actions.decide_permission(task, behavior="allow", request_id="r1", remember="session")
    assert PermissionRequest.objects.get(request_id="r1").status == PermissionStatus.PENDING, "nothing was decided"
    assert not PermissionRule.objects.exists()
    session = AgentSession.objects.create(agent=task.agent, session_id="s-1", cwd=str(first))
    Task.objects.filter(pk=task.pk).update(session=session)
    actions.decide_permission(task, behavior="allow", request_id="r1", remember="session")
    resumed = make_task("y", cwd=str(first), resume_session_id="s-1")
    assert decided_by(asked(resumed, "pytest", "r2"))[0] == "allowed"
    assert decided_by(asked(make_task("z", cwd=str(first)), "pytest", "r3")) == ("pending", None)


def test_a_remembered_deny_keeps_its_message_for_the_agent(work_root):
    task = make_task("x")
    asked(task, "curl http://example.com", "r1")
    actions.decide_permission(task, behavior="deny", request_id="r1", message="no network", remember="project")
    again = asked(make_task("y"), "curl http://example.com", "r2")
    assert (again.status, again.message) == ("denied", "no network")


def test_a_compound_command_is_remembered_part_by_part_and_lets_no_other_compound_through(work_root):
    task = make_task("x")
    asked(task, "git status && npm test", "r1")
    actions.decide_permission(task, behavior="allow", request_id="r1", remember="project")
    assert sorted(PermissionRule.objects.values_list("pattern", flat=True)) == ["Bash(git status)", "Bash(npm test)"]
    assert decided_by(asked(task, "npm test && git status", "r2"))[0] == "allowed"
    assert decided_by(asked(task, "git status && rm -rf /", "r3")) == ("pending", None)
    with pytest.raises(InvalidInput, match="several parts"):
        actions.decide_permission(task, behavior="deny", request_id="r3", remember="project")


def test_a_named_rule_must_decide_the_request_and_a_refusal_decides_nothing(work_root):
    task = make_task("x")
    asked(task, "npm test -- --watch", "r1")
    with pytest.raises(InvalidInput, match="would not allow this request"):
        actions.decide_permission(task, behavior="allow", request_id="r1", remember="project", rule="Bash(npm ci)")
    with pytest.raises(InvalidInput, match="give remember too"):
        actions.decide_permission(task, behavior="allow", request_id="r1", rule="Bash(npm test:*)")
    with pytest.raises(InvalidInput, match="remember must be one of"):
        actions.decide_permission(task, behavior="allow", request_id="r1", remember="forever")
    assert PermissionRequest.objects.get(request_id="r1").status == PermissionStatus.PENDING
    actions.decide_permission(task, behavior="allow", request_id="r1", remember="project", rule="Bash(npm test:*)")
    assert decided_by(asked(task, "npm test -- -k fast", "r2"))[0] == "allowed"


def test_a_request_bridge_cannot_write_a_narrow_rule_for_is_refused_with_the_way_out(work_root):
    task = make_task("x")
    asked(task, "echo hi > notes.txt", "r1")
    with pytest.raises(InvalidInput, match="redirects its output into a file.*give rule"):
        actions.decide_permission(task, behavior="allow", request_id="r1", remember="project")
    actions.decide_permission(task, behavior="allow", request_id="r1", remember="project", rule="Bash")
    assert PermissionRule.objects.get().pattern == "Bash"


def test_a_remembered_edit_names_the_file_and_in_a_worktree_the_same_file_of_the_next_worktree(work_root):
    task = make_task("x")
    actions.record_permission_request(
        task, request_id="r1", tool_name="Write", tool_input={"file_path": str(work_root / "src" / "a (1).py")}
    )
    actions.decide_permission(task, behavior="allow", request_id="r1", remember="project")
    rule = PermissionRule.objects.get()
    assert rule.pattern == f"Edit(/{work_root.as_posix()}/src/a \\(1\\).py)"
    again = actions.record_permission_request(
        task, request_id="r2", tool_name="Edit", tool_input={"file_path": str(work_root / "src" / "a (1).py")}
    )
    other = actions.record_permission_request(
        task, request_id="r3", tool_name="Edit", tool_input={"file_path": str(work_root / "src" / "a (2).py")}
    )
    assert (again.status, other.status) == ("allowed", "pending")


# --- suggestions ------------------------------------------------------------------------------------------------------


def test_claude_suggestions_and_acp_always_options_are_offered_as_rules(work_root):
    task = make_task("x")
    broken = {"type": "addRules", "rules": [{"toolName": "Bash", "ruleContent": "("}], "behavior": "allow"}
    mode = {"type": "setMode", "mode": "acceptEdits", "destination": "session"}
    claude = asked(task, "npm test", "r1", suggestions=[CLAUDE_SUGGESTION, broken, mode])
    assert actions.permission_data(claude)["suggested_rules"] == [
        {"rule": "Bash(npm test:*)", "decision": "allow", "remember": "project"}
    ]
    hermes = actions.record_permission_request(
        task,
        request_id="r2",
        tool_name="recursive delete: rm -rf build",
        tool_input={"command": "rm -rf build", "description": "recursive delete"},
        suggestions=HERMES_OPTIONS,
    )
    assert actions.permission_data(hermes)["suggested_rules"] == [
        {"rule": "Bash(rm -rf build)", "decision": "allow", "remember": "session"},
        {"rule": "Bash(rm -rf build)", "decision": "allow", "remember": "always"},
        {"rule": "Bash(rm -rf build)", "decision": "deny", "remember": "always"},
    ]
    first_part_only = {**CLAUDE_SUGGESTION, "rules": [{"toolName": "Bash", "ruleContent": "git status *"}]}
    compound = asked(task, "git status && rm -rf build", "r3", suggestions=[first_part_only])
    assert actions.permission_data(compound)["suggested_rules"] == [], "a rule that would not decide it is not offered"
    actions.decide_permission(task, behavior="allow", request_id="r2", remember="always", rule="Bash(rm -rf build)")
    assert actions.permission_data(PermissionRequest.objects.get(request_id="r2"))["suggested_rules"] == []


# --- REST and MCP -----------------------------------------------------------------------------------------------------


def test_rest_remembers_a_decision_and_lists_the_suggestions(rooms):
    first, second = rooms
    token = actions.create_token("planner", Scope.DECIDE)[1]
    task = make_task("x", cwd=str(first))
    asked(task, "npm test", "r1", suggestions=[CLAUDE_SUGGESTION])
    [pending] = rest("get", f"/v1/permissions?task_id={task.public_id}", token).json()["permissions"]
    [offer] = pending["suggested_rules"]
    body = {"task_id": str(task.public_id), "behavior": "allow", "remember": offer["remember"], "rule": offer["rule"]}
    answer = rest("post", "/v1/task/permission", token, body)
    assert answer.status_code == 200, answer.content
    [made] = answer.json()["remembered"]
    assert (made["rule"], made["root"], made["created_by"], made["from_request"]) == (
        "Bash(npm test:*)",
        str(first),
        "token:planner",
        {"task_id": str(task.public_id), "request_id": "r1"},
    )
    wrong = rest("post", "/v1/task/permission", token, {**body, "remember": "forever"})
    assert (wrong.status_code, wrong.json()["code"]) == (422, "invalid_request")


def test_a_token_limited_to_roots_cannot_remember_beyond_them(rooms):
    first, _ = rooms
    token = actions.create_token("limited", Scope.DECIDE, [str(first)])[1]
    task = make_task("x", cwd=str(first))
    asked(task, "make", "r1")
    body = {"task_id": str(task.public_id), "behavior": "allow", "remember": "always"}
    refused = rest("post", "/v1/task/permission", token, body)
    assert (refused.status_code, refused.json()["code"]) == (403, "outside_token_roots")
    assert PermissionRequest.objects.get(request_id="r1").status == PermissionStatus.PENDING
    allowed = rest("post", "/v1/task/permission", token, {**body, "remember": "project"})
    assert allowed.status_code == 200 and [r["root"] for r in allowed.json()["remembered"]] == [str(first)]


def test_mcp_offers_suggestions_and_remembers_a_decision(mcp_env, work_root):
    task = make_task("x")
    asked(task, "npm test", "r1", suggestions=[CLAUDE_SUGGESTION])
    pending, decided, preset = over_stdio(
        mcp_env,
        [
            ("permissions_pending", {"job_id": str(task.public_id)}),
            (
                "permission_decide",
                {"job_id": str(task.public_id), "behavior": "allow", "remember": "project", "rule": "Bash(npm test:*)"},
            ),
            ("rule_preset", {"preset": "read-only", "root": str(work_root)}),
        ],
    )
    assert "SUGGESTED_RULE: allow Bash(npm test:*) remember=project" in pending.splitlines()
    rule = PermissionRule.objects.get(from_request__request_id="r1")
    assert f"REMEMBERED: {rule.pk} allow Bash(npm test:*) (root {work_root})" in decided.splitlines()
    assert preset.splitlines()[:3] == ["PRESET: read-only", f"ROOT: {work_root}", "STATUS: on"]
    assert PermissionRule.objects.filter(preset="read-only").count() == len(rules.PRESETS["read-only"])


# --- presets ----------------------------------------------------------------------------------------------------------


def test_the_read_only_preset_lets_reads_and_git_state_through_and_nothing_else(rooms):
    first, second = rooms
    made = actions.switch_preset("read-only", str(first), by="alice")
    assert len(made) == len(rules.PRESETS["read-only"]) and actions.switch_preset("read-only", str(first)) == []
    task = make_task("x", cwd=str(first))
    read = actions.record_permission_request(
        task, request_id="r1", tool_name="Read", tool_input={"file_path": str(first / "a.py")}
    )
    outside = actions.record_permission_request(
        task, request_id="r2", tool_name="Read", tool_input={"file_path": "/etc/passwd"}
    )
    assert (read.status, outside.status) == ("allowed", "pending")
    statuses = {
        cmd: asked(task, cmd, cmd).status for cmd in ("git status", "git log -5", "git diff --output=x", "git push")
    }
    assert statuses == {
        "git status": "allowed",
        "git log -5": "allowed",
        "git diff --output=x": "pending",
        "git push": "pending",
    }
    assert asked(make_task("y", cwd=str(second)), "git status", "r3").status == "pending"
    assert [p["roots"] for p in actions.presets_data() if p["preset"] == "read-only"] == [[str(first)]]
    removed = actions.switch_preset("read-only", str(first), on=False, by="bob")
    assert {r.removed_by for r in removed} == {"bob"} and not PermissionRule.objects.live().exists()
    assert asked(task, "git status", "r4").status == "pending"


def test_presets_over_rest_and_the_terminal_command(rooms):
    first, _ = rooms
    token = actions.create_token("planner", Scope.DECIDE)[1]
    listed = rest("get", "/v1/rules/presets", token).json()["presets"]
    assert [(p["preset"], p["roots"]) for p in listed] == [("read-only", [])]
    switched = rest("post", "/v1/rules/presets", token, {"preset": "read-only", "root": str(first)})
    assert switched.status_code == 200 and {r["preset"] for r in switched.json()["rules"]} == {"read-only"}
    unknown = rest("post", "/v1/rules/presets", token, {"preset": "yolo"})
    assert unknown.status_code == 422
    out = StringIO()
    call_command("rules", "preset", "read-only", "--root", str(first), "--off", stdout=out, stderr=StringIO())
    assert len(out.getvalue().splitlines()) == len(rules.PRESETS["read-only"])
    call_command("rules", "add", "Bash(make:*)", "allow", "--root", str(first), stdout=out)
    assert PermissionRule.objects.live().get().created_by == "manage.py rules"
    with pytest.raises(CommandError, match="cannot be used"):
        call_command("rules", "add", "Bash(", "allow")
    limited = Caller("token:limited", Scope.DECIDE, (str(first / "sub"),))
    with pytest.raises(Refused):
        actions.switch_preset("read-only", str(first), caller=limited)


def test_a_remembered_rule_also_answers_the_identical_requests_already_waiting_in_its_scope(rooms):
    first, second = rooms
    tasks = [make_task(name, cwd=str(first)) for name in ("x", "y", "z")]
    elsewhere = make_task("w", cwd=str(second))
    for index, task in enumerate([*tasks, elsewhere]):
        asked(task, "npm test", f"r{index}")
    (first / "sub").mkdir()
    actions.add_rule("Bash(npm test)", "ask", root=str(first / "sub"))
    deeper = make_task("v", cwd=str(first / "sub"))
    asked(deeper, "npm test", "asked")
    actions.decide_permission(tasks[0], behavior="allow", request_id="r0", remember="project")
    rule = PermissionRule.objects.get(from_request__request_id="r0")
    statuses = dict(PermissionRequest.objects.values_list("request_id", "status"))
    assert statuses == {"r0": "allowed", "r1": "allowed", "r2": "allowed", "r3": "pending", "asked": "pending"}
    answered = PermissionRequest.objects.get(request_id="r1")
    assert (answered.decided_via, answered.rule_id) == ("policy", rule.pk)
    assert [e.data["rule_id"] for e in actions.events_since(tasks[1]) if e.kind == "permission_decision"] == [rule.pk]
    assert not [e for e in actions.events_since(deeper) if e.kind == "permission_decision"], "ask still wins there"


def test_a_rule_for_the_jobs_of_one_token_is_made_over_rest_and_mcp(mcp_env, work_root):
    token = actions.create_token("planner", Scope.DECIDE)[1]
    made = rest("post", "/v1/rules", token, {"rule": "Bash(make)", "decision": "allow", "created_for": "token:ci"})
    assert (made.status_code, made.json()["created_for"]) == (200, "token:ci")
    [added] = over_stdio(mcp_env, [("rule_add", {"rule": "Bash(ls)", "decision": "allow", "created_for": "user:al"})])
    assert "FOR_JOBS_OF: user:al" in added.splitlines()
    assert asked(make_task("x", created_by="token:ci"), "make", "r1").status == "allowed"
    assert asked(make_task("y", created_by="token:other"), "make", "r2").status == "pending"
