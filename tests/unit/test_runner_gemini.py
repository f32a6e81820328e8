"""jobs/supervision/runners/gemini.py (and the generic ACP client under it), replaying what the real Gemini CLI 0.61
printed (tests/fixtures/gemini/, recorded by tests/fakes/record_gemini.py; tests/fakes/GEMINI_NOTES.md says what
each shows). The same runner against the live CLI: tests/e2e/test_gemini.py."""

import json

from jobs.agents import registry
from jobs.core.permission_rules import matches, parse
from jobs.core.vocabulary import PermissionMode, PermissionStatus, Status
from jobs.supervision.runners.base import RunSpec, Step
from jobs.supervision.runners.declared import DeclaredAcpRunner
from jobs.supervision.runners.gemini import GeminiRunner
from tests.unit import acp_replay
from tests.unit.acp_replay import events


def replay(
    name: str,
    decision: str = "",
    runner_class: type[DeclaredAcpRunner] = GeminiRunner,
    until_asked: bool = False,
    **spec_fields,
) -> tuple[DeclaredAcpRunner, list[Step], list[dict]]:
    """A fresh Gemini runner (of `runner_class`) fed the recording `name` (tests/unit/acp_replay.py)."""
    runner = runner_class(RunSpec(agent="gemini", prompt="p", cwd="/tmp/w", **spec_fields), registry.PRESETS["gemini"])
    steps, written = acp_replay.replay(runner, "gemini", name, decision, until_asked)
    return runner, steps, written


def test_a_plain_answer_streams_and_ends_done_with_the_tokens_of_its_meta():
    runner, steps, written = replay("plain")
    assert [m.get("method") for m in written] == ["initialize", "session/new", "session/prompt"]
    deltas = [e["text"] for e in events(steps, "text_delta")]
    assert len(deltas) == 4 and steps[-1].finished
    outcome = runner.outcome(0, "")
    assert (outcome.status, outcome.result) == (Status.DONE, "".join(deltas).strip())
    assert (outcome.usage["input_tokens"], outcome.usage["output_tokens"]) == (100, 8)


def test_a_shell_command_asks_as_a_command_rules_can_match_and_is_allowed_once():
    runner, steps, written = replay("shell_allow", decision=PermissionStatus.ALLOWED)
    [ask] = [ask for step in steps for ask in step.asks]
    assert (ask.request_id, ask.tool_name) == ("0", "touch made.txt")
    assert (
        ask.tool_input["command"] == "touch made.txt" and "current working directory" in ask.tool_input["description"]
    )
    assert [o["kind"] for o in ask.suggestions] == ["allow_always", "allow_once", "reject_once"]
    [answer] = [m for m in written if m.get("id") == 0 and "result" in m]
    assert answer["result"] == {"outcome": {"outcome": "selected", "optionId": "proceed_once"}}
    assert matches(parse("Bash(touch:*)"), ask.tool_name, ask.tool_input, "/tmp/w", "allow")
    assert not matches(parse("Bash(rm:*)"), ask.tool_name, ask.tool_input, "/tmp/w", "deny")
    assert runner.outcome(0, "").usage["input_tokens"] == 200


def test_a_denied_command_is_answered_with_its_reject_option():
    _, steps, written = replay("shell_deny", decision=PermissionStatus.DENIED)
    [answer] = [m for m in written if m.get("id") == 0 and "result" in m]
    assert answer["result"] == {"outcome": {"outcome": "selected", "optionId": "cancel"}}


def test_cancel_with_a_permission_pending_cancels_the_session_and_answers_the_request_cancelled():
    runner, _, _ = replay("cancel_permission", until_asked=True)
    lines = [json.loads(line) for line in runner.stop_lines()]
    recorded = acp_replay.sent("gemini", "cancel_permission")[-2:]
    assert lines == recorded  # what the recording sent, after which the CLI ended the turn `cancelled` at once
    assert [line.get("method") for line in lines] == ["session/cancel", None]
    assert lines[1] == {"jsonrpc": "2.0", "id": 0, "result": {"outcome": {"outcome": "cancelled"}}}


def test_a_resume_holds_the_prompt_until_the_replay_ends_and_keeps_the_replay_out_of_the_output():
    runner, steps, written = replay("load", resume_session_id="d2c4a0d1-0000-4000-8000-000000000000")
    assert [m.get("method") for m in written] == ["initialize", "session/load", "session/prompt"]
    prompt_step = next(index for index, step in enumerate(steps) if step.replies and index > 1)
    replayed = [e["update"] for step in steps[:prompt_step] for k, e in step.events if k == "history"]
    assert replayed[:2] == ["user_message_chunk", "user_message_chunk"] and "agent_message_chunk" in replayed
    deltas = "".join(e["text"] for e in events(steps, "text_delta"))
    assert runner.outcome(0, "").result == deltas.strip() and deltas, "only the new turn's text is output"


def test_skip_sets_yolo_and_its_announcement_is_not_output():
    runner, steps, written = replay("yolo_trusted", permission_mode=PermissionMode.SKIP)
    assert [m.get("method") for m in written][2:] == ["session/set_mode", "session/prompt"]
    assert written[2]["params"]["modeId"] == "yolo"
    assert [e["text"] for e in events(steps, "mode")] == ["[MODE_UPDATE] yolo"]
    assert all("MODE_UPDATE" not in e["text"] for e in events(steps, "text_delta"))
    assert "MODE_UPDATE" not in runner.outcome(0, "").result


def test_an_api_error_fails_the_task_with_its_words():
    runner, steps, _ = replay("api_error")
    outcome = runner.outcome(0, "")
    assert outcome.status == Status.FAILED and "Boom from fake" in outcome.error and "(500)" in outcome.error


def test_as_a_plain_acp_agent_the_cli_still_runs_but_counts_no_tokens_and_shows_its_mode_change_as_text():
    """What the Gemini runner adds, seen by its absence: DeclaredAcpRunner follows the protocol only."""
    runner, steps, _ = replay("yolo_trusted", runner_class=DeclaredAcpRunner, permission_mode=PermissionMode.SKIP)
    outcome = runner.outcome(0, "")
    assert outcome.status == Status.DONE and outcome.usage["input_tokens"] is None
    assert "[MODE_UPDATE] yolo" in [e["text"] for e in events(steps, "text_delta")]


def test_a_file_write_asks_with_its_path_so_that_edit_rules_decide_it():
    _, steps, _ = replay("write_allow")
    [ask] = [ask for step in steps for ask in step.asks]
    assert ask.tool_name == "Writing to a.txt" and ask.tool_input["file_path"].endswith("/write_allow/a.txt")
    folder = ask.tool_input["file_path"].rsplit("/", 1)[0]
    assert matches(parse(f"Edit(/{folder}/**)"), ask.tool_name, ask.tool_input, folder, "allow")
    assert not matches(parse("Edit(//elsewhere/**)"), ask.tool_name, ask.tool_input, folder, "allow")
    assert matches(parse("Edit"), ask.tool_name, ask.tool_input, folder, "deny")
