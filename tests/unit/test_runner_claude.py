"""The Claude Code runner's parsing, on transcripts the real CLI 2.1.332 printed (tests/fakes/record_claude.py)."""

import json
from pathlib import Path

import pytest

from jobs.core.vocabulary import PermissionMode, PermissionStatus, Status
from jobs.supervision.runners.base import Decision, RunSpec, Step
from jobs.supervision.runners.claude import ClaudeRunner
from jobs.supervision.runners.hermes import HERMES_PROVIDER_ENV

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "claude"


def replay(name: str, **task_fields) -> tuple[ClaudeRunner, list[Step]]:
    task = RunSpec(prompt="p", cwd="/tmp", **task_fields)
    runner = ClaudeRunner(task)
    lines = (FIXTURES / f"{name}.jsonl").read_bytes().splitlines(keepends=True)
    return runner, [runner.on_line(line) for line in lines]


def meta(name: str) -> dict:
    return json.loads((FIXTURES / f"{name}.meta.json").read_text())


def events(steps: list[Step], kind: str) -> list[dict]:
    return [data for step in steps for k, data in step.events if k == kind]


def test_plain_answer():
    runner, steps = replay("plain")
    assert events(steps, "init")[0]["session_id"] == steps[0].session_id
    assert steps[-1].finished
    outcome = runner.outcome(meta("plain")["exit_code"], "")
    assert outcome.status == Status.DONE and outcome.exit_code == 0
    assert outcome.result == "".join(e["text"] for e in events(steps, "text"))
    assert outcome.usage["input_tokens"] == 100 and outcome.usage["cost_usd"] > 0


def test_partial_messages_become_text_deltas_that_add_up():
    runner, steps = replay("partial")
    deltas = events(steps, "text_delta")
    assert len(deltas) > 1
    assert "".join(d["text"] for d in deltas) == events(steps, "text")[0]["text"]
    assert {d["message_id"] for d in deltas} == {events(steps, "text")[0]["message_id"]}


def test_tool_call_with_permission_request():
    runner, steps = replay("bash_allowed")
    asks = [ask for step in steps for ask in step.asks]
    assert len(asks) == 1 and asks[0].tool_name == "Bash" and "touch marker.txt" in asks[0].tool_input["command"]
    tool_use = events(steps, "tool_use")[0]
    assert tool_use["id"] == asks[0].tool_use_id
    assert events(steps, "tool_result")[0]["tool_use_id"] == tool_use["id"]
    assert runner.outcome(0, "").status == Status.DONE


def test_blocks_of_one_message_share_its_id_and_usage_is_counted_once():
    runner, steps = replay("two_tools")
    ids = [e["message_id"] for e in events(steps, "tool_use")]
    assert len(ids) == 2 and ids[0] == ids[1]
    assert len([u for u in events(steps, "usage") if u["message_id"] == ids[0]]) == 1


def test_two_reads_are_pending_at_once():
    runner, steps = replay("two_reads")
    asks = [ask for step in steps for ask in step.asks]
    assert [a.tool_name for a in asks] == ["Read", "Read"]
    assert len({a.request_id for a in asks}) == 2


def test_interrupt_withdraws_pending_requests_and_fails_the_turn():
    runner, steps = replay("interrupt_two_pending")
    asked = [ask.request_id for step in steps for ask in step.asks]
    withdrawn = [rid for step in steps for rid in step.withdrawn]
    assert withdrawn and set(withdrawn) == set(asked)
    outcome = runner.outcome(meta("interrupt_two_pending")["exit_code"], "")
    assert outcome.status == Status.FAILED and "error_during_execution" in outcome.error


def test_api_error_arrives_as_success_with_is_error():
    runner, steps = replay("api_500")
    outcome = runner.outcome(meta("api_500")["exit_code"], "")
    assert outcome.status == Status.FAILED and outcome.exit_code == 1
    assert outcome.error.startswith("API Error: 500")


def test_api_retry_is_shown_as_progress():
    runner, steps = replay("api_retry")
    retries = events(steps, "api_retry")
    assert retries and retries[0]["attempt"] == 1


def test_max_turns_is_a_failure_named_by_its_subtype():
    runner, steps = replay("max_turns")
    outcome = runner.outcome(meta("max_turns")["exit_code"], "")
    assert outcome.status == Status.FAILED and "error_max_turns" in outcome.error


