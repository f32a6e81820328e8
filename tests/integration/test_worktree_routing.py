"""A worktree lives on the host whose supervisor ran its task, and a merge or discard asked on any other host is
carried out by a supervisor of that one, answered as if done here (docs/architecture.md, "Changes and worktrees").

Two machines on one shared database: this test process is the web process of machine A (its data dir, its
BRIDGE_MACHINE_ID), and a real `manage.py supervise` with a data dir of its own is machine B, which runs the tasks and
so holds their worktrees. B commits as its own BRIDGE_GIT_AUTHOR, so a merge commit says which host made it. The same
tests run again on PostgreSQL with Redis carrying the rings between the processes (the last test).
"""

import json
import os
import signal
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from asgiref.sync import async_to_sync
from django.test import Client

from jobs.actions import create_token
from jobs.actions import worktrees as worktree_actions
from jobs.core import doorbell
from jobs.core.vocabulary import Status, WorktreeState
from jobs.mcp import tools
from jobs.models import Task, Worker, Worktree
from tests.integration.test_task_changes import git
from tests.support import (
    POSTGRES_URL,
    SuperviseProcess,
    at_once,
    postgres_or_skip,
    redis_or_skip,
    rerun_on_postgres,
    wait_until,
)

pytestmark = pytest.mark.django_db(transaction=True)

HOST_B_AUTHOR = "Host B <host-b@example.com>"
# How often each side looks: without Redis no ring crosses from one data dir to another, so B finds new tasks and
# requests, and this process B's outcomes, by looking (as two hosts sharing only a database would).
POLL_S = 0.05
REDIS_URL = os.environ.get("REDIS_URL") or os.environ.get("BRIDGE_TEST_REDIS_URL") or "redis://127.0.0.1:6379/0"


@pytest.fixture
def repo(work_root) -> Path:
    """A repository with one commit on `main`, holding shared.txt."""
    path = work_root / "repo"
    path.mkdir()
    git(path, "init", "-q", "-b", "main")
    (path / "shared.txt").write_text("one\ntwo\nthree\n")
    git(path, "add", "-A")
    git(path, "commit", "-q", "-m", "start")
    return path


@pytest.fixture
def host_b(tmp_path, settings, work_root, fake_agent) -> Iterator[SuperviseProcess]:
    """Machine B: a supervisor with a data dir (so a machine id) of its own, serving the same work root."""
    data = tmp_path / "data-b"
    data.mkdir()
    env = {
        "BRIDGE_DATA_DIR": str(data),
        "BRIDGE_SANDBOX": "off",
        "BRIDGE_GIT_AUTHOR": HOST_B_AUTHOR,
        "BRIDGE_POLL_S": str(POLL_S),
    }
    supervisor = SuperviseProcess(settings, "host-b", [work_root], extra_env=env)
    yield supervisor
    if supervisor.proc.poll() is None:
        supervisor.proc.send_signal(signal.SIGCONT)  # a test that froze it may have failed before thawing it
    supervisor.stop()


@pytest.fixture(autouse=True)
def looks_often(settings) -> None:
    settings.BRIDGE_POLL_S = POLL_S


@pytest.fixture
def client() -> Client:
    return Client(HTTP_AUTHORIZATION=f"Bearer {create_token('reviewer')[1]}")


def post(client: Client, path: str, body: dict) -> tuple[int, dict]:
    response = client.post(path, json.dumps(body), content_type="application/json")
    return response.status_code, response.json()


def run_on_b(client: Client, prompt: str, repo: Path) -> Task:
    """An isolated task, run by machine B's supervisor (this process runs none), in a worktree B made."""
    status, created = post(
        client,
        "/v1/task/create",
        {"prompt": prompt, "cwd": str(repo), "permission_mode": "bypass", "isolation": "worktree"},
    )
    assert status == 200, created
    task = Task.objects.get(public_id=created["task_id"])
    wait_until(lambda: Task.objects.get(pk=task.pk).is_terminal, what="the task to end on machine B")
    task.refresh_from_db()
    assert task.status == Status.DONE, task.error
    assert task.worker.name == "host-b"
    return Task.objects.select_related("worktree").get(pk=task.pk)


