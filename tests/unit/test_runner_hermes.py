"""The Hermes runners' parsing, on transcripts the real Hermes 0.19.0 produced against tests/fakes/openai_server.py
(tests/fixtures/hermes: `acp_*.jsonl` are both directions of an ACP session, `oneshot_*.json` are one-shot runs), and
the one-shot argv, the mode and the option limits, all without a database. Hermes tasks run through the supervisor are
in tests/integration/test_hermes_runs.py, the real CLI through the launcher in tests/e2e/test_hermes_launcher.py."""

import json
import sys
from pathlib import Path

import pytest

from jobs.actions.tasks import LIST_OPTIONS, MAX_LIST_CHARS, MAX_LIST_ENTRIES, checked_options
from jobs.agents.hermes_skills import acp_installed
from jobs.agents.registry import BUILT_IN
from jobs.core.errors import InvalidInput
from jobs.core.vocabulary import PermissionMode, PermissionStatus, Status
from jobs.supervision.runners.acp import AcpRunner
from jobs.supervision.runners.base import RunSpec, Step
from jobs.supervision.runners.hermes import (
    LAUNCHER,
    HermesAcpRunner,
    HermesOneShotRunner,
    hermes_mode,
    script_interpreter,
)
from tests.fakes.hermes_env import DEFAULT_HERMES_BIN
from tests.support import python_script
from tests.unit import acp_replay
from tests.unit.acp_replay import events

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "hermes"


def transcript(name: str) -> list[dict]:
    return acp_replay.transcript("hermes", name)


def sent(name: str) -> list[dict]:
    return acp_replay.sent("hermes", name)


def replay(name: str, decision: str = "", **task_fields) -> tuple[HermesAcpRunner, list[Step], list[dict]]:
    """A fresh Hermes runner fed the recording `name` (tests/unit/acp_replay.py)."""
    runner = HermesAcpRunner(RunSpec(agent="hermes", prompt="p", cwd="/tmp/w", **task_fields))
    steps, written = acp_replay.replay(runner, "hermes", name, decision)
    return runner, steps, written


def exit_code(name: str) -> int:
    return next(entry["code"] for entry in transcript(name) if entry["dir"] == "exit")


# --- ACP ------------------------------------------------------------------------------------------------------


def test_acp_plain_answer():
    runner, steps, written = replay("plain")
    assert [m.get("method") for m in written] == ["initialize", "session/new", "session/prompt"]
    assert written[1]["params"] == {"cwd": "/tmp/w", "mcpServers": []}
    assert written[2]["params"]["prompt"] == [{"type": "text", "text": "p"}]
    session_id = sent("plain")[2]["params"]["sessionId"]
    assert [s.session_id for s in steps if s.session_id] == [session_id]
    assert events(steps, "init")[0]["session_id"] == session_id
    deltas = [e["text"] for e in events(steps, "text_delta")]
    assert len(deltas) == 4 and "".join(deltas) == "Hello from the fake model, in several chunks."
    assert steps[-1].finished and not any(s.finished for s in steps[:-1])
    assert events(steps, "result")[0]["stopReason"] == "end_turn"
    assert events(steps, "text") == [{"text": "Hello from the fake model, in several chunks."}]
    outcome = runner.outcome(exit_code("plain"), "")
    assert outcome.status == Status.DONE and outcome.result == "".join(deltas)
    assert outcome.usage["input_tokens"] == 100 and outcome.usage["output_tokens"] == 8


