"""The browser pages through Django's test client: login, forms, and bad input answered in words."""

import re

import pytest
from django.db import connection
from django.test import Client, RequestFactory
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils.html import escape

from jobs import actions
from jobs.core.hints import manage_command
from jobs.core.vocabulary import Source
from jobs.models import PermissionRequest, Task, TaskEvent
from jobs.web import views
from jobs.web.auth import login_link_path
from tests.support import make_task

pytestmark = pytest.mark.django_db(transaction=True)


def task_with_question(tool_input: dict | None = None):
    task = make_task("ask Bash")
    perm = actions.record_permission_request(
        task, request_id="req-1", tool_name="Bash", tool_input=tool_input or {"command": "touch x"}
    )
    return task, perm


def test_every_page_needs_a_login(work_root):
    task = make_task("say hi")
    client = Client()
    for url in ("/", "/tasks/new", f"/tasks/{task.public_id}/", "/usage/"):
        response = client.get(url)
        assert response.status_code == 302 and response["Location"].startswith("/login/"), url
    response = client.post(f"/tasks/{task.public_id}/cancel")
    assert response.status_code == 302
    task.refresh_from_db()
    assert task.status == "queued"


def test_password_login(work_root, user):
    client = Client()
    response = client.post("/login/", {"username": "alice", "password": "pw-alice-123"})
    assert response.status_code == 302 and response["Location"] == "/"
    assert client.get("/").status_code == 200


def test_the_login_link_works_once(work_root, user):
    client = Client()
    path = login_link_path(user)
    response = client.get(path)
    assert response.status_code == 302 and response["Location"] == "/"
    assert client.get("/").status_code == 200
    again = Client().get(path)
    assert again.status_code == 403 and b"has been used or has expired" in again.content
    assert escape(manage_command("login_link")).encode() in again.content, "it names the command for a new one"


def test_forms_are_csrf_protected(work_root, user):
    client = Client(enforce_csrf_checks=True)
    client.force_login(user)
    task = make_task("say hi")
    assert client.post(f"/tasks/{task.public_id}/cancel").status_code == 403
    assert client.post("/tasks/new", {"prompt": "say hi"}).status_code == 403
    task.refresh_from_db()
    assert task.status == "queued"


def test_dashboard_lists_and_filters_tasks(work_root, browser):
    queued = make_task("the queued one")
    cancelled = make_task("the cancelled one")
    actions.request_cancel(cancelled)
    task_with_question()
    page = browser.get("/").content.decode()
    assert "the queued one" in page and "the cancelled one" in page
    assert re.search(r'id="pending-permissions">1<', page)
    page = browser.get("/?status=cancelled").content.decode()
    assert "the cancelled one" in page and "the queued one" not in page
    assert str(queued.public_id) not in page


def test_new_task_form_queues_through_actions(work_root, browser):
    (work_root / "proj").mkdir()
    response = browser.post(
        "/tasks/new",
        {
            "agent": "claude",
            "prompt": "say hi",
            "cwd": str(work_root / "proj"),
            "permission_mode": "approve",
            "model": "sonnet",
            "max_turns": "3",
            "timeout_s": "60",
            "permission_timeout_s": "3600",
        },
    )
    assert response.status_code == 302
    [task] = Task.objects.all()
    assert response["Location"] == f"/tasks/{task.public_id}/"
    assert (task.source, task.created_by, task.cwd, task.timeout_s, task.permission_timeout_s) == (
        Source.WEB,
        "user:alice",
        str(work_root / "proj"),
        60,
        3600,
    )
    assert task.options == {"model": "sonnet", "max_turns": 3}


def test_new_task_outside_the_allowed_roots_is_refused_with_the_reason(work_root, browser, tmp_path):
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    fields = {"agent": "claude", "prompt": "say hi", "cwd": str(outside), "permission_mode": "approve"}
    response = browser.post("/tasks/new", fields)
    page = response.content.decode()
    assert response.status_code == 200 and "outside the allowed roots" in page
    assert not Task.objects.exists()


def test_cancel_then_cancel_again(work_root, browser):
    task = make_task("say hi")
    response = browser.post(f"/tasks/{task.public_id}/cancel", follow=True)
    assert "Cancelled." in response.content.decode()
    response = browser.post(f"/tasks/{task.public_id}/cancel", follow=True)
    assert "has already ended (cancelled); there is nothing to cancel" in response.content.decode()
    assert TaskEvent.objects.filter(task=task, kind="status").count() == 2  # queued, cancelled: nothing twice