def on_b(task: Task, settings) -> Worktree:
    """The task's worktree, checked to be machine B's and not this process's."""
    row = task.worktree
    assert row is not None and row.state == WorktreeState.LIVE
    assert row.machine == Worker.objects.get(name="host-b").machine != settings.BRIDGE_MACHINE_ID
    return row


def test_a_merge_asked_here_is_carried_out_by_the_supervisor_of_the_worktrees_machine(host_b, client, repo, settings):
    task = run_on_b(client, "write shared.txt one\\nFROM B\\nthree", repo)
    row = on_b(task, settings)

    status, merged = post(client, "/v1/task/merge", {"task_id": str(task.public_id), "strategy": "squash"})

    assert status == 200, merged
    assert merged["worktree"]["state"] == WorktreeState.MERGED and merged["worktree"]["requested"] is None
    assert git(repo, "rev-parse", "main").strip() == merged["worktree"]["merged_commit"]
    assert git(repo, "log", "-1", "--format=%an <%ae>", "main").strip() == HOST_B_AUTHOR, "B made the commit"
    assert "FROM B" in git(repo, "show", "main:shared.txt")
    assert not Path(row.path).exists()
    row.refresh_from_db()
    assert (row.request, row.requested_by, row.refusal) == ("", "token:reviewer", {})


def test_a_conflict_on_the_other_machine_is_answered_409_with_its_files_and_changes_nothing(
    host_b, client, repo, settings
):
    first = run_on_b(client, "write shared.txt one\\nFIRST\\nthree", repo)
    second = run_on_b(client, "write shared.txt one\\nSECOND\\nthree", repo)
    assert post(client, "/v1/task/merge", {"task_id": str(first.public_id)})[0] == 200
    row = on_b(second, settings)
    before = (git(repo, "rev-parse", "main"), git(repo, "status", "--porcelain"), git(repo, "branch", "--list"))

    status, refused = post(client, "/v1/task/merge", {"task_id": str(second.public_id)})

    assert status == 409, refused
    assert (refused["code"], refused["files"]) == ("merge_conflict", ["shared.txt"])
    assert (git(repo, "rev-parse", "main"), git(repo, "status", "--porcelain"), git(repo, "branch", "--list")) == (
        before
    )
    assert "SECOND" in (Path(row.path) / "shared.txt").read_text(), "nothing of the task's work is lost"
    shown = client.get("/v1/task", {"task_id": str(second.public_id)}).json()["worktree"]
    assert shown["state"] == WorktreeState.LIVE and shown["requested"] is None
    assert (shown["refused"]["code"], shown["refused"]["files"], shown["refused"]["action"]) == (
        "merge_conflict",
        ["shared.txt"],
        "merge",
    )
    # The refused request was cleared: asking again is carried out again (and refused again), not "pending".
    assert post(client, "/v1/task/merge", {"task_id": str(second.public_id)}) == (status, refused)
    status, discarded = post(client, "/v1/task/discard", {"task_id": str(second.public_id)})
    assert status == 200 and discarded["worktree"]["state"] == WorktreeState.DISCARDED
    assert not Path(row.path).exists()


def test_with_no_live_supervisor_on_the_worktrees_machine_the_request_is_refused_at_once_and_not_kept(
    host_b, client, repo, settings
):
    task = run_on_b(client, "write shared.txt one\\nKEPT\\nthree", repo)
    row = on_b(task, settings)
    host_b.kill()

    asked = time.monotonic()
    status, refused = post(client, "/v1/task/merge", {"task_id": str(task.public_id)})
    took = time.monotonic() - asked

    assert status == 409 and refused["code"] == "worktree_elsewhere", refused
    assert took < worktree_actions.ROUTED_WAIT_S / 3, f"answered after {took:.1f} s: it waited for nobody"
    assert refused["host"] == socket.gethostname() and f"on host {socket.gethostname()}" in refused["error"]
    assert "This request was not kept" in refused["error"]
    row.refresh_from_db()
    assert (row.state, row.request, row.requested_at) == (WorktreeState.LIVE, "", None)
    assert Path(row.path).is_dir()


