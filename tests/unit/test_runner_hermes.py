"""The Hermes runners' parsing, on transcripts the real Hermes 0.19.0 produced against tests/fakes/openai_server.py
(tests/fixtures/hermes: `acp_*.jsonl` are both directions of an ACP session, `oneshot_*.json` are one-shot runs)."""

import hashlib
import json
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from django.conf import settings

from jobs import actions
from jobs.actions.tasks import AGENT_OPTIONS, LIST_OPTIONS, MAX_LIST_CHARS, MAX_LIST_ENTRIES, checked_options
from jobs.agents.executors import BRIDGE_ENV_NAMES, BRIDGE_ENV_PREFIXES
from jobs.agents.hermes_skills import acp_installed
from jobs.core.errors import InvalidInput
from jobs.core.vocabulary import PermissionMode, PermissionStatus, Status
from jobs.supervision.runners.acp import AcpRunner
from jobs.supervision.runners.base import Decision, RunSpec, Step
from jobs.supervision.runners.hermes import (
    HERMES_PROVIDER_ENV,
    LAUNCHER,
    HermesAcpRunner,
    HermesOneShotRunner,
    hermes_mode,
    script_interpreter,
)
from jobs.supervision.supervisor import run_spec
from tests.fakes.hermes_env import DEFAULT_HERMES_BIN, RecordingProxy, offline_env, write_hermes_home
from tests.fakes.openai_server import FakeOpenAI, text
from tests.support import FAKES, make_task, skip_or_fail, wait_for

FIXTURES = Path(__file__).parent / "fixtures" / "hermes"


def transcript(name: str) -> list[dict]:
    return [json.loads(line) for line in (FIXTURES / f"acp_{name}.jsonl").read_text().splitlines()]


def sent(name: str) -> list[dict]:
    return [entry["msg"] for entry in transcript(name) if entry["dir"] == "out"]


def replay(name: str, decision: str = "", **task_fields) -> tuple[HermesAcpRunner, list[Step], list[dict]]:
    """Feed what Hermes printed to a fresh runner; also return what the runner wrote (start lines, replies, and the
    answer to each permission question when a `decision` status is given)."""
    task = RunSpec(agent="hermes", prompt="p", cwd="/tmp/w", **task_fields)
    runner = HermesAcpRunner(task)
    written = [json.loads(line) for line in runner.stdin_lines()]
    steps = []
    for entry in transcript(name):
        if entry["dir"] == "in":
            step = runner.on_line(json.dumps(entry["msg"]).encode() + b"\n")
            steps.append(step)
            written += [json.loads(line) for line in step.replies]
            for ask in step.asks if decision else []:
                written.append(json.loads(runner.answer(Decision(request_id=ask.request_id, status=decision))))
    return runner, steps, written


def events(steps: list[Step], kind: str) -> list[dict]:
    return [data for step in steps for k, data in step.events if k == kind]


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


def python_script(path: Path, body: str = "", first_line: str = f"#!{sys.executable}") -> Path:
    """An executable console-script-like file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"{first_line}\n{body}")
    path.chmod(0o755)
    return path


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


def test_spawn_error_names_the_hermes_setting(supervisor, settings):
    settings.BRIDGE_HERMES_BIN = "/nonexistent/hermes"
    task = wait_for(make_task("hi", agent="hermes"))
    assert task.status == Status.FAILED
    assert "/nonexistent/hermes" in task.error and "BRIDGE_HERMES_BIN" in task.error


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


# --- the task never travels in argv; limits; the environment (through the supervisor, with the fake) ------------


@pytest.fixture
def fake_oneshot(supervisor, settings, tmp_path) -> Path:
    """BRIDGE_HERMES_BIN as a Python console script running tests/fakes/fake_hermes.py, in one-shot mode."""
    script = python_script(
        tmp_path / "hermes-venv" / "bin" / "hermes",
        f"import runpy\nrunpy.run_path({str(FAKES / 'fake_hermes.py')!r}, run_name='__main__')\n",
    )
    settings.BRIDGE_HERMES_BIN = str(script)
    settings.BRIDGE_HERMES_MODE = "oneshot"
    return script


def sized_prompt(size: int, marker: str) -> str:
    """A task of exactly `size` bytes (UTF-8, with 2- and 3-byte characters) asking the fake what it received."""
    head = f"digest\ncmdline\nstdin\n# {marker} "
    filler = ("é✓x" * (size // 6 + 1)).encode()[: max(0, size - len(head.encode()))].decode(errors="ignore")
    prompt = head + filler
    return prompt + "x" * (size - len(prompt.encode()))


def prompt_sizes() -> list[int]:
    """From 1 byte to BRIDGE_MAX_PROMPT_BYTES, through the sizes that matter: a pipe's buffer (64 KiB), the largest
    argv string Linux takes (MAX_ARG_STRLEN, 128 KiB) and the 140,000-byte task that once failed."""
    limit = settings.BRIDGE_MAX_PROMPT_BYTES
    sizes = {100, 64 * 1024 + 1, 128 * 1024, 140_000, limit, *(limit * k // 5 for k in range(1, 5))}
    return sorted(size for size in sizes if 100 <= size <= limit)


@pytest.mark.parametrize("size", prompt_sizes())
def test_a_task_of_any_accepted_size_reaches_oneshot_hermes_on_stdin_not_in_argv(fake_oneshot, size):
    marker = f"MARK-{uuid.uuid4().hex}"
    prompt = sized_prompt(size, marker)
    assert len(prompt.encode()) == size
    task = wait_for(make_task(prompt, agent="hermes"))
    assert task.status == Status.DONE, task.error
    digest = hashlib.sha256(prompt.encode()).hexdigest()
    assert f"query: {size} bytes, sha256 {digest}" in task.result, "the whole task, byte for byte"
    assert "stdin: devnull" in task.result, "Hermes itself still gets /dev/null as stdin"
    spawned = next(e.data for e in actions.events_since(task) if e.kind == "spawned")
    cmdline = json.loads(next(ln for ln in task.result.splitlines() if ln.startswith("cmdline: "))[9:])
    assert cmdline == spawned["argv"] == HermesOneShotRunner(run_spec(task)).argv()
    assert marker not in json.dumps(cmdline) and len(json.dumps(cmdline)) < 1000


def test_a_task_starting_with_a_dash_is_the_task_not_a_flag(fake_oneshot):
    task = wait_for(make_task("--version\nsay still the task", agent="hermes"))
    assert task.status == Status.DONE and task.result == "--version\nstill the task"


def test_a_shell_wrapper_fails_clearly_in_oneshot_mode(supervisor, settings, tmp_path):
    wrapper = tmp_path / "hermes"
    wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{FAKES / "fake_hermes.py"}" "$@"\n')
    wrapper.chmod(0o755)
    settings.BRIDGE_HERMES_BIN, settings.BRIDGE_HERMES_MODE = str(wrapper), "oneshot"
    task = wait_for(make_task("say hi", agent="hermes"))
    assert task.status == Status.FAILED
    assert "not a Python script" in task.error and "BRIDGE_HERMES_BIN" in task.error


def bridge_own_names() -> list[str]:
    """Bridge's own secrets and settings: the names it reads from its environment."""
    return [*BRIDGE_ENV_NAMES, *(name for name in dir(settings) if name.startswith(BRIDGE_ENV_PREFIXES))]


