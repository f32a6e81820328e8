"""API tokens: a revoked token's name can be used again, and every kind of failed authentication says which it was
and what to do, with commands that work as printed."""

import os
import shlex
import subprocess

import pytest
from django.core.management import CommandError, call_command
from django.test import Client

from jobs import actions
from jobs.core.errors import Conflict, InvalidInput
from jobs.core.hints import manage_command
from jobs.models import ApiToken
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