def test_of_two_requests_at_once_one_is_carried_out_and_the_other_told_one_is_pending(
    host_b, client, repo, settings, monkeypatch
):
    task = run_on_b(client, "write shared.txt one\\nONCE\\nthree", repo)
    on_b(task, settings)
    start = git(repo, "rev-parse", "main").strip()
    monkeypatch.setattr(worktree_actions, "ROUTED_WAIT_S", 0)  # answer at once: "still pending" (202)
    answers: list[tuple[int, dict]] = []
    host_b.proc.send_signal(signal.SIGSTOP)  # B alive but not sweeping: the first request stays pending
    body = {"task_id": str(task.public_id), "strategy": "squash"}
    try:
        at_once(lambda name: answers.append(post(client_named(name), "/v1/task/merge", body)), ["ann", "bob"])
        shown = client.get("/v1/task", {"task_id": str(task.public_id)}).json()["worktree"]
    finally:
        host_b.proc.send_signal(signal.SIGCONT)

    assert sorted(status for status, _ in answers) == [202, 409], answers
    pending = next(body for status, body in answers if status == 202)["worktree"]
    told = next(body for status, body in answers if status == 409)
    assert pending["state"] == WorktreeState.LIVE and pending["requested"]["action"] == "squash"
    assert told["code"] == "worktree_request_pending" and told["requested"]["at"] == pending["requested"]["at"]
    assert shown["requested"] == pending["requested"], "GET /v1/task shows the pending request"
    wait_until(lambda: Worktree.objects.get(pk=task.worktree_id).state == WorktreeState.MERGED, what="B's merge")
    assert git(repo, "rev-list", "--count", f"{start}..main").strip() == "1", "merged once"
    row = Worktree.objects.get(pk=task.worktree_id)
    assert row.request == "" and row.merged_commit == git(repo, "rev-parse", "main").strip()
    assert row.requested_by == pending["requested"]["by"]


def test_mcp_and_the_task_page_are_answered_through_the_same_routing(host_b, client, repo, settings, django_user_model):
    by_mcp = run_on_b(client, "write mcp.txt merged by MCP", repo)
    by_page = run_on_b(client, "write page.txt discarded on the page", repo)
    browser = Client()
    browser.force_login(django_user_model.objects.create_superuser("root", password="x"))

    reply = async_to_sync(tools.task_merge)(job_id=str(by_mcp.public_id))
    page = browser.post(f"/tasks/{by_page.public_id}/discard", follow=True)

    assert "STATUS: merged" in reply and "MERGED_INTO: main at " in reply, reply
    assert git(repo, "log", "-1", "--format=%an <%ae>", "main").strip() == HOST_B_AUTHOR, "B made the commit"
    assert "Discarded: its worktree and branch are removed." in page.content.decode()
    rows = [Worktree.objects.get(pk=task.worktree_id) for task in (by_mcp, by_page)]
    assert [(row.state, row.requested_by) for row in rows] == [
        (WorktreeState.MERGED, "mcp"),
        (WorktreeState.DISCARDED, "user:root"),
    ]


def client_named(name: str) -> Client:
    """A client of its own (for a thread: the test client keeps per-request state), with a token of that name."""
    return Client(HTTP_AUTHORIZATION=f"Bearer {create_token(name)[1]}")


def test_with_a_layer_across_processes_the_outcome_wakes_the_requester_at_once(host_b, client, repo, settings):
    if not doorbell.layer_spans_processes():
        pytest.skip("needs Redis between the processes: runs in the PostgreSQL + Redis rerun (the next test)")
    task = run_on_b(client, "write shared.txt one\\nRUNG\\nthree", repo)
    on_b(task, settings)
    settings.BRIDGE_POLL_S = worktree_actions.ROUTED_WAIT_S  # this process would not look again before its wait ends

    asked = time.monotonic()
    status, merged = post(client, "/v1/task/merge", {"task_id": str(task.public_id)})
    took = time.monotonic() - asked

    assert status == 200 and merged["worktree"]["state"] == WorktreeState.MERGED, merged
    assert took < worktree_actions.ROUTED_WAIT_S / 3, f"answered after {took:.1f} s: B's ring did not wake it"


def test_the_routing_holds_on_postgresql_with_redis_between_the_processes(monkeypatch):
    monkeypatch.setenv("REDIS_URL", redis_or_skip(REDIS_URL))
    url = postgres_or_skip(POSTGRES_URL.rsplit("/", 1)[0] + "/bridge_worktree_routing")
    run = rerun_on_postgres(url, __file__, "-k", "not postgresql", timeout=300)
    assert run.stdout.splitlines()[-1].startswith("6 passed"), run.stdout[-2000:]
