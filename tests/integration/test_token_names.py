"""Names are text, not terminal commands: a token's name holding anything a terminal acts on is refused where tokens
are made (jobs/actions/tokens.py), and what `manage.py token` prints from a row is escaped (jobs/core/terminal.py)."""

import os
import subprocess
import sys
import unicodedata

import pytest
from django.core.management import CommandError, call_command
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from jobs import actions
from jobs.core.errors import InvalidInput
from jobs.models import ApiToken
from tests.support import REPO, database_url

pytestmark = pytest.mark.django_db

ISSUE_NAME = (
    "tok<script>\x1b[2J\x1b]0;PWN\x07"  # clears the screen and sets the title, as `$'tok<script>\e[2J\e]0;PWN\a'`
)
SAFE = st.characters(categories=["L", "M", "N", "P", "S"])
UNSAFE = st.characters(categories=["Cc", "Cf", "Co", "Zl", "Zp"], exclude_characters="\x00")
GENERATED = hypothesis_settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


def acted_on(text: str) -> list[str]:
    """The characters of `text` a terminal would act on (an oracle apart from the one under test)."""
    return [f"U+{ord(c):04X}" for c in text if unicodedata.category(c)[0] == "C" or unicodedata.category(c) in "ZlZp"]


@GENERATED
@given(before=st.text(SAFE, min_size=1, max_size=20), unsafe=UNSAFE, after=st.text(SAFE, min_size=1, max_size=20))
def test_a_name_holding_anything_a_terminal_acts_on_is_refused_naming_it(before, unsafe, after):
    count = ApiToken.objects.count()
    with pytest.raises(InvalidInput) as refused:
        actions.create_token(before + unsafe + after)
    message = refused.value.message
    assert f"U+{ord(unsafe):04X}" in message and "letters, digits, punctuation, symbols and spaces" in message
    assert acted_on(message) == [], "the refusal shows the name escaped"
    assert refused.value.detail == {"field": "name"} and ApiToken.objects.count() == count


@GENERATED
@given(name=st.text(st.characters(codec=None, exclude_characters="\x00"), min_size=1, max_size=40))
def test_any_generated_name_is_either_refused_or_stored_as_plain_text(name):
    try:
        row, _ = actions.create_token(name)
    except InvalidInput as refused:
        assert acted_on(name.strip()) or not name.strip(), f"{name!r} was refused: {refused.message}"
    else:
        assert acted_on(row.name) == [] and row.name == name.strip()
        row.delete()


def test_the_token_command_refuses_the_issues_name_saying_what_a_name_may_hold(settings, tmp_path):
    """A real `manage.py token create` with the issue's name: refused, nothing made, nothing a terminal obeys."""
    env = {**os.environ, "DATABASE_URL": database_url(settings.DATABASES["default"]), "BRIDGE_DATA_DIR": str(tmp_path)}
    run = subprocess.run(
        [sys.executable, str(REPO / "manage.py"), "token", "create", ISSUE_NAME],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        cwd=REPO,
    )
    assert run.returncode == 1 and run.stdout == ""
    assert run.stderr.strip() == (
        "CommandError: the token name 'tok<script>\\x1b[2J\\x1b]0;PWN\\x07' holds U+001B (a control character) at "
        "position 12: a name is letters, digits, punctuation, symbols and spaces, without control characters (C0 such "
        "as ESC, tab or newline; DEL; C1), format characters (bidi overrides and isolates, zero-width characters), "
        "line or paragraph separators, and private or unassigned code points; pick another, e.g. 'hermes'"
    )
    assert not ApiToken.objects.exists()


def test_token_list_shows_a_stored_names_escape_sequences_instead_of_obeying_them(capsys):
    """A name stored before names were checked (or by hand) is printed escaped, with each token's scope and roots."""
    ApiToken.objects.create(name=ISSUE_NAME, prefix="brg_old", hash="0" * 64, roots=["/work/\u202eevil"])
    actions.create_token("reader", "read", ["/srv/a", "/srv/b"])
    call_command("token", "list")
    out = capsys.readouterr().out
    assert acted_on(out.replace("\n", "").replace("\t", "")) == []
    old, reader = out.splitlines()
    assert old.startswith("tok<script>\\x1b[2J\\x1b]0;PWN\\x07\tbrg_old…\tscope decide, roots /work/\\u202eevil\t")
    assert reader.split("\t")[2] == "scope read, roots /srv/a, /srv/b"
    with pytest.raises(CommandError) as refused:
        call_command("token", "revoke", "\x1b[2Jnobody")
    assert "'\\x1b[2Jnobody'" in str(refused.value) and acted_on(str(refused.value)) == []


@pytest.mark.parametrize(
    ("command", "args"),
    [("login_link", ["--user", ISSUE_NAME]), ("supervise", ["--name", ISSUE_NAME]), ("token", ["revoke", ISSUE_NAME])],
)
def test_every_command_shows_a_name_it_was_given_escaped_in_its_refusal(command, args):
    with pytest.raises(CommandError) as refused:
        call_command(command, *args)
    assert "tok<script>\\x1b[2J\\x1b]0;PWN\\x07" in str(refused.value) and acted_on(str(refused.value)) == []