def test_acp_permission_request_with_id_zero_and_its_answers():
    runner, steps, written = replay("perm_allow", decision=PermissionStatus.ALLOWED)
    asks = [ask for step in steps for ask in step.asks]
    assert len(asks) == 1
    ask = asks[0]
    assert ask.request_id == "0" and ask.tool_name == "Approve edit: a.txt" and ask.tool_use_id == "edit-approval-1"
    assert ask.tool_input == {"tool": "write_file", "arguments": {"path": "a.txt", "content": "hello\n"}}
    assert [o["optionId"] for o in ask.suggestions] == ["allow_once", "deny"]
    assert events(steps, "tool_use")[0]["kind"] == "edit"
    assert written[3] == sent("perm_allow")[3]  # what the recording sent: id 0, allow_once
    assert written[3]["result"]["outcome"]["optionId"] == "allow_once"
    assert not any(step.withdrawn for step in steps), "an answered question is not withdrawn"

    runner, steps, written = replay("perm_deny", decision=PermissionStatus.DENIED)
    assert written[3] == {
        "jsonrpc": "2.0",
        "id": 0,
        "result": {"outcome": {"outcome": "selected", "optionId": "deny"}},
    }
    assert runner.outcome(exit_code("perm_deny"), "").status == Status.DONE


def test_acp_stop_denies_pending_permissions_then_cancels():
    runner, steps, _ = replay("perm_allow")
    fresh = HermesAcpRunner(RunSpec(agent="hermes", prompt="p", cwd="/tmp/w"))
    assert fresh.stop_lines() == [], "no session yet: nothing to cancel, the supervisor must signal"
    assert runner.stop_lines() == [], "the turn has ended: nothing to cancel"

    runner = HermesAcpRunner(RunSpec(agent="hermes", prompt="p", cwd="/tmp/w"))
    runner.stdin_lines()
    for entry in transcript("perm_allow"):
        if entry["dir"] == "in":
            runner.on_line(json.dumps(entry["msg"]).encode())
            if entry["msg"].get("method") == "session/request_permission":
                break
    deny, cancel = (json.loads(line) for line in runner.stop_lines())
    assert deny == {"jsonrpc": "2.0", "id": 0, "result": {"outcome": {"outcome": "selected", "optionId": "deny"}}}
    assert cancel == {"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": runner.session_id}}


def test_acp_cancelled_turn():
    runner, steps, _ = replay("cancel")
    assert events(steps, "result")[0]["stopReason"] == "cancelled" and steps[-1].finished
    outcome = runner.outcome(exit_code("cancel"), "")
    assert outcome.status == Status.FAILED and "cancelled" in outcome.error  # the supervisor's stop status wins


def test_acp_cancel_after_deny_ends_the_prompt_with_an_error():
    runner, steps, _ = replay("cancel_perm")
    assert steps[-1].finished
    outcome = runner.outcome(exit_code("cancel_perm"), "")
    assert outcome.status == Status.FAILED and "Internal error" in outcome.error


def test_acp_api_error_is_text_without_usage():
    runner, steps, _ = replay("api_error")
    outcome = runner.outcome(exit_code("api_error"), "")
    assert outcome.status == Status.FAILED
    assert outcome.error == "API call failed after 3 retries: HTTP 500: Boom from fake"


def test_a_turn_without_usage_fails_only_for_hermes_not_for_an_agent_that_follows_the_protocol():
    """That an `end_turn` without usage is a failed model call is Hermes 0.19's quirk, not ACP's."""

    class PlainAgent(AcpRunner):
        def command(self) -> list[str]:
            return ["some-acp-agent"]

    hermes, _, _ = replay("api_error")
    plain = PlainAgent(RunSpec(agent="hermes", prompt="p", cwd="/tmp/w"))
    plain.prompt_result, plain.message_parts = hermes.prompt_result, list(hermes.message_parts)
    assert "usage" not in (plain.prompt_result or {})
    assert (hermes.outcome(0, "").status, plain.outcome(0, "").status) == (Status.FAILED, Status.DONE)


def test_acp_resume_loads_the_session_and_keeps_history_out_of_the_result():
    session_id = sent("resume2")[1]["params"]["sessionId"]
    runner, steps, written = replay("resume2", resume_session_id=session_id)
    assert [m.get("method") for m in written] == ["initialize", "session/load", "session/prompt"]
    assert written[1]["params"] == {"sessionId": session_id, "cwd": "/tmp/w", "mcpServers": []}
    assert [h["text"] for h in events(steps, "history")] == ["Say hello", "First answer."]
    assert events(steps, "init")[0] == {"session_id": session_id, "resumed": True, "mode": "default"}
    outcome = runner.outcome(exit_code("resume2"), "")
    assert outcome.status == Status.DONE and outcome.result == "Second answer."


