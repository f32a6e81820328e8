"""jobs/supervision/runners/qwen.py, replaying what the real Qwen Code 0.24 printed (tests/fixtures/qwen/, recorded
by tests/fakes/record_qwen.py with `--approval-mode default`; tests/fakes/QWEN_NOTES.md says what each shows). The same
runner against the live CLI: tests/e2e/test_qwen.py."""

import json

from jobs.agents import registry
from jobs.core.permission_rules import matches, parse
from jobs.core.vocabulary import PermissionMode, PermissionStatus, Status
from jobs.supervision.runners.base import RunSpec, Step
from jobs.supervision.runners.declared import DeclaredAcpRunner
from jobs.supervision.runners.qwen import QwenRunner
from tests.unit import acp_replay
from tests.unit.acp_replay import events


def replay(
    name: str, decision: str = "", runner_class: type[DeclaredAcpRunner] = QwenRunner, **replay_options
) -> tuple[DeclaredAcpRunner, list[Step], list[dict]]:
    runner = runner_class(RunSpec(agent="qwen", prompt="p", cwd="/tmp/w"), registry.PRESETS["qwen"])
    steps, written = acp_replay.replay(runner, "qwen", name, decision, **replay_options)
    return runner, steps, written


def test_each_model_calls_tokens_are_summed_and_are_not_shown_as_text():
    runner, steps, _ = replay("plain")
    outcome = runner.outcome(0, "")
    assert outcome.status == Status.DONE and outcome.result == "".join(e["text"] for e in events(steps, "text_delta"))
    assert (outcome.usage["input_tokens"], outcome.usage["output_tokens"]) == (100, 8)
    assert all(e["text"] for e in events(steps, "text_delta")), "a tokens report was shown as an empty message"


def test_a_command_is_asked_with_its_input_allowed_once_and_the_turn_counts_both_model_calls():
    runner, steps, written = replay("shell_allow", decision=PermissionStatus.ALLOWED)
    [ask] = [ask for step in steps for ask in step.asks]
    assert ask.tool_input["command"] == "touch made.txt"
    assert [m["result"] for m in written if m.get("id") == 0 and "result" in m] == [
        {"outcome": {"outcome": "selected", "optionId": "proceed_once"}}
    ]
    assert [m["error"]["code"] for m in written if "error" in m] == [-32601]  # its craft/drainMidTurnQueue, at once
    assert matches(parse("Bash(touch:*)"), ask.tool_name, ask.tool_input, "/tmp/w", "allow")
    assert (runner.outcome(0, "").usage["input_tokens"], runner.outcome(0, "").usage["output_tokens"]) == (200, 3)


def test_a_resume_counts_the_new_turn_only_not_the_replayed_one():
    runner = QwenRunner(
        RunSpec(agent="qwen", prompt="p", cwd="/tmp/w", resume_session_id="s"), registry.PRESETS["qwen"]
    )
    steps, written = acp_replay.replay(runner, "qwen", "load")
    assert [m.get("method") for m in written] == ["initialize", "session/load", "session/prompt"]
    assert [e["update"] for e in events(steps, "history")] == ["user_message_chunk", "agent_message_chunk"]
    updates = [message.get("params", {}).get("update", {}) for message in received("load")]
    reported = [update["_meta"] for update in updates if "usage" in update.get("_meta", {})]
    assert ["qwenTranscript" in meta for meta in reported] == [True, False]  # the replayed turn's, then the new one's
    assert runner.outcome(0, "").usage["input_tokens"] == reported[1]["usage"]["inputTokens"] == 100


def test_a_run_starts_in_the_mode_that_asks_or_for_skip_in_yolo_never_in_auto():
    asking = QwenRunner(RunSpec(agent="qwen", prompt="p", cwd="/w"), registry.PRESETS["qwen"])
    skipping = QwenRunner(
        RunSpec(agent="qwen", prompt="p", cwd="/w", permission_mode=PermissionMode.SKIP), registry.PRESETS["qwen"]
    )
    assert asking.argv() == ["qwen", "--acp", "--approval-mode", "default"]
    assert skipping.argv() == ["qwen", "--acp", "--approval-mode", "yolo"]
    skipping.session_id = "s"
    assert skipping.session_setup() == []
    assert asking.env()["QWEN_CODE_NO_RELAUNCH"] == "true"


def test_cancel_with_a_permission_pending_cancels_and_an_api_error_fails_with_its_words():
    runner, _, _ = replay("cancel_permission", until_asked=True)
    assert [json.loads(line).get("method") for line in runner.stop_lines()] == [
        "session/cancel",
        None,
    ]
    runner, _, _ = replay("api_error")
    outcome = runner.outcome(0, "")
    assert outcome.status == Status.FAILED and "500 Boom from fake" in outcome.error


def test_as_a_plain_acp_agent_its_tokens_reports_would_be_lost():
    """What the Qwen runner adds, seen by its absence: DeclaredAcpRunner follows the protocol only."""
    runner, _, _ = replay("plain", runner_class=DeclaredAcpRunner)
    assert runner.outcome(0, "").usage["input_tokens"] is None


def test_a_file_write_asks_with_its_path_so_that_edit_rules_decide_it():
    _, steps, _ = replay("write_allow")
    [ask] = [ask for step in steps for ask in step.asks]
    folder = ask.tool_input["file_path"].rsplit("/", 1)[0]
    assert ask.tool_name == "Writing to a.txt"
    assert matches(parse(f"Edit(/{folder}/**)"), ask.tool_name, ask.tool_input, folder, "allow")
    assert not matches(parse("Edit(//elsewhere/**)"), ask.tool_name, ask.tool_input, folder, "allow")


def received(name: str) -> list[dict]:
    return [entry["msg"] for entry in acp_replay.transcript("qwen", name) if entry["dir"] == "in"]
