"""jobs/agents/executors.py: whether each executor can run, told before a task fails, without starting an agent.
Its verdicts checked against the real Claude Code CLI are in tests/e2e/test_executors_real.py."""

import json
import os
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from jobs.agents import executors
from tests.fakes.hermes_env import DEFAULT_HERMES_BIN, installed_version, write_hermes_home
from tests.support import CREDENTIALS

LOGIN_VARS = [name for name, _ in executors.CLAUDE_ENV_LOGINS]
# ANTHROPIC_BASE_URL is no account of its own: the real CLI says "Not logged in" with only that set.
OTHER_VARS = ["LANG", "ANTHROPIC_BASE_URL", "ANTHROPIC_MODEL", "CLAUDE_CODE_ENTRYPOINT", "DISABLE_TELEMETRY"]


def executable(directory: Path, name: str, body: str) -> Path:
    path = directory / name
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)
    return path


@pytest.fixture
def counted_claude(tmp_path, settings) -> Path:
    """A `claude` that says its version and counts how often it was asked."""
    script = executable(tmp_path, "claude", f'echo run >> "{tmp_path / "runs"}"\necho "9.9.9 (Claude Code)"')
    settings.BRIDGE_CLAUDE_BIN = str(script)
    return script


def runs(tmp_path: Path) -> int:
    runs_file = tmp_path / "runs"
    return len(runs_file.read_text().splitlines()) if runs_file.exists() else 0


# --- Claude Code: is it logged in? ------------------------------------------------------------------------------

login_env = st.dictionaries(
    st.sampled_from(LOGIN_VARS + OTHER_VARS), st.sampled_from(["", "  ", "x", "https://gateway.example"]), max_size=5
)


@hypothesis_settings(max_examples=150, deadline=None)
@given(
    environ=login_env,
    credentials=st.sampled_from(["none", "empty", *CREDENTIALS]),
    saved_key=st.booleans(),
    config_dir=st.booleans(),
    platform=st.sampled_from(["linux", "darwin", "win32"]),
)
def test_claude_login_is_told_from_the_environment_and_files(environ, credentials, saved_key, config_dir, platform):
    with tempfile.TemporaryDirectory() as root:
        home = Path(root) / "home"
        claude_dir = Path(root) / "claude-config" if config_dir else home / ".claude"
        claude_dir.mkdir(parents=True)
        environ = {**environ, "HOME": str(home)} | ({"CLAUDE_CONFIG_DIR": str(claude_dir)} if config_dir else {})
        if credentials != "none":
            text = json.dumps(CREDENTIALS[credentials]) if credentials in CREDENTIALS else ""
            (claude_dir / ".credentials.json").write_text(text)
        state = claude_dir / ".claude.json" if config_dir else home / ".claude.json"
        state.write_text('{"primaryApiKey": "sk-ant-saved"}' if saved_key else '{"numStartups": 3}')

        ready, words = executors.claude_login(environ, platform)

    has_login = any(environ.get(name, "").strip() for name in LOGIN_VARS) or credentials == "a login" or saved_key
    expected = executors.YES if has_login else executors.UNKNOWN if platform == "darwin" else executors.NO
    assert ready == expected, words
    assert "sk-ant-saved" not in words and "gateway.example" not in words, "a verdict never shows a secret or a URL"
    if expected == executors.UNKNOWN:
        assert "keychain" in words


def test_a_missing_claude_says_which_setting_to_fix(settings):
    settings.BRIDGE_CLAUDE_BIN = "no-such-claude-cli"

    status = executors.claude_status({"PATH": "/nonexistent"})

    assert (status.found, status.version, status.ready) == (False, None, executors.NO)
    [problem] = status.problems
    assert "BRIDGE_CLAUDE_BIN='no-such-claude-cli'" in problem.what
    assert "BRIDGE_CLAUDE_BIN" in problem.fix and "install" in problem.fix


def test_a_name_on_path_is_found_there(tmp_path, counted_claude, settings):
    settings.BRIDGE_CLAUDE_BIN = "claude"

    status = executors.claude_status({"PATH": str(tmp_path), "ANTHROPIC_API_KEY": "sk-test"})

    assert status.path == str(counted_claude)
    assert (status.version, status.ready, status.problems) == ("9.9.9 (Claude Code)", executors.YES, ())