def test_acp_resume_of_an_unknown_session_fails():
    runner, steps, written = replay("load_unknown", resume_session_id="nope-unknown")
    assert [m.get("method") for m in written] == ["initialize", "session/load"]
    assert steps[-1].finished
    outcome = runner.outcome(exit_code("load_unknown"), "")
    assert outcome.status == Status.FAILED and "no session 'nope-unknown'" in outcome.error


def test_acp_tool_call_and_its_result():
    runner, steps, _ = replay("terminal")
    (use,) = events(steps, "tool_use")
    (result,) = events(steps, "tool_result")
    assert use["kind"] == "execute" and use["name"] == "terminal: echo hi > t.txt"
    assert result["tool_use_id"] == use["id"] and not result["is_error"] and "exit_code" in result["content"]


def test_acp_exit_before_the_end_of_the_turn():
    runner = HermesAcpRunner(RunSpec(agent="hermes", prompt="p", cwd="/tmp/w"))
    outcome = runner.outcome(1, "Traceback ...\nImportError: no acp\n")
    assert outcome.status == Status.FAILED and "code 1" in outcome.error and "no acp" in outcome.error


def test_acp_agent_requests_bridge_does_not_offer_get_an_error():
    runner = AcpRunner(RunSpec(agent="hermes", prompt="p", cwd="/tmp/w"))
    step = runner.on_line(b'{"jsonrpc":"2.0","id":7,"method":"fs/read_text_file","params":{"path":"/etc/x"}}\n')
    reply = json.loads(step.replies[0])
    assert reply["id"] == 7 and reply["error"]["code"] == -32601


def test_acp_model_option_sets_the_session_model():
    runner, _, written = replay("plain", options={"model": "other-model"})
    methods = [m.get("method") for m in written]
    assert methods == ["initialize", "session/new", "session/set_model", "session/prompt"]
    assert written[2]["params"]["modelId"] == "other-model"

    _, _, written = replay("plain", permission_mode=PermissionMode.SKIP)
    assert written[2]["method"] == "session/set_mode" and written[2]["params"]["modeId"] == "dont_ask"


# --- one-shot -------------------------------------------------------------------------------------------------


def oneshot(name: str) -> dict:
    return json.loads((FIXTURES / f"oneshot_{name}.json").read_text())


def run_oneshot(name: str, **task_fields) -> tuple[HermesOneShotRunner, list[Step], Step]:
    runner = HermesOneShotRunner(RunSpec(agent="hermes", prompt="p", cwd="/tmp/w", **task_fields))
    record = oneshot(name)
    steps = [runner.on_line(line) for line in record["stdout"].encode().splitlines(keepends=True)]
    return runner, steps, runner.on_exit(record["stderr"])


def test_oneshot_argv_has_everything_but_the_task(settings, tmp_path):
    script = python_script(tmp_path / "venv" / "bin" / "hermes")
    settings.BRIDGE_HERMES_BIN = str(script)
    task = RunSpec(
        agent="hermes",
        prompt="-do it",
        cwd="/tmp/w",
        permission_mode=PermissionMode.BYPASS,
        resume_session_id="20261130_051707_5fa257",
        options={"max_turns": 5, "model": "m", "skills": ["a", "b"], "toolsets": ["file", "terminal"]},
    )
    runner = HermesOneShotRunner(task)
    assert runner.argv() == [
        sys.executable,
        str(LAUNCHER),
        str(script),
        "chat",
        "-Q",
        "--max-turns",
        "5",
        "--resume",
        "20261130_051707_5fa257",
        "--model",
        "m",
        "-s",
        "a",
        "-s",
        "b",
        "-t",
        "file,terminal",
        "--yolo",
        "--source",
        "tool",
    ]
    assert runner.uses_stdin and runner.stdin_lines() == [b'{"query": "-do it"}\n']
    plain = HermesOneShotRunner(RunSpec(agent="hermes", prompt="x", cwd="/tmp/w")).argv()
    assert "--yolo" not in plain and "--resume" not in plain and "90" in plain and "x" not in plain
    settings.BRIDGE_HERMES_BIN = "/opt/no-such-hermes"
    missing = HermesOneShotRunner(task).argv()
    assert missing[:3] == ["/opt/no-such-hermes", "chat", "-Q"], "so the spawn fails naming BRIDGE_HERMES_BIN"
    assert not any("do it" in arg for arg in missing)


