"""jobs/agents/registry.py: the executors by name, and BRIDGE_AGENTS_FILE, where a user declares ACP agents: a valid
file adds them, a wrong one is refused with where and why, and nothing in it can replace a built-in executor.
How the declared agents run: jobs/supervision/runners/declared.py, end to end in tests/e2e/test_gemini.py."""

import json
import string

import pytest
from django.core.management.base import CommandError
from hypothesis import given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from jobs.agents import executors, registry
from jobs.agents.registry import AgentsFileError, load_agents_file
from jobs.core.vocabulary import PermissionMode
from jobs.management.startup import check_agents
from jobs.supervision.runners import runner_for
from jobs.supervision.runners.base import RunSpec
from jobs.supervision.runners.declared import DeclaredAcpRunner
from jobs.supervision.runners.gemini import GeminiRunner

NAMES = st.from_regex(registry.NAME_RE, fullmatch=True).filter(lambda name: name not in registry.BUILT_IN)


def toml_string(value: str) -> str:
    return json.dumps(value)  # a JSON string of printable text is a TOML basic string


def declare(name: str, **fields: object) -> str:
    lines = [f"[agents.{name}]"]
    for key, value in fields.items():
        rendered = "[" + ", ".join(map(toml_string, value)) + "]" if isinstance(value, list) else toml_string(value)
        lines.append(f"{key} = {rendered}")
    return "\n".join(lines) + "\n"


@pytest.fixture
def agents_file(tmp_path, settings):
    path = tmp_path / "agents.toml"
    settings.BRIDGE_AGENTS_FILE = path
    yield path
    registry._loaded.clear()


@hypothesis_settings(max_examples=60, deadline=None)
@given(
    name=NAMES,
    command=st.lists(st.text(string.ascii_letters + string.digits + "/-_. ", min_size=1, max_size=30), min_size=1),
    pass_env=st.lists(st.from_regex(registry.ENV_NAME_RE, fullmatch=True), max_size=5),
)
def test_a_declared_acp_agent_is_added_as_written(tmp_path_factory, name, command, pass_env):
    path = tmp_path_factory.mktemp("agents") / "agents.toml"
    path.write_text(declare(name, protocol="acp", command=command, pass_env=pass_env))

    [(declared_name, agent)] = load_agents_file(path).items()

    preset = registry.PRESETS.get(name)
    assert (declared_name, agent.name, agent.protocol, agent.command) == (name, name, "acp", tuple(command))
    assert agent.pass_env == (preset.pass_env if preset else ()) + tuple(pass_env)
    assert agent.source == str(path) and agent.is_acp


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("[agents.x]\nprotocol = 'acp'\ncommand = ['a'", "is not valid TOML"),
        ("[agent.x]\nprotocol = 'acp'", "unknown tables agent"),
        ("agents = 3", "agents must be tables"),
        ("[agents.x]\ncommand = ['a']", 'protocol = "acp" is required'),
        ("[agents.x]\nprotocol = 'stream-json'\ncommand = ['a']", 'protocol = "acp" is required'),
        ("[agents.x]\nprotocol = 'acp'", "command is required"),
        ("[agents.x]\nprotocol = 'acp'\ncommand = []", "command must be a list of 1 to 50 non-empty strings"),
        ("[agents.x]\nprotocol = 'acp'\ncommand = 'agent --acp'", "command must be a list"),
        ("[agents.x]\nprotocol = 'acp'\ncommand = ['a', '']", "command must be a list"),
        ("[agents.x]\nprotocol = 'acp'\ncommand = ['a']\nversion = [1]", "version must be a list"),
        ("[agents.x]\nprotocol = 'acp'\ncommand = ['a']\npass_env = ['NOT A NAME']", "pass_env must be a list"),
        ("[agents.x]\nprotocol = 'acp'\ncommand = ['a']\nsurprise = 1", "unknown keys surprise"),
        ("[agents.x]\nprotocol = 'acp'\ncommand = ['a']\nskip_mode = 3", "skip_mode must be a string"),
        ("[agents.Bad_Name]\nprotocol = 'acp'\ncommand = ['a']", "a name is 1-20 lower-case letters"),
        ("[agents.claude]\nprotocol = 'acp'\ncommand = ['a']", "'claude' is built in (its executable is set with"),
        ("[agents.hermes]\nprotocol = 'acp'\ncommand = ['a']", "BRIDGE_HERMES_BIN"),
        ("[agents.x]\nprotocol = 'acp'\ncommand = ['a']\nlabel = '" + "l" * 61 + "'", "at most 60 characters"),
    ],
)
def test_a_wrong_file_is_refused_saying_where_and_why(tmp_path, text, words):
    path = tmp_path / "agents.toml"
    path.write_text(text)
    with pytest.raises(AgentsFileError) as refused:
        load_agents_file(path)
    assert words in str(refused.value) and str(path) in str(refused.value)


def test_no_file_declares_nothing_and_a_preset_named_in_it_keeps_what_bridge_knows(tmp_path, agents_file):
    assert load_agents_file(tmp_path / "missing.toml") == {}
    agents_file.write_text(
        declare("gemini", protocol="acp", command=["/opt/gemini/bin/gemini", "--acp"], pass_env=["EXTRA"])
    )
    registry.check_agents_file()

    gemini = registry.get_agent("gemini")
    assert gemini.command == ("/opt/gemini/bin/gemini", "--acp") and gemini.source == str(agents_file)
    preset = registry.PRESETS["gemini"]
    assert (gemini.env, gemini.skip_mode, gemini.login_env) == (preset.env, preset.skip_mode, preset.login_env)
    assert gemini.pass_env == (*preset.pass_env, "EXTRA")
    assert list(registry.all_agents())[:2] == ["claude", "hermes"]


