"""What each interface answers when the disk that holds the database is full, in-process (the real full disk is
tests/integration/test_full_disk.py): a 503 `storage_full` with Retry-After wherever a write cannot be stored, reads
that go on though their token's last use cannot be written, and /health saying the store is full.

A full disk is SQLite's own error, raised where Django's statements run (`connection.execute_wrapper`) or, as
tests/integration/test_concurrency.py does for a busy database, by a step every request takes."""

import asyncio
import json
import sqlite3
from contextlib import contextmanager

import pytest
from django.contrib.sessions.middleware import SessionMiddleware
from django.db import OperationalError, connection
from django.test import Client
from django.utils import timezone

from jobs import actions
from jobs.actions import tokens
from jobs.core import resilience
from jobs.core.vocabulary import Status
from jobs.models import ApiToken, Task, Worker
from tests.support import make_task

FULL_WORDS = "database or disk is full"


@pytest.fixture(autouse=True)
def _forget_full_disks(monkeypatch):
    """What these tests make this process remember of full disks is forgotten after each: /health would report it,
    and no token would be marked used for a minute."""
    monkeypatch.setattr(resilience, "_full_seen_at", None)
    monkeypatch.setattr(tokens, "_last_use_paused_until", 0.0)


def full_disk() -> OperationalError:
    """What Django raises when SQLite finds no room: its OperationalError, from SQLite's own."""
    try:
        try:
            raise sqlite3.OperationalError(FULL_WORDS)
        except sqlite3.OperationalError as exc:
            exc.sqlite_errorcode = 13
            raise OperationalError(str(exc)) from exc
    except OperationalError as wrapped:
        return wrapped


def raising(error: Exception):
    def fail(*args, **kwargs):
        raise error

    return fail


@contextmanager
def writes_fail(table: str = ""):
    """Every INSERT, UPDATE or DELETE (on `table`, when named) fails as on a full disk; reads go on."""
    statements = []

    def wrapper(execute, sql, params, many, context):
        words = sql.lstrip().upper()
        if words.startswith(("INSERT", "UPDATE", "DELETE")) and table in sql:
            statements.append(sql)
            raise full_disk()
        return execute(sql, params, many, context)

    with connection.execute_wrapper(wrapper):
        yield statements


def assert_storage_full(response, settings) -> None:
    assert response.status_code == 503, response.content[:300]
    assert response["Content-Type"].startswith("application/json")
    assert response["Retry-After"] == str(settings.BRIDGE_STORAGE_RETRY_AFTER_S)
    body = response.json()
    assert body["code"] == "storage_full" and "full" in body["error"]
    assert body["retry_after_s"] == settings.BRIDGE_STORAGE_RETRY_AFTER_S


def bearer(token: str) -> dict:
    return {"HTTP_AUTHORIZATION": f"Bearer {token}"}


# --- bookkeeping never fails a request ----------------------------------------------------------------------------


@pytest.mark.django_db
def test_a_read_answers_200_though_its_token_cannot_be_marked_used():
    row, token = actions.create_token("reader", scope="read")
    with writes_fail("jobs_apitoken") as failed:
        response = Client().get("/v1/tasks", **bearer(token))
    assert response.status_code == 200, response.content[:300]
    assert failed, "the token's last use was to be written"
    assert ApiToken.objects.get(pk=row.pk).last_used_at is None


@pytest.mark.django_db
def test_after_its_last_use_could_not_be_written_this_process_leaves_it_for_a_minute():
    _, token = actions.create_token("reader", scope="read")
    with writes_fail("jobs_apitoken") as failed:
        for _ in range(3):
            assert Client().get("/v1/tasks", **bearer(token)).status_code == 200
    assert len(failed) == 1, "one failed write, not one per request"


