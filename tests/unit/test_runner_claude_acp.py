"""jobs/supervision/runners/claude_acp.py, replaying what Zed's adapter 0.101 (with Claude Code 2.1.332) printed
(tests/fixtures/claude_acp/, recorded by tests/fakes/record_claude_acp.py; tests/fakes/CLAUDE_ACP_NOTES.md says what
each shows). No end-to-end test drives it yet: `make tools` does not install it."""

import json

from jobs.agents import registry
from jobs.core.permission_rules import matches, parse
from jobs.core.vocabulary import PermissionMode, PermissionStatus, Status
from jobs.supervision.runners import runner_for
from jobs.supervision.runners.base import RunSpec, Step
from jobs.supervision.runners.claude_acp import ClaudeAcpRunner
from tests.unit import acp_replay


def replay(name: str, decision: str = "", **options) -> tuple[ClaudeAcpRunner, list[Step], list[dict]]:
    runner = ClaudeAcpRunner(RunSpec(agent="claude-acp", prompt="p", cwd="/tmp/w"), registry.PRESETS["claude-acp"])
    steps, written = acp_replay.replay(runner, "claude_acp", name, decision, **options)
    return runner, steps, written


def test_a_run_leaves_the_auto_mode_for_the_one_that_asks_and_a_command_is_asked_about():
    runner, steps, written = replay("shell_allow", decision=PermissionStatus.ALLOWED)
    assert [m.get("method") for m in written][:4] == ["initialize", "session/new", "session/set_mode", "session/prompt"]
    assert written[2]["params"]["modeId"] == "default"
    [ask] = [ask for step in steps for ask in step.asks]
    assert ask.tool_input["command"] == "touch made.txt && ls"
    assert ask.tool_name == "touch made.txt && ls"  # titled its command: rules read it as one
    assert matches(parse("Bash(touch *)"), ask.tool_name, ask.tool_input, "/tmp/w", "deny")
    [answer] = [m for m in written if m.get("id") == 0 and "result" in m]
    assert answer["result"]["outcome"]["optionId"] == "allow-once"
    outcome = runner.outcome(0, "")
    assert outcome.status == Status.DONE and outcome.usage["input_tokens"] == 200


def test_cancel_sends_only_the_cancel_the_adapter_withdraws_its_own_requests():
    runner, _, _ = replay("cancel_permission", until_asked=True)
    assert [json.loads(line).get("method") for line in runner.stop_lines()] == ["session/cancel"]


def test_skip_asks_for_bypass_and_a_model_goes_in_the_environment_not_in_a_call():
    spec = RunSpec(
        agent="claude-acp", prompt="p", cwd="/w", permission_mode=PermissionMode.SKIP, options={"model": "m"}
    )
    runner = runner_for(spec)
    runner.session_id = "s"
    assert isinstance(runner, ClaudeAcpRunner)
    assert runner.session_setup() == [("session/set_mode", {"sessionId": "s", "modeId": "bypassPermissions"})]
    assert runner.env()["ANTHROPIC_MODEL"] == "m" and runner.env()["CLAUDE_CODE_ENABLE_PROMPT_SUGGESTION"] == "false"