PIP_TRAMPOLINE = "#!/bin/sh\n'''exec' \"/a long/venv/bin/python\" \"$0\" \"$@\"\n' '''\nimport sys\n"


@pytest.mark.parametrize(
    ("head", "interpreter"),
    [
        ("#!/venv/bin/python3\nimport sys", ["/venv/bin/python3"]),
        ("#!/usr/bin/env python3\n", ["/usr/bin/env", "python3"]),
        ("#!/usr/bin/env -S python3.11 -X utf8\n", ["/usr/bin/env", "-S", "python3.11", "-X", "utf8"]),
        (PIP_TRAMPOLINE, ["/a long/venv/bin/python"]),
        ('#!/bin/sh\nexec /venv/bin/python /x/hermes "$@"\n', None),
        ("#!/usr/bin/env bash\n", None),
        ("import sys\n", None),
        ("\x7fELF\x00\xff", None),
    ],
)
def test_the_interpreter_of_the_hermes_script(tmp_path, head, interpreter):
    script = tmp_path / "hermes"
    script.write_bytes(head.encode("latin-1"))
    assert script_interpreter(script) == interpreter
    assert script_interpreter(tmp_path / "missing") is None


def test_oneshot_answer_and_session_id():
    runner, steps, end = run_oneshot("first")
    assert [e for s in steps for e in s.events] == [
        ("output", {"text": "One-shot answer, line one."}),
        ("output", {"text": "Line two."}),
    ]
    assert end.session_id == oneshot("first")["stderr"].split()[-1]
    outcome = runner.outcome(0, oneshot("first")["stderr"])
    assert outcome.status == Status.DONE and outcome.result == "One-shot answer, line one.\nLine two."


def test_oneshot_resumed_run_keeps_its_id():
    runner, _, end = run_oneshot("second")
    assert end.session_id == oneshot("first")["stderr"].split()[-1]
    assert runner.outcome(0, oneshot("second")["stderr"]).result == "Resumed answer."


@pytest.mark.parametrize(
    ("name", "words"),
    [
        ("bad", "API call failed after 3 retries: HTTP 500: Boom oneshot"),
        ("unknown", "Session not found: nope_123"),
        ("skill", "Unknown skill(s): nonexistent-skill"),
    ],
)
def test_oneshot_failures_carry_their_words(name, words):
    record = oneshot(name)
    runner, _, _ = run_oneshot(name)
    outcome = runner.outcome(record["exit_code"], record["stderr"])
    assert outcome.status == Status.FAILED and outcome.exit_code == 1
    assert words in outcome.error and "session_id:" not in outcome.error


# --- choosing the mode ----------------------------------------------------------------------------------------


def test_mode_setting_and_auto(settings, tmp_path):
    task = RunSpec(agent="hermes", prompt="p", cwd="/tmp/w")
    settings.BRIDGE_HERMES_MODE = "oneshot"
    assert hermes_mode(task) == "oneshot"
    settings.BRIDGE_HERMES_MODE = "acp"
    assert hermes_mode(task) == "acp"

    settings.BRIDGE_HERMES_MODE = "auto"
    bare = tmp_path / "bin" / "hermes"
    bare.parent.mkdir()
    bare.write_text(f"#!{sys.executable}\n")
    bare.chmod(0o755)
    settings.BRIDGE_HERMES_BIN = str(bare)
    assert hermes_mode(task) == "oneshot", "no acp package next to this executable"
    settings.BRIDGE_HERMES_BIN = "/nonexistent/hermes"
    assert hermes_mode(task) == "oneshot"