@pytest.mark.django_db
def test_a_read_of_a_task_whose_supervisor_died_answers_what_it_knows_while_its_end_cannot_be_stored(work_root):
    _, token = actions.create_token("reader", scope="read")
    task = make_task("say hi", cwd=str(work_root))
    gone = actions.register_worker(1, name="gone")
    Task.objects.filter(pk=task.pk).update(status=Status.RUNNING, worker=gone)
    Worker.objects.filter(pk=gone.pk).update(stopped_at=timezone.now())

    with writes_fail("jobs_task"):
        response = Client().get("/v1/task", {"task_id": str(task.public_id)}, **bearer(token))
        health = Client().get("/health").json()

    assert response.status_code == 200, response.content[:300]
    assert response.json()["bridge_status"] == "running", "what it knows: the end is not recorded yet"
    assert health["storage"] == "full"
    read_again = Client().get("/v1/task", {"task_id": str(task.public_id)}, **bearer(token)).json()
    assert read_again["bridge_status"] == "orphaned", "a read once space is back settles it"


# --- what cannot be stored is a 503 storage_full on every interface -----------------------------------------------


@pytest.mark.django_db
def test_a_rest_write_that_cannot_be_stored_answers_503_storage_full(settings, work_root):
    _, token = actions.create_token("runner", scope="run")
    body = json.dumps({"prompt": "say hi", "cwd": str(work_root)})
    with writes_fail("jobs_task"):
        response = Client().post("/v1/task/create", body, content_type="application/json", **bearer(token))
    assert_storage_full(response, settings)


@pytest.mark.django_db
def test_rest_sse_and_pages_answer_a_full_disk_with_503_storage_full(settings, monkeypatch, django_user_model):
    monkeypatch.setattr("jobs.web.auth.authenticate", raising(full_disk()))
    assert_storage_full(Client().get("/v1/tasks"), settings)
    assert_storage_full(Client().get("/v1/task/output/stream", {"task_id": "x"}), settings)
    client = Client()
    client.force_login(django_user_model.objects.create_user("ann"))
    monkeypatch.setattr("jobs.actions.settle_running_tasks", raising(full_disk()))
    assert_storage_full(client.get("/"), settings)


@pytest.mark.django_db
def test_a_full_disk_met_in_a_middleware_is_503_storage_full(settings, monkeypatch):
    """Raised after the view (a session being saved): Django has made it a 500 already; it is replaced."""
    monkeypatch.setattr(SessionMiddleware, "process_response", raising(full_disk()))
    assert_storage_full(Client(raise_request_exception=False).get("/login/"), settings)


def test_an_mcp_tool_answers_a_full_disk_as_storage_full_not_an_internal_error():
    from jobs.mcp.registry import TOOLS, tool

    async def full() -> str:
        raise full_disk()

    tool(full)
    wrapped = TOOLS.pop().fn  # registered only for this test
    reply = asyncio.run(wrapped()).content[0].text
    assert "CODE: storage_full" in reply and "full" in reply, reply


# --- /health ------------------------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_health_says_the_store_is_full_when_too_little_space_is_left(monkeypatch):
    monkeypatch.setattr(resilience, "FULL_FLOOR_BYTES", 1 << 62)  # more than any disk has free
    response = Client().get("/health")
    body = response.json()
    assert (response.status_code, body["status"], body["storage"], body["database"]) == (503, "degraded", "full", "ok")


@pytest.mark.django_db
def test_health_says_the_store_is_full_for_a_while_after_a_write_failed_so(monkeypatch):
    assert Client().get("/health").json()["storage"] == "ok"
    resilience.temporary_refusal(full_disk())  # a request of this process met the full disk
    assert Client().get("/health").json()["storage"] == "full"
    monkeypatch.setattr(resilience, "FULL_SEEN_S", 0.0)
    assert Client().get("/health").json()["storage"] == "ok"


@pytest.mark.django_db
def test_health_reads_on_when_what_it_would_settle_cannot_be_written(monkeypatch):
    monkeypatch.setattr("jobs.actions.liveness.settle_running_tasks", raising(full_disk()))
    body = Client().get("/health").json()
    assert (body["database"], body["storage"], body["status"]) == ("ok", "full", "degraded")
    assert "tasks" in body and "workers" in body
