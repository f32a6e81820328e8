"""Text from data reaches a terminal shown, never obeyed (jobs/core/terminal.py `printable`), and a caller limited to
roots covers a cwd by the one rule for "under" (jobs/core/access.py `Caller.covers`)."""

import unicodedata
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import call_command
from hypothesis import given
from hypothesis import strategies as st

from jobs.core.access import Caller, Scope
from jobs.core.terminal import is_unsafe, printable
from jobs.integrations import tool_configs
from tests.support import COMPONENTS, posix

# What a terminal acts on, by example: the issue's own name (clear screen, set the title), a CSI, C1's CSI, DEL,
# a bidi override and isolate, a zero-width joiner, a line separator.
ATTACKS = ["tok<script>\x1b[2J\x1b]0;PWN\x07", "\x1b[31mred", "\x9b2J", "a\x7fb", "abc\u202egnp.exe", "\u2066x\u2069"]
ATTACKS += ["zero\u200dwidth", "line\u2028break"]
# Every character a terminal could act on, next to any other text.
UNSAFE_CHARS = st.characters(categories=["Cc", "Cf", "Cs", "Co", "Zl", "Zp"])
ANY_TEXT = st.text(st.characters(codec=None), max_size=40)
LINE = st.text(st.characters(codec=None, exclude_characters="\r\n"), max_size=40)


def acted_on(text: str) -> list[str]:
    return [
        unicodedata.name(c, f"U+{ord(c):04X}") for c in text if unicodedata.category(c)[0] == "C" or c in "\u2028\u2029"
    ]


@pytest.mark.parametrize("text", ATTACKS)
def test_what_a_terminal_acts_on_is_shown_escaped(text):
    shown = printable(text)
    assert acted_on(shown) == [], shown
    assert "\\x1b" in printable("\x1b") and "\\u202e" in printable("\u202e") and "\\x07" in printable("\x07")


@given(before=ANY_TEXT, unsafe=UNSAFE_CHARS, after=ANY_TEXT)
def test_no_generated_text_keeps_a_character_a_terminal_acts_on(before, unsafe, after):
    shown = printable(before + unsafe + after)
    assert not any(is_unsafe(char) for char in shown), repr(shown)
    assert acted_on(shown) == [], repr(shown)


@given(text=st.text(st.characters(categories=["L", "M", "N", "P", "S", "Zs"]), max_size=60))
def test_text_with_nothing_to_escape_is_printed_as_it_is(text):
    assert printable(text) == text


@given(lines=st.lists(LINE, min_size=1, max_size=6), end=st.sampled_from(["\n", "\r\n"]))
def test_a_multiline_text_keeps_its_line_ends_and_escapes_each_line(lines, end):
    shown = printable(end.join(lines), multiline=True)
    assert shown.split(end) == [printable(line) for line in lines]


def test_a_config_files_escape_sequence_is_shown_in_the_diff_not_obeyed(tmp_path):
    """`register_claude --print` and `install_hermes_skill --print` show a config file's diff: its lines are the
    file's, whatever they hold."""
    change = tool_configs.FileChange(tmp_path / "settings.json", '{"x": "\x1b]0;PWN\x07"}\n', '{"x": 1}\n')
    shown = tool_configs.show_or_apply(change, dry_run=True)
    assert "\\x1b]0;PWN\\x07" in shown and acted_on(shown.replace("\n", "")) == []
    assert shown.count("\n") == change.diff().count("\n") + 1, "the diff keeps its lines"


@pytest.mark.usefixtures("data_dir")
@pytest.mark.parametrize(("option", "scope"), [((), "decide"), (("--token-scope", "run"), "run")])
def test_the_hermes_skill_names_the_narrowest_token_hermes_needs(home, option, scope):
    """Hermes answers permission questions, so its token is `decide` unless --token-scope says otherwise; the skill
    and the command's last words name the command that makes it."""
    out = StringIO()
    call_command("install_hermes_skill", *option, home=home, environ={"PATH": ""}, stdout=out, stderr=StringIO())
    skill = (home / ".hermes/skills/software-development/bridge-claude-code/SKILL.md").read_text()
    assert f"token create hermes --scope {scope}`" in skill
    assert "Make Hermes' token with: " in out.getvalue() and f"hermes --scope {scope}\n" in out.getvalue()


@given(root=COMPONENTS, below=st.lists(st.sampled_from(["a", "b c", "é"]), max_size=3), extra=st.sampled_from("xy-"))
def test_a_caller_limited_to_a_root_covers_what_lies_under_it_and_nothing_beside_it(root, below, extra):
    root_path = posix(root)
    caller = Caller("token:t", Scope.READ, (root_path,))
    assert caller.covers(str(Path(root_path, *below)))
    assert not caller.covers(root_path + extra), "whole components: /work does not hold /workshop"
    assert not caller.covers("/elsewhere-" + extra + root_path)
    assert Caller("token:t").covers(root_path + extra), "a token without roots is not limited"