def test_follow_up_without_an_agent_session_is_refused(work_root, browser):
    task = make_task("say hi")
    actions.request_cancel(task)
    response = browser.post(f"/tasks/{task.public_id}/follow-up", {"prompt": "and again"}, follow=True)
    assert "has no agent session to continue" in response.content.decode()
    assert Task.objects.count() == 1


def test_follow_up_continues_the_same_session(work_root, browser):
    task = make_task("say hi", permission_mode="bypass", options={"model": "m"})
    actions.link_session(task, "sess-123")
    response = browser.post(f"/tasks/{task.public_id}/follow-up", {"prompt": "and again"})
    new = Task.objects.exclude(pk=task.pk).get()
    assert response["Location"] == f"/tasks/{new.public_id}/"
    assert (new.resume_session_id, new.cwd, new.permission_mode, new.options) == (
        "sess-123",
        task.cwd,
        "bypass",
        {"model": "m"},
    )


def test_a_permission_decided_in_the_browser(work_root, browser):
    task, perm = task_with_question()
    url = f"/tasks/{task.public_id}/permissions/{perm.request_id}"
    response = browser.post(url, {"behavior": "allow", "updated_input": '{"command": "touch y"}'})
    assert response.status_code == 200, response.content
    perm.refresh_from_db()
    assert (perm.status, perm.updated_input, perm.decided_by, perm.decided_via) == (
        "allowed",
        {"command": "touch y"},
        "user:alice",
        "web",
    )


def test_a_permission_answered_elsewhere_meanwhile_is_not_answered_twice(work_root, browser):
    task, perm = task_with_question()
    actions.decide_permission(task, behavior="deny", request_id=perm.request_id, message="no", via="api", by="hermes")
    response = browser.post(f"/tasks/{task.public_id}/permissions/{perm.request_id}", {"behavior": "allow"})
    assert response.status_code == 409
    assert "was already denied via api; nothing was sent to the agent" in response.json()["error"]
    perm.refresh_from_db()
    assert (perm.status, perm.decided_via) == ("denied", "api")
    assert TaskEvent.objects.filter(task=task, kind="permission_decision").count() == 1


@pytest.mark.parametrize(
    "fields, words",
    [
        ({"behavior": "allow", "updated_input": "{not json"}, "not valid JSON"),
        ({"behavior": "allow", "updated_input": "[1, 2]"}, "must be a JSON object"),
        ({"behavior": "maybe"}, "Select a valid choice"),
    ],
)
def test_bad_permission_input_is_refused_in_words(work_root, browser, fields, words):
    task, perm = task_with_question()
    response = browser.post(f"/tasks/{task.public_id}/permissions/{perm.request_id}", fields)
    assert response.status_code == 400 and words in response.json()["error"]
    assert PermissionRequest.objects.get(pk=perm.pk).status == "pending"


def test_an_unknown_task_id_says_so(work_root, browser):
    for task_id in ("0b4f8e2c-0000-4000-8000-000000000000", "nope"):
        response = browser.get(f"/tasks/{task_id}/")
        assert response.status_code == 404 and b"no task" in response.content
        assert browser.post(f"/tasks/{task_id}/cancel").status_code == 404
        response = browser.post(f"/tasks/{task_id}/permissions/req-1", {"behavior": "allow"})
        assert response.status_code == 404 and "no task" in response.json()["error"]


def test_usage_page_sums_cost_per_day_and_directory(work_root, browser):
    (work_root / "a").mkdir()
    for cost in (0.5, 0.25):
        task = make_task("say hi", cwd=str(work_root / "a"))
        Task.objects.filter(pk=task.pk).update(cost_usd=cost, input_tokens=100, output_tokens=10)
    page = browser.get(reverse("usage")).content.decode()
    assert "$0.7500" in page and str(work_root / "a") in page and "220" in page
    assert page.count('class="bar"') == 2  # one bar per chart for the one day


# --- issue 13.12 / 13.5: what a newcomer sees ------------------------------------------------------------------


def test_the_dashboard_has_a_tile_for_every_way_a_task_ends(work_root, browser):
    for _ in range(2):
        actions.request_cancel(make_task("stopped"))
    make_task("waiting")
    page = browser.get("/").content.decode()
    assert re.search(r'id="count-cancelled">2<', page) and re.search(r'id="count-queued">1<', page)
    assert re.search(r'id="count-lost">0<', page)


