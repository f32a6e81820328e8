"""The Claude Code options people use with `claude -p` on the command line the Claude runner builds: Claude Code's own
permission modes next to Bridge's relay, tools to deny, text for the system prompt, more directories."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from jobs.core.vocabulary import PermissionMode
from jobs.supervision.runners.base import RunSpec
from jobs.supervision.runners.claude import ClaudeRunner

OPTION_FLAGS = ("--permission-mode", "--disallowedTools", "--append-system-prompt", "--add-dir")


def argv_of(options: dict | None = None, **fields) -> list[str]:
    return ClaudeRunner(RunSpec(prompt="p", cwd="/tmp", options=options or {}, **fields)).argv()


def after(argv: list[str], flag: str) -> list[str]:
    """The values given as `flag VALUE`."""
    return [argv[i + 1] for i, arg in enumerate(argv[:-1]) if arg == flag]


def joined(argv: list[str], flag: str) -> list[str]:
    """The values given as `flag=VALUE`, in order."""
    return [arg.removeprefix(f"{flag}=") for arg in argv if arg.startswith(f"{flag}=")]


@pytest.mark.parametrize("mode", [PermissionMode.ACCEPT_EDITS, PermissionMode.PLAN])
def test_claude_codes_own_modes_are_passed_on_and_what_it_still_asks_comes_to_bridge(mode):
    argv = argv_of(permission_mode=mode)
    assert after(argv, "--permission-mode") == [str(mode)]
    assert after(argv, "--permission-prompt-tool") == ["stdio"]
    assert "--dangerously-skip-permissions" not in argv


@pytest.mark.parametrize("mode", [PermissionMode.APPROVE, PermissionMode.BYPASS, PermissionMode.SKIP])
def test_bridges_own_modes_leave_claude_in_its_default_mode(mode):
    assert "--permission-mode" not in argv_of(permission_mode=mode)


def test_tools_to_deny_are_one_comma_separated_argument():
    argv = argv_of({"disallowed_tools": ["Bash(git push:*)", "WebFetch"]})
    assert after(argv, "--disallowedTools") == ["Bash(git push:*),WebFetch"]


def test_the_text_for_the_system_prompt_is_the_flags_own_argument_even_when_it_begins_with_a_dash():
    text = "- answer in French\n- be brief"
    argv = argv_of({"append_system_prompt": text})
    assert joined(argv, "--append-system-prompt") == [text]
    assert text not in argv  # never an argument of its own, which the CLI could read as a flag


def test_each_added_directory_is_an_argument_of_its_own_in_order():
    argv = argv_of({"add_dirs": ["/work/b", "/work/a dir", "/work/c"]})
    assert joined(argv, "--add-dir") == ["/work/b", "/work/a dir", "/work/c"]


def test_a_task_without_these_options_gets_none_of_their_flags():
    argv = argv_of({"model": "sonnet", "allowed_tools": ["Read"]})
    assert not [arg for arg in argv if arg.startswith(OPTION_FLAGS)]


@given(
    text=st.text(min_size=1, max_size=200),
    dirs=st.lists(st.text(min_size=1, max_size=30).map(lambda name: "/" + name), max_size=5),
    resume=st.booleans(),
)
def test_no_value_of_these_options_stands_alone_where_the_cli_could_take_it_for_a_flag_or_a_flags_value(
    text, dirs, resume
):
    """The CLI's --add-dir and --disallowedTools take several values: a value given apart from its flag could
    swallow the argument after it, or be read as a flag. Every value rides in its flag's own argument, so the
    arguments that follow (`--resume ID`) are read as they were meant whatever the values hold."""
    options = {"append_system_prompt": text, "add_dirs": dirs, "disallowed_tools": ["Bash"]}
    argv = argv_of(options, resume_session_id="s-1" if resume else None)
    assert joined(argv, "--append-system-prompt") == [text]
    assert joined(argv, "--add-dir") == dirs
    assert after(argv, "--resume") == (["s-1"] if resume else [])
    if resume:
        assert argv[-2:] == ["--resume", "s-1"]