def test_auto_picks_acp_when_the_extra_is_installed(settings):
    if not DEFAULT_HERMES_BIN.is_file():
        pytest.skip(f"the Hermes CLI is not installed at {DEFAULT_HERMES_BIN}")
    assert acp_installed(str(DEFAULT_HERMES_BIN))
    settings.BRIDGE_HERMES_MODE = "auto"
    settings.BRIDGE_HERMES_BIN = str(DEFAULT_HERMES_BIN)
    assert hermes_mode(RunSpec(agent="hermes", prompt="p", cwd="/tmp/w")) == "acp"
    with_skills = RunSpec(agent="hermes", prompt="p", cwd="/tmp/w", options={"skills": ["x"]})
    assert hermes_mode(with_skills) == "oneshot", "ACP cannot pass skills"


def test_acp_result_is_the_final_message_and_each_message_is_one_text_event():
    runner = HermesAcpRunner(RunSpec(agent="hermes", prompt="p", cwd="/tmp/w"))
    runner.session_id = "s"

    def update(update: dict) -> Step:
        message = {"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": "s", "update": update}}
        return runner.on_line(json.dumps(message).encode())

    def chunk(text: str) -> Step:
        return update({"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}})

    tool = {"sessionUpdate": "tool_call", "toolCallId": "t1"}
    steps = [chunk("Let me "), chunk("look."), update(tool), chunk("Done.")]
    runner.calls[3] = "session/prompt"
    steps.append(runner.on_line(b'{"jsonrpc":"2.0","id":3,"result":{"stopReason":"end_turn","usage":{}}}'))
    assert events(steps, "text") == [{"text": "Let me look."}, {"text": "Done."}]
    assert runner.outcome(0, "").result == "Done."


def test_acp_questions_the_agent_stopped_waiting_for_are_withdrawn():
    runner = HermesAcpRunner(RunSpec(agent="hermes", prompt="p", cwd="/tmp/w"))
    runner.stdin_lines()
    withdrawn = []
    for entry in transcript("perm_deny"):
        if entry["dir"] == "in":
            withdrawn += runner.on_line(json.dumps(entry["msg"]).encode()).withdrawn
    assert withdrawn == ["0"], "unanswered, then the model spoke again: the question is dead"
    assert runner.pending_asks == {}


def test_acp_says_which_options_it_could_not_pass():
    _, steps, _ = replay("plain", options={"max_turns": 3, "skills": ["x"]})
    (ignored,) = events(steps, "ignored_options")
    assert ignored["options"] == {"max_turns": 3, "skills": ["x"]}
    assert events(replay("plain")[1], "ignored_options") == []


# --- limits ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("agent", "option"), [(a, o) for a, agent in BUILT_IN.items() for o in sorted(agent.options & LIST_OPTIONS)]
)
def test_list_options_are_bounded(agent, option):
    most = [f"name{i}" for i in range(MAX_LIST_ENTRIES)]
    assert checked_options(agent, {option: most})[option] == most
    long = ["n" * 199] * (MAX_LIST_CHARS // 200 + 1)
    for value, words in (([*most, "one-more"], f"{MAX_LIST_ENTRIES + 1} entries"), (long, "characters")):
        with pytest.raises(InvalidInput) as refused:
            checked_options(agent, {option: value})
        error = refused.value
        assert error.http_status == 400 and error.code == "invalid_input" and words in error.message
        assert f"{MAX_LIST_ENTRIES} entries and {MAX_LIST_CHARS} characters" in error.message
        assert error.detail == {"option": option, "max_entries": MAX_LIST_ENTRIES, "max_chars": MAX_LIST_CHARS}