def test_the_dashboard_counts_pending_permissions_only_for_the_rows_it_shows(work_root, browser):
    """Issue 12: the same number of queries for 3 tasks as for 30, and each row's badge still right."""
    task, _ = task_with_question()
    actions.record_permission_request(task, request_id="req-2", tool_name="Bash", tool_input={"command": "ls"})
    make_task("no questions")
    with CaptureQueriesContext(connection) as few:
        page = browser.get("/").content.decode()
    assert re.search(rf'id="task-{task.public_id}".*?2 to approve', page, re.S)
    assert page.count("to approve</span>") == 1 and re.search(r'id="pending-permissions">2<', page)
    for i in range(30):
        make_task(f"filler {i}")
    with CaptureQueriesContext(connection) as many:
        browser.get("/")
    assert len(many) == len(few), [q["sql"] for q in many]
    assert not [q["sql"] for q in many if 'JOIN "jobs_permissionrequest"' in q["sql"]]  # no count over every task


def test_the_login_page_names_commands_that_work_as_printed(work_root):
    page = Client().get("/login/").content.decode()
    assert escape(manage_command("createsuperuser")) in page and "python manage.py" not in page
    assert escape(manage_command("login_link")) in page, "how to get a new link without a restart"


def test_the_favicon_is_served(work_root):
    response = views.favicon(RequestFactory().get("/favicon.ico"))
    body = b"".join(response.streaming_content)
    assert response.status_code == 200 and response["Content-Type"] == "image/x-icon"
    assert body[:4] == b"\x00\x00\x01\x00"  # an ICO header


def test_every_page_links_its_icon(work_root, browser):
    assert 'rel="icon" href="/static/bridge/favicon.ico"' in browser.get("/").content.decode()


def test_task_queued_is_a_message_the_page_drops_once_the_task_runs(work_root, browser):
    response = browser.post("/tasks/new", {"agent": "claude", "prompt": "say hi", "permission_mode": "approve"})
    page = browser.get(response["Location"]).content.decode()
    assert re.search(r'<li class="message transient success">Task queued.</li>', page)


# --- issue 10: where a task runs, or why it waits -------------------------------------------------------------


def test_the_task_page_says_why_a_queued_task_waits_and_its_target(work_root, browser):
    task = make_task("say hi", target="gpu-box")
    page = browser.get(f"/tasks/{task.public_id}/").content.decode()
    assert re.search(r'id="target">gpu-box<', page)
    assert re.search(r'id="wait-reason" class="message waiting" >Waiting: <span>no live supervisor is running', page)
    assert re.search(r'id="worker">–<', page)


def test_the_task_page_names_the_supervisor_that_runs_it(work_root, browser):
    task = make_task("say hi")
    worker = actions.register_worker(1, name="build-1")
    assert actions.claim_next_task(worker).pk == task.pk
    page = browser.get(f"/tasks/{task.public_id}/").content.decode()
    assert f'id="worker">build-1 <span class="muted">on {worker.host}</span>' in page
    assert re.search(r'id="wait-reason"[^>]*hidden', page)
    assert "any supervisor that serves its directory" in page


# --- issue 13.8: one-shot Hermes cannot relay permission questions ---------------------------------------------


@pytest.mark.parametrize(
    "mode, spawned, words",
    [
        ("approve", ["python", "hermes_launch.py", "hermes", "chat", "-Q"], "one-shot Hermes cannot ask"),
        ("bypass", ["python", "hermes_launch.py", "hermes", "chat", "-Q", "--yolo"], "one-shot Hermes with --yolo"),
        ("approve", ["hermes", "acp"], "ask for what Hermes asks about (file edits, risky commands)"),
        ("bypass", ["hermes", "acp"], "allow every tool (recorded as policy)"),
        ("approve", None, "one-shot Hermes cannot ask"),  # not spawned yet: as it would run now
    ],
)
def test_a_hermes_tasks_permissions_say_what_its_mode_can_do(work_root, browser, settings, mode, spawned, words):
    settings.BRIDGE_HERMES_MODE = "oneshot" if spawned is None else "acp"
    task = make_task("say hi", agent="hermes", permission_mode=mode)
    if spawned:
        actions.append_events(task, [("spawned", {"pid": 1, "argv": spawned})])
    page = browser.get(f"/tasks/{task.public_id}/").content.decode()
    assert re.search(rf'id="permission-mode">[^<]*{re.escape(words)}', page), page


def test_health_and_the_dashboard_say_when_an_executor_cannot_run(browser, settings, tmp_path, work_root):
    settings.BRIDGE_CLAUDE_BIN = str(tmp_path / "no-such-claude")

    health = Client().get("/health").json()
    dashboard = browser.get(reverse("dashboard")).content.decode()

    [claude] = [executor for executor in health["executors"] if executor["agent"] == "claude"]
    assert claude == {"agent": "claude", "found": False, "version": None, "ready": "no", "problems": 1}
    assert str(tmp_path) not in str(health), "the open /health names no path"
    assert "claude cannot run" in dashboard and "Fix: " in dashboard