def test_skip_permissions_as_root_fails_with_the_clis_words():
    recorded = meta("skip_permissions_root")
    runner, steps = replay("skip_permissions_root", permission_mode=PermissionMode.SKIP)
    assert steps == []
    outcome = runner.outcome(recorded["exit_code"], recorded["stderr"])
    assert outcome.status == Status.FAILED
    assert "cannot be used with root/sudo privileges" in outcome.error
    assert "--dangerously-skip-permissions" in runner.argv()
    assert "--permission-prompt-tool" not in runner.argv()


def test_non_json_output_is_kept_as_text():
    runner = ClaudeRunner(RunSpec(prompt="p", cwd="/tmp"))
    assert runner.on_line(b"Segmentation fault\n").events == [("stdout", {"text": "Segmentation fault"})]
    assert runner.on_line(b"[1, 2]\n").events == [("stdout", {"text": "[1, 2]"})]


@pytest.mark.parametrize(
    ("status", "updated", "expected"),
    [
        (PermissionStatus.ALLOWED, None, {"behavior": "allow", "updatedInput": {"command": "ls"}}),
        (PermissionStatus.ALLOWED, {"command": "pwd"}, {"behavior": "allow", "updatedInput": {"command": "pwd"}}),
        (PermissionStatus.DENIED, None, {"behavior": "deny", "message": "no", "interrupt": False}),
        (PermissionStatus.EXPIRED, None, {"behavior": "deny", "message": "no", "interrupt": False}),
    ],
)
def test_answers_use_the_shape_the_cli_accepts(status, updated, expected):
    runner = ClaudeRunner(RunSpec(prompt="p", cwd="/tmp"))
    decision = Decision(
        request_id="R1", tool_input={"command": "ls"}, status=status, updated_input=updated, message="no"
    )
    line = runner.answer(decision)
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert json.loads(line) == {
        "type": "control_response",
        "response": {"subtype": "success", "request_id": "R1", "response": expected},
    }


def test_an_unreadable_permission_request_is_still_denied():
    runner = ClaudeRunner(RunSpec(prompt="p", cwd="/tmp"))
    head = b'{"type":"control_request","request_id":"abc-1","request":{"subtype":"can_use_tool","input":{"c":"xx'
    reply = runner.on_oversized_line(head, 10_000_000).replies
    assert len(reply) == 1
    response = json.loads(reply[0])["response"]
    assert response["request_id"] == "abc-1" and response["response"]["behavior"] == "deny"
    assert "BRIDGE_MAX_LINE_BYTES" in response["response"]["message"]


def test_argv_for_options_and_resume():
    task = RunSpec(
        prompt="p",
        cwd="/tmp",
        options={"model": "sonnet", "max_turns": 4, "allowed_tools": ["Read", "Grep"]},
        resume_session_id="abc",
    )
    argv = ClaudeRunner(task).argv()
    assert argv[1:7] == ["-p", "--input-format", "stream-json", "--output-format", "stream-json", "--verbose"]
    for pair in (["--model", "sonnet"], ["--max-turns", "4"], ["--allowedTools", "Read,Grep"], ["--resume", "abc"]):
        index = argv.index(pair[0])
        assert argv[index : index + 2] == pair
    assert argv[argv.index("--permission-prompt-tool") + 1] == "stdio"


def test_the_task_goes_on_stdin_never_in_argv():
    prompt = "--model evil\n" + "é" * 70_000  # 140,000+ bytes, and it starts with a dash
    runner = ClaudeRunner(RunSpec(prompt=prompt, cwd="/tmp", options={"allowed_tools": ["Read"]}))
    assert not any("evil" in arg or "é" in arg for arg in runner.argv())
    (line,) = runner.stdin_lines()
    assert json.loads(line)["message"]["content"] == [{"type": "text", "text": prompt}]


def test_claude_gets_no_other_providers_keys(monkeypatch):
    for name in HERMES_PROVIDER_ENV:
        monkeypatch.setenv(name, "k")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "a")
    env = ClaudeRunner(RunSpec(prompt="p", cwd="/tmp")).env()
    assert env["ANTHROPIC_API_KEY"] == "a"
    assert not {name for name in HERMES_PROVIDER_ENV if not name.startswith(("ANTHROPIC_", "CLAUDE_"))} & set(env)