def test_version_is_asked_once_per_executable_until_it_changes(tmp_path, counted_claude):
    environ = {"ANTHROPIC_API_KEY": "sk-test", "PATH": ""}

    for _ in range(5):
        assert executors.claude_status(environ).version == "9.9.9 (Claude Code)"
    assert runs(tmp_path) == 1, "health calls reuse the answer"

    mtime = counted_claude.stat().st_mtime_ns
    os.utime(counted_claude, ns=(mtime + 10**9, mtime + 10**9))  # an upgrade replaces the file
    executors.executor_report(environ)
    assert runs(tmp_path) == 2


def test_the_version_probe_gets_the_allow_listed_environment(tmp_path, settings, monkeypatch):
    """`claude --version` runs with what an agent gets (principle 6), not Bridge's own settings and secrets."""
    for name, value in {
        "DATABASE_URL": "postgres://u:pw@db/bridge",
        "BRIDGE_TOKEN": "brg_x",
        "LANG": "C.UTF-8",
    }.items():
        monkeypatch.setenv(name, value)
    script = executable(tmp_path, "claude", 'echo "1.0 db=${DATABASE_URL:-unset} token=${BRIDGE_TOKEN:-unset} $LANG"')
    settings.BRIDGE_CLAUDE_BIN = str(script)

    assert executors.claude_status({"PATH": ""}).version == "1.0 db=unset token=unset C.UTF-8"


def test_the_cache_keeps_one_answer_per_file_and_never_its_contents(tmp_path):
    """A credentials file is read for its verdict only; rewriting it replaces the one entry for its path."""
    credentials = tmp_path / ".claude" / ".credentials.json"
    credentials.parent.mkdir()
    environ = {"HOME": str(tmp_path), "PATH": ""}
    for round_ in range(3):
        token = f"sk-ant-oat01-secret-{round_}"
        oauth = {"accessToken": token, "scopes": ["user:inference"] if round_ != 1 else []}
        credentials.write_text(json.dumps({"claudeAiOauth": oauth}) + " " * round_)
        verdict, _ = executors.claude_login(environ, "linux")
        assert verdict == (executors.NO if round_ == 1 else executors.YES)
        kept = [answer for key, answer in executors._files.answers.items() if key == str(credentials)]
        assert len(kept) == 1 and token not in repr(executors._files.answers)


def test_a_cli_that_cannot_start_is_not_ready_and_says_why(tmp_path, settings):
    broken = executable(tmp_path, "claude", 'echo "env: node: No such file or directory" >&2\nexit 127')
    settings.BRIDGE_CLAUDE_BIN = str(broken)

    status = executors.claude_status({"ANTHROPIC_API_KEY": "sk-test"})

    assert status.found and status.version is None and status.ready == executors.NO
    [problem] = status.problems
    assert "exit status 127" in problem.what and "node: No such file" in problem.what
    assert "Node.js" in problem.fix


def test_not_logged_in_is_a_problem_with_the_fix(tmp_path, counted_claude):
    status = executors.claude_status({"HOME": str(tmp_path / "home")}, platform="linux")

    assert status.ready == executors.NO
    [problem] = status.problems
    assert "not logged in" in problem.what and "/login" in problem.fix and "ANTHROPIC_API_KEY" in problem.fix
    lines = "\n".join(executors.startup_lines([status]))
    assert "claude: NOT READY" in lines and "fix: " in lines and "/login" in lines


def test_the_open_health_shape_names_no_path(tmp_path, counted_claude):
    status = executors.claude_status({"HOME": str(tmp_path / "home")}, platform="linux")

    public = status.as_dict(private=False)

    assert public == {"agent": "claude", "found": True, "version": "9.9.9 (Claude Code)", "ready": "no", "problems": 1}
    assert str(tmp_path) not in repr(public)
    assert status.as_dict()["problems"][0]["fix"]


# --- Hermes Agent -----------------------------------------------------------------------------------------------