def test_each_agent_gets_its_runner_and_a_declared_one_runs_its_command_with_only_its_variables(
    agents_file, monkeypatch
):
    secrets = ["DJANGO_SECRET_KEY", "DATABASE_URL", "BRIDGE_WEBHOOK_SECRET"]
    agents_file.write_text(
        declare("mine", protocol="acp", command=["/opt/mine", "--acp"], pass_env=["MINE_KEY", *secrets])
    )
    monkeypatch.setenv("MINE_KEY", "k")
    monkeypatch.setenv("OTHER_KEY", "not passed")
    for name in secrets:
        monkeypatch.setenv(name, "Bridge's own")

    mine = runner_for(RunSpec(prompt="p", cwd="/tmp", agent="mine"))
    gemini = runner_for(RunSpec(prompt="p", cwd="/tmp", agent="gemini", permission_mode=PermissionMode.SKIP))

    assert type(mine) is DeclaredAcpRunner and type(gemini) is GeminiRunner
    assert mine.argv() == ["/opt/mine", "--acp"]
    assert mine.env()["MINE_KEY"] == "k" and "OTHER_KEY" not in mine.env()
    assert not set(secrets) & set(mine.env()), "an agents file cannot hand an agent Bridge's secrets"
    assert gemini.env()["GEMINI_CLI_NO_RELAUNCH"] == "true" and gemini.env()["GEMINI_CLI_TRUST_WORKSPACE"] == "true"
    with pytest.raises(ValueError, match="no runner for agent 'nobody'"):
        runner_for(RunSpec(prompt="p", cwd="/tmp", agent="nobody"))


def test_skip_sets_the_agents_own_mode_after_the_session_starts(agents_file):
    agents_file.write_text(declare("mine", protocol="acp", command=["/opt/mine"], skip_mode="full-auto"))
    runner = runner_for(RunSpec(prompt="p", cwd="/tmp", agent="mine", permission_mode=PermissionMode.SKIP))
    runner.stdin_lines()
    step = runner.on_line(b'{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":1}}')
    step = runner.on_line(b'{"jsonrpc":"2.0","id":2,"result":{"sessionId":"s1"}}')

    methods = [json.loads(line)["method"] for line in step.replies]
    assert methods == ["session/set_mode", "session/prompt"]
    assert json.loads(step.replies[0])["params"] == {"sessionId": "s1", "modeId": "full-auto"}


def test_readiness_says_what_is_missing_and_how_to_fix_it(tmp_path, agents_file):
    agent = tmp_path / "agent"
    agent.write_text("#!/bin/sh\necho 'mine 1.2.3'\n")
    agent.chmod(0o755)
    agents_file.write_text(
        declare("mine", protocol="acp", command=[str(agent)], version=[str(agent), "--version"])
        + declare("gone", protocol="acp", command=[str(tmp_path / "nowhere")])
    )
    registry.check_agents_file()

    mine = executors.executor_status("mine", {"PATH": ""})
    gone = executors.executor_status("gone", {"PATH": ""})

    assert (mine.found, mine.version, mine.ready) == (True, "mine 1.2.3", executors.UNKNOWN)
    assert (gone.found, gone.ready) == (False, executors.NO)
    assert str(agents_file) in gone.problems[0].fix and "[agents.gone]" in gone.problems[0].fix


def test_a_preset_is_ready_with_a_key_or_its_own_login_and_not_without(tmp_path):
    gemini = tmp_path / "bin" / "gemini"
    gemini.parent.mkdir()
    gemini.write_text("#!/bin/sh\necho 0.61.0\n")
    gemini.chmod(0o755)
    home = tmp_path / "home"
    environ = {"PATH": str(gemini.parent), "HOME": str(home)}
    preset = registry.PRESETS["gemini"]

    without = executors.acp_status(preset, environ)
    with_key = executors.acp_status(preset, environ | {"GEMINI_API_KEY": "k"})
    (home / ".gemini").mkdir(parents=True)
    (home / ".gemini" / "settings.json").write_text('{"security": {"auth": {"selectedType": "oauth-personal"}}}')
    logged_in = executors.acp_status(preset, environ)

    assert (without.ready, without.version) == (executors.NO, "0.61.0")
    assert "GEMINI_API_KEY" in without.problems[0].fix
    assert (with_key.ready, with_key.detail) == (executors.YES, "uses GEMINI_API_KEY from the environment")
    assert logged_in.ready == executors.YES and "oauth-personal" in logged_in.detail


def test_a_wrong_file_stops_start_up_with_its_reason_and_a_fixed_one_is_read_again(agents_file):
    agents_file.write_text(declare("mine", protocol="acp"))
    with pytest.raises(CommandError) as refused:
        check_agents()
    assert "Bridge cannot use its agents file" in str(refused.value) and "command is required" in str(refused.value)

    agents_file.write_text(declare("mine", protocol="acp", command=["/opt/mine"]))
    check_agents()
    assert registry.get_agent("mine").command == ("/opt/mine",)


def test_a_resume_of_an_agent_that_cannot_load_sessions_ends_saying_so(agents_file):
    agents_file.write_text(declare("mine", protocol="acp", command=["/opt/mine"]))
    runner = runner_for(RunSpec(prompt="p", cwd="/tmp", agent="mine", resume_session_id="s-1"))
    runner.stdin_lines()
    step = runner.on_line(b'{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":1,"agentCapabilities":{}}}')

    assert step.finished and not step.replies
    outcome = runner.outcome(0, "")
    assert outcome.status == "failed" and outcome.error.startswith("mine cannot resume sessions")
    assert "start a new task instead" in outcome.error
