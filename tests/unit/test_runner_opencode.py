"""jobs/supervision/runners/opencode.py, replaying what opencode 1.18 printed (tests/fixtures/opencode/, recorded by
tests/fakes/record_opencode.py; tests/fakes/OPENCODE_NOTES.md says what each shows). No end-to-end test drives it yet:
`make tools` does not install it."""

import json

from jobs.agents import registry
from jobs.core.permission_rules import matches, parse
from jobs.core.vocabulary import PermissionStatus, Status
from jobs.supervision.runners import runner_for
from jobs.supervision.runners.base import RunSpec
from jobs.supervision.runners.opencode import ASKING, OpencodeRunner
from tests.unit import acp_replay


def test_every_run_is_told_to_ask_and_a_repository_cannot_tell_it_otherwise():
    runner = runner_for(RunSpec(agent="opencode", prompt="p", cwd="/w"))
    env, again = runner.env(), runner.env()
    assert isinstance(runner, OpencodeRunner)
    assert json.loads(env["OPENCODE_PERMISSION"]) == ASKING
    agents = json.loads(env["OPENCODE_CONFIG_CONTENT"])["agent"]
    assert {name: agent["permission"] for name, agent in agents.items()} == dict.fromkeys(
        ("build", "plan", "general"), ASKING
    )
    assert env["OPENCODE_SERVER_PASSWORD"] != again["OPENCODE_SERVER_PASSWORD"], "a password of its own per run"


def test_a_command_asks_as_a_command_rules_read_and_is_allowed_once():
    runner = OpencodeRunner(RunSpec(agent="opencode", prompt="p", cwd="/tmp/w"), registry.PRESETS["opencode"])
    steps, written = acp_replay.replay(runner, "opencode", "shell_allow", PermissionStatus.ALLOWED)
    [ask] = [ask for step in steps for ask in step.asks]
    assert (ask.tool_name, ask.tool_input) == ("touch made.txt", {"command": "touch made.txt"})
    assert matches(parse("Bash(touch:*)"), ask.tool_name, ask.tool_input, "/tmp/w", "allow")
    [answer] = [m for m in written if m.get("id") == 0 and "result" in m]
    assert answer["result"]["outcome"]["optionId"] == "once"
    assert runner.outcome(0, "").status == Status.DONE
