"""Settings read from the environment: a value Bridge cannot take stops the start-up and says what it takes."""

import os
import subprocess
import sys
from unittest import mock

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from bridge.settings import FALSE_WORDS, TRUE_WORDS, env_bool
from tests.support import REPO

NAME = "BRIDGE_TEST_SWITCH"


def cased(words: tuple[str, ...]) -> st.SearchStrategy[str]:
    """One of `words` in any mix of upper and lower case, with blanks around it."""
    mixed = st.sampled_from(words).flatmap(
        lambda word: st.tuples(*(st.sampled_from(sorted({c.lower(), c.upper()})) for c in word)).map("".join)
    )
    return st.tuples(st.sampled_from(["", " ", "\t"]), mixed, st.sampled_from(["", " "])).map("".join)


@given(word=cased(TRUE_WORDS))
def test_every_yes_word_in_any_case_is_true(word):
    with mock.patch.dict(os.environ, {NAME: word}):
        assert env_bool(NAME, False) is True


@given(word=cased(FALSE_WORDS))
def test_every_no_word_in_any_case_is_false(word):
    with mock.patch.dict(os.environ, {NAME: word}):
        assert env_bool(NAME, True) is False


@given(word=st.text(st.characters(codec="utf-8", exclude_characters="\x00"), min_size=1, max_size=20))
def test_any_other_word_stops_the_start_up_naming_the_variable_and_the_words_it_takes(word):
    assume(word.strip() and word.strip().lower() not in TRUE_WORDS + FALSE_WORDS)  # else a word it takes, or unset
    with mock.patch.dict(os.environ, {NAME: word}), pytest.raises(SystemExit) as stopped:
        env_bool(NAME, True)
    message = str(stopped.value)
    assert message.startswith(f"{NAME}=") and all(w in message for w in TRUE_WORDS + FALSE_WORDS)


@pytest.mark.parametrize("default", [True, False])
def test_an_unset_or_empty_switch_is_its_default(monkeypatch, default):
    monkeypatch.delenv(NAME, raising=False)
    assert env_bool(NAME, default) is default
    monkeypatch.setenv(NAME, "  ")
    assert env_bool(NAME, default) is default


def test_bridge_refuses_to_start_on_a_misspelt_switch():
    """As the issue measured it: `enabled` used to turn Claude's partial messages off without a word."""
    run = subprocess.run(
        [sys.executable, str(REPO / "manage.py"), "check"],
        env={"PATH": "/usr/bin:/bin", "BRIDGE_CLAUDE_PARTIAL": "enabled", "BRIDGE_DATA_DIR": str(REPO / "var")},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode != 0
    assert "BRIDGE_CLAUDE_PARTIAL='enabled' is not a yes or a no" in run.stderr
