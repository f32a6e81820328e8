"""API tokens: a revoked token's name can be used again, and every kind of failed authentication says which it was
and what to do, with commands that work as printed."""

import base64
import os
import shlex
import string
import subprocess

import pytest
from django.core.management import CommandError, call_command
from django.test import Client
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from jobs import actions
from jobs.actions.tokens import PREFIX_LEN, TOKEN_PREFIX, could_be_token
from jobs.core.errors import Conflict, InvalidInput
from jobs.core.hints import manage_command
from jobs.models import ApiToken
from jobs.web.auth import identify, verify_token
from tests.support import database_url

pytestmark = pytest.mark.django_db


def get_tasks(token: str | None, client: Client | None = None):
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return (client or Client()).get("/v1/tasks", headers=headers)


def test_a_revoked_tokens_name_can_be_used_again_and_the_old_token_stays_revoked():
    row, old = actions.create_token("hermes")
    actions.revoke_tokens(ApiToken.objects.filter(pk=row.pk))
    again, new = actions.create_token("hermes")
    assert again.name == "hermes" and again.pk != row.pk
    row.refresh_from_db()
    assert row.name == f"hermes~{row.pk}" and row.revoked_at is not None, "the old row is kept, renamed"
    assert get_tasks(new).status_code == 200
    refused = get_tasks(old).json()
    assert refused["reason"] == "revoked" and "this token was revoked" in refused["error"]


def test_an_active_tokens_name_is_refused_saying_how_to_free_it():
    actions.create_token("hermes")
    with pytest.raises(Conflict, match="revoke it first") as refused:
        actions.create_token("hermes")
    assert manage_command("token", "revoke", "hermes") in refused.value.message
    with pytest.raises(InvalidInput):
        actions.create_token("  ")
    with pytest.raises(InvalidInput, match="NUL"):
        actions.create_token("a\x00b")


def test_the_token_command_reuses_a_revoked_name(capsys):
    call_command("token", "create", "cli")
    first = capsys.readouterr().out.strip().splitlines()[-1]
    with pytest.raises(CommandError, match="is active"):
        call_command("token", "create", "cli")
    call_command("token", "revoke", "cli")
    call_command("token", "create", "cli")
    second = capsys.readouterr().out.strip().splitlines()[-1]
    assert get_tasks(first).status_code == 401 and get_tasks(second).status_code == 200
    with pytest.raises(CommandError, match="no active token named 'nobody'"):
        call_command("token", "revoke", "nobody")


@pytest.mark.parametrize(
    ("token", "reason", "words"),
    [
        (None, "missing", "authentication required"),
        ("brg_" + "x" * 43, "no_such_token", "no such token"),
        ("not-a-bridge-token", "no_such_token", "no such token"),
    ],
)
def test_each_failed_authentication_says_which_and_what_to_do(token, reason, words):
    body = get_tasks(token).json()
    assert (body["code"], body["reason"]) == ("unauthenticated", reason) and body["error"].startswith(words)
    assert manage_command("token", "create", "NAME") in body["error"]


def test_the_commands_in_the_messages_work_as_printed(settings, tmp_path):
    """The `token list` a 401 names runs as printed, from any directory: the venv's interpreter and the absolute
    manage.py (here on the test database)."""
    body = get_tasks("brg_" + "y" * 43).json()
    command = manage_command("token", "list")
    assert command in body["error"]
    env = {**os.environ, "DATABASE_URL": database_url(settings.DATABASES["default"]), "BRIDGE_DATA_DIR": str(tmp_path)}
    run = subprocess.run(shlex.split(command), capture_output=True, text=True, timeout=60, env=env, cwd=tmp_path)
    assert run.returncode == 0, run.stderr


URLSAFE = string.ascii_letters + string.digits + "-_"  # what follows brg_ in a token (secrets.token_urlsafe)
LOOKUP_CHARS = PREFIX_LEN - len(TOKEN_PREFIX)  # the characters after brg_ that are stored to find a token's row


@pytest.fixture
def real_token() -> str:
    return actions.create_token("real")[1]


def wrong_rests(real_rest: str) -> st.SearchStrategy[str]:
    """What may follow a real token's lookup prefix without being the rest of that token: its rest with one character
    changed, cut short or lengthened, or any other rest of a token's shape (16 to 64 characters after brg_)."""
    fewest, most = 16 - LOOKUP_CHARS, 64 - LOOKUP_CHARS
    one_changed = st.tuples(st.integers(0, len(real_rest) - 1), st.sampled_from(URLSAFE)).map(
        lambda change: real_rest[: change[0]] + change[1] + real_rest[change[0] + 1 :]
    )
    cut_short = st.integers(fewest, len(real_rest) - 1).map(lambda n: real_rest[:n])
    lengthened = st.text(URLSAFE, min_size=1, max_size=most - len(real_rest)).map(lambda more: real_rest + more)
    anything = st.text(URLSAFE, min_size=fewest, max_size=most)
    return st.one_of(one_changed, cut_short, lengthened, anything).filter(lambda rest: rest != real_rest)


@hypothesis_settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_a_token_with_a_real_tokens_lookup_prefix_but_a_wrong_rest_is_refused(real_token, data):
    """Principle 6, tokens compared in constant time (jobs/web/auth.py `verify_token`): the stored lookup prefix only
    finds the rows to compare with, and the hash of the whole token decides. A wrong token whose prefix no row has is
    refused before any hash is compared, so only one that shares a real token's prefix tests the comparison: near
    misses of a real token and any other rest, refused by `verify_token`, by `identify` (Bearer and Basic) and by a
    REST request (401 no_such_token), and never marked as used. The real token is let in each time, so the prefix's
    row was there to compare with."""
    wrong = real_token[:PREFIX_LEN] + data.draw(wrong_rests(real_token[PREFIX_LEN:]), label="rest")
    assert could_be_token(wrong), "a token's shape: it gets past the shape check to the prefix lookup"
    assert ApiToken.objects.filter(prefix=wrong[:PREFIX_LEN], revoked_at=None).count() == 1, "the lookup finds a row"
    used_before = ApiToken.objects.get(name="real").last_used_at
    assert verify_token(wrong) is None
    basic = base64.b64encode(f"hermes:{wrong}".encode()).decode()
    for header in (f"Bearer {wrong}", f"Basic {basic}"):
        assert identify(header) is None, header
        response = Client().get("/v1/tasks", headers={"Authorization": header})
        assert response.status_code == 401, (header, response.content)
        assert (response.json()["code"], response.json()["reason"]) == ("unauthenticated", "no_such_token")
    assert ApiToken.objects.get(name="real").last_used_at == used_before, "a refused token is not marked as used"
    assert identify(f"Bearer {real_token}").name == "token:real"
    assert get_tasks(real_token).status_code == 200