def test_provider_variables_reach_hermes_and_bridge_secrets_never_do(fake_oneshot, settings, monkeypatch):
    for name in HERMES_PROVIDER_ENV:
        monkeypatch.setenv(name, f"value-of-{name}")
    own = bridge_own_names()
    for name in own:
        monkeypatch.setenv(name, f"secret-{name}")
    settings.BRIDGE_PASS_ENV = list(own)  # even named there, they stay home
    task = wait_for(make_task("\n".join(f"env {name}" for name in (*HERMES_PROVIDER_ENV, *own)), agent="hermes"))
    assert task.status == Status.DONE, task.error
    seen = dict(line.removeprefix("env ").split("=", 1) for line in task.result.splitlines())
    assert {name: seen[name] for name in HERMES_PROVIDER_ENV} == {n: f"value-of-{n}" for n in HERMES_PROVIDER_ENV}
    assert {name: seen[name] for name in own} == dict.fromkeys(own, "<unset>")
    spec = RunSpec(agent="hermes", prompt="p", cwd="/tmp/w")
    for env in (HermesAcpRunner(spec).env(), HermesOneShotRunner(spec).env()):
        assert set(HERMES_PROVIDER_ENV) <= set(env) and not set(own) & set(env)


@pytest.mark.parametrize(
    ("agent", "option"), [(a, o) for a, opts in AGENT_OPTIONS.items() for o in sorted(opts & LIST_OPTIONS)]
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


@pytest.mark.e2e
def test_real_hermes_takes_a_140000_byte_task_through_the_launcher(settings, tmp_path):
    """The real CLI, offline against the fake OpenAI server: the whole task is the user message; argv lacks it."""
    if not DEFAULT_HERMES_BIN.is_file():
        skip_or_fail(f"the Hermes CLI is not installed at {DEFAULT_HERMES_BIN}")
    settings.BRIDGE_HERMES_BIN = str(DEFAULT_HERMES_BIN)
    prompt = "-" + sized_prompt(140_000 - 1, marker := f"MARK-{uuid.uuid4().hex}")  # a leading "-" too
    runner = HermesOneShotRunner(RunSpec(agent="hermes", prompt=prompt, cwd=str(tmp_path)))
    with FakeOpenAI([text("Big task read.")]) as fake, RecordingProxy() as proxy:
        home = write_hermes_home(tmp_path / "hermes-home", fake.url)
        env = offline_env(home, tmp_path, proxy.url)
        child = subprocess.Popen(
            runner.argv(), cwd=tmp_path, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        cmdline = Path(f"/proc/{child.pid}/cmdline").read_bytes()
        for line in runner.stdin_lines():
            child.stdin.write(line)
        child.stdin.flush()
        out, err = child.communicate(timeout=120)
    assert child.returncode == 0, err.decode()[-2000:]
    assert out.decode().strip() == "Big task read." and "session_id:" in err.decode()
    (request,) = fake.main_requests
    content = [m["content"] for m in request["messages"] if m["role"] == "user"][-1]
    if isinstance(content, list):
        content = "".join(part.get("text", "") for part in content)
    assert content == prompt, "the whole task, as the user message"
    assert marker.encode() not in cmdline and len(cmdline) < 1000
    assert proxy.requests == [], f"Hermes tried to leave loopback: {proxy.requests}"
