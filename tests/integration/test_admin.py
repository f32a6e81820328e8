"""History in the Django admin: search, filters, read-only records, cancel through actions, tokens shown once."""

import html
import json
import re

import pytest
from django.test import Client
from hypothesis import given
from hypothesis import strategies as st

from jobs import actions
from jobs.admin import money
from jobs.models import ApiToken, TaskEvent
from jobs.web import auth
from tests.support import make_task

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def admin_client_(django_user_model) -> Client:
    client = Client()
    client.force_login(django_user_model.objects.create_superuser("root", password="x"))
    return client


def test_search_filter_and_read_a_task_with_its_decisions(work_root, admin_client_):
    task = make_task("ask about the zebra crossing")
    make_task("something else entirely")
    perm = actions.record_permission_request(task, request_id="r1", tool_name="Bash", tool_input={"command": "ls"})
    actions.decide_permission(task, behavior="deny", request_id="r1", message="no", by="user:root", via="web")
    page = admin_client_.get("/admin/jobs/task/?q=zebra").content.decode()
    assert "ask about the zebra crossing" in page and "something else entirely" not in page
    page = admin_client_.get("/admin/jobs/task/?status__exact=queued&agent__exact=claude").content.decode()
    assert "ask about the zebra crossing" in page
    page = admin_client_.get(f"/admin/jobs/task/{task.pk}/change/").content.decode()
    assert "user:root" in page and "Denied" in page and perm.request_id in page
    assert f"{task.last_seq} events, paged" in page
    events = admin_client_.get(f"/admin/jobs/taskevent/?task__id__exact={task.pk}").content.decode()
    assert events.count("permission_decision") >= 1


def test_tasks_are_read_only_and_cannot_be_deleted(work_root, admin_client_):
    task = make_task("say hi")
    actions.request_cancel(task)
    page = admin_client_.get(f"/admin/jobs/task/{task.pk}/change/").content.decode()
    assert 'name="prompt"' not in page and 'name="_save"' not in page
    response = admin_client_.post(f"/admin/jobs/task/{task.pk}/change/", {"prompt": "rewritten"})
    assert response.status_code == 403
    assert admin_client_.post(f"/admin/jobs/task/{task.pk}/delete/", {"post": "yes"}).status_code == 403
    task.refresh_from_db()
    assert task.prompt == "say hi"
    assert admin_client_.get("/admin/jobs/task/add/").status_code == 403


def test_the_cancel_action_goes_through_request_cancel(work_root, admin_client_):
    queued, finished = make_task("wait"), make_task("over")
    actions.request_cancel(finished)
    response = admin_client_.post(
        "/admin/jobs/task/",
        {"action": "cancel_tasks", "_selected_action": [queued.pk, finished.pk]},
        follow=True,
    )
    page = response.content.decode()
    assert "cancel requested" in page and "has already ended (cancelled)" in page
    queued.refresh_from_db()
    assert queued.status == "cancelled" and queued.error == "cancelled in the admin by user:root"
    assert TaskEvent.objects.filter(task=finished, kind="status").count() == 2  # nothing written twice


def test_a_token_made_in_the_admin_is_shown_once_and_can_be_revoked(work_root, admin_client_):
    response = admin_client_.post("/admin/jobs/apitoken/add/", {"name": "hermes"}, follow=True)
    shown = re.search(r"it is not shown again: (brg_[A-Za-z0-9_-]+)", response.content.decode())
    assert shown, "the new token is not on the page"
    row = ApiToken.objects.get(name="hermes")
    assert shown.group(1) not in (row.hash, row.prefix) and auth.verify_token(shown.group(1)) == row
    assert shown.group(1) not in admin_client_.get(f"/admin/jobs/apitoken/{row.pk}/change/").content.decode()
    taken = admin_client_.post("/admin/jobs/apitoken/add/", {"name": "hermes"}).content.decode()
    assert "is active: revoke it first" in taken and ApiToken.objects.count() == 1
    admin_client_.post("/admin/jobs/apitoken/", {"action": "revoke_tokens", "_selected_action": [row.pk]})
    assert auth.verify_token(shown.group(1)) is None
    again = admin_client_.post("/admin/jobs/apitoken/add/", {"name": "hermes"}, follow=True).content.decode()
    assert "it is not shown again" in again, "a revoked token's name can be used again"
    assert ApiToken.objects.filter(name="hermes", revoked_at__isnull=True).count() == 1


@given(st.floats(min_value=0, max_value=1e6, allow_nan=False, allow_infinity=False))
def test_costs_read_without_float_noise(value):
    """Issue 13.12: 0.1 + 0.2 showed as $0.30000000000000004; a cost shows at most 6 decimals and at least cents."""
    text = money(value)
    whole, fraction = text.removeprefix("$").split(".")
    assert 2 <= len(fraction) <= 6 and (len(fraction) == 2 or not fraction.endswith("0"))
    assert float(f"{whole}.{fraction}") == pytest.approx(value, abs=5e-7)
    assert money(0.1 + 0.2) == "$0.30" and money(None) == "–"


def test_clipped_event_data_is_json_not_a_python_repr(work_root, admin_client_):
    task = make_task("say hi")
    content = [{"text": "it's done"}, {"text": "and a list"}]  # one key each: PostgreSQL orders keys
    actions.append_events(task, [("tool_result", {"content": content, "is_error": False}), ("odd", {"flag": None})])
    page = admin_client_.get(f"/admin/jobs/taskevent/?task__id__exact={task.pk}").content.decode()
    assert html.escape(json.dumps(content)) in page and html.escape('{"flag": null}') in page
    assert "&#x27;text&#x27;" not in page and "None" not in page