@pytest.fixture
def fake_hermes(tmp_path, settings) -> Path:
    """A `hermes` in its own venv, whose package metadata says its version (as pip leaves it)."""
    venv = tmp_path / "venv"
    site = venv / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages"
    dist = site / "hermes_agent-1.2.3.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: hermes-agent\nVersion: 1.2.3\n")
    (venv / "bin").mkdir()
    script = executable(venv / "bin", "hermes", "echo never run me >&2\nexit 1")
    settings.BRIDGE_HERMES_BIN = str(script)
    settings.BRIDGE_HERMES_MODE = "auto"
    return script


def test_hermes_without_a_config_says_to_set_it_up(fake_hermes, tmp_path):
    status = executors.hermes_status({"HERMES_HOME": str(tmp_path / "hermes-home")})

    assert (status.found, status.version, status.ready) == (True, "1.2.3", executors.NO)
    [problem] = status.problems
    assert "no config" in problem.what and "hermes setup" in problem.fix
    assert any("ACP extra" in note for note in status.notes), "one-shot only: said, but it still runs"


@pytest.mark.parametrize(
    "config, provider",
    [
        ("model:\n  provider: openrouter\n", "openrouter"),
        ("model: anthropic/claude-sonnet\n", "anthropic/claude-sonnet"),
    ],
)
def test_hermes_with_a_provider_is_ready(fake_hermes, tmp_path, config, provider):
    home = tmp_path / "hermes-home"
    home.mkdir()
    (home / "config.yaml").write_text(config)

    status = executors.hermes_status({"HERMES_HOME": str(home)})

    assert status.ready == executors.YES and status.problems == ()
    assert repr(provider) in status.detail and "one-shot" in status.detail


@pytest.mark.parametrize("config", ["model: {}\n", "agent:\n  max_turns: 3\n", "- not a mapping\n", "model: [\n"])
def test_hermes_without_a_provider_is_not_ready(fake_hermes, tmp_path, config):
    home = tmp_path / "hermes-home"
    home.mkdir()
    (home / "config.yaml").write_text(config)

    status = executors.hermes_status({"HERMES_HOME": str(home)})

    assert status.ready == executors.NO
    assert str(home / "config.yaml") in status.problems[0].what


def test_acp_mode_without_the_acp_extra_is_a_problem(fake_hermes, tmp_path, settings):
    settings.BRIDGE_HERMES_MODE = "acp"
    home = write_hermes_home(tmp_path / "hermes-home", "http://127.0.0.1:9")

    status = executors.hermes_status({"HERMES_HOME": str(home)})

    assert status.ready == executors.NO
    [problem] = status.problems
    assert "ACP extra" in problem.what and "hermes-agent[acp]" in problem.fix


def test_a_missing_hermes_says_only_hermes_tasks_need_it(settings):
    settings.BRIDGE_HERMES_BIN = "no-such-hermes"

    status = executors.hermes_status({"PATH": "/nonexistent"})

    assert not status.found and status.ready == executors.NO
    assert "agent 'hermes'" in status.problems[0].fix


def test_the_real_hermes_install_as_the_tests_configure_it(settings, tmp_path):
    if not DEFAULT_HERMES_BIN.exists():
        pytest.skip(f"the Hermes CLI is not installed at {DEFAULT_HERMES_BIN} (run `make hermes-cli`)")
    settings.BRIDGE_HERMES_BIN = str(DEFAULT_HERMES_BIN)
    settings.BRIDGE_HERMES_MODE = "auto"
    home = write_hermes_home(tmp_path / "hermes-home", "http://127.0.0.1:9")

    status = executors.hermes_status({"HERMES_HOME": str(home)})

    assert status.ready == executors.YES, status
    assert status.version == installed_version()
    assert "'custom'" in status.detail and "runs acp" in status.detail


def test_one_agents_status_and_the_whole_report_agree(fake_hermes, counted_claude, tmp_path):
    environ = {"HERMES_HOME": str(tmp_path / "hermes-home"), "ANTHROPIC_API_KEY": "sk-test"}

    report = executors.executor_report(environ)

    assert [status.agent for status in report] == [
        "claude",
        "hermes",
        "gemini",
        "qwen",
        "opencode",
        "codex",
        "claude-acp",
    ]
    assert [executors.executor_status(status.agent, environ) for status in report] == report
