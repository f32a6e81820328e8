"""End to end: Claude Code's options as people use them with `claude -p`, on the real CLI behind a real Bridge server,
seen through REST and SSE. The CLI talks only to the scripted fake Anthropic server (tests/e2e/conftest.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.bridge_server import data_events
from tests.e2e.test_claude import bash, follow, of_kind, on_first_permission, tool_results
from tests.fakes.anthropic_server import text, tool_use

pytestmark = pytest.mark.e2e
NOT_AN_EDIT = "python3 -c 'print(1)'"  # a command Claude Code does not count as a file edit: acceptEdits still asks


def write(path: Path) -> object:
    return tool_use("Write", {"file_path": str(path), "content": "written\n"})


def test_accept_edits_lets_claude_edit_without_asking_and_still_relays_a_command(bridge, script, cwd):
    script.push(write(cwd / "edited.txt"), bash(NOT_AN_EDIT), text("Edited, then ran it."))
    task_id = bridge.create_task("Edit, then run.", cwd, permission_mode="acceptEdits")

    def allow(event):
        perm = event["data"]["data"]
        assert (perm["tool_name"], perm["input"]["command"]) == ("Bash", NOT_AN_EDIT)
        bridge.ok(bridge.decide(task_id, "allow", request_id=perm["request_id"]))

    events = data_events(follow(bridge, task_id, on_first_permission(allow)))

    assert of_kind(events, "init")[0]["permissionMode"] == "acceptEdits"
    assert [ask["tool_name"] for ask in of_kind(events, "permission_request")] == ["Bash"]  # the edit was not asked
    assert (cwd / "edited.txt").read_text() == "written\n"
    assert bridge.output_of(task_id)["task"]["status"] == "done"
    assert [block.get("is_error") for block in tool_results(script.requests[2])] == [False]  # the command ran


def test_plan_asks_before_an_edit_and_a_denial_keeps_the_tree_untouched(bridge, script, cwd):
    script.push(write(cwd / "planned.txt"), text("Here is the plan instead."))
    task_id = bridge.create_task("Plan it.", cwd, permission_mode="plan")

    def deny(event):
        perm = event["data"]["data"]
        assert perm["tool_name"] == "Write"
        bridge.ok(bridge.decide(task_id, "deny", request_id=perm["request_id"], message="Only plan."))

    events = data_events(follow(bridge, task_id, on_first_permission(deny)))

    assert of_kind(events, "init")[0]["permissionMode"] == "plan"
    assert not (cwd / "planned.txt").exists()
    assert bridge.output_of(task_id)["task"]["status"] == "done"


def test_added_directories_tools_denied_and_the_appended_system_prompt_reach_claude(bridge, script, cwd):
    extra = bridge.work / f"{cwd.name}-extra"
    extra.mkdir()
    appended = "-Answer in French.\nE2E-SYSTEM-4471"
    script.push(write(extra / "there.txt"), text("Done."))
    task_id = bridge.create_task(
        "Write over there.",
        cwd,
        permission_mode="acceptEdits",
        add_dirs=[str(extra)],
        disallowed_tools=["WebFetch", "Bash"],
        append_system_prompt=appended,
    )

    def deny(event):  # none is expected; one that comes is denied, so the run ends and the test says why
        request_id = event["data"]["data"]["request_id"]
        bridge.ok(bridge.decide(task_id, "deny", request_id=request_id, message="not expected"))

    events = data_events(follow(bridge, task_id, on_first_permission(deny)))

    assert of_kind(events, "permission_request") == []  # an edit in an added directory is one acceptEdits accepts
    assert (extra / "there.txt").read_text() == "written\n"
    first = script.requests[0]
    assert first["system"][-1]["text"].endswith(appended)
    tools = {tool["name"] for tool in first["tools"]}
    assert "Write" in tools and not tools & {"WebFetch", "Bash"}
