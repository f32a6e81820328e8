"""Readiness belongs to the supervisor (docs/architecture.md, "Several hosts"): each records which executors it can
run in its own environment, with its heartbeat; it claims only tasks of those; a task no live supervisor can run says
why and what to do at once, on every interface, by one rule; health reports readiness from the live supervisors; and
a `runbridge` takes over from a supervisor an MCP server started, which lets its running task end and exits.
"""

import asyncio
import itertools
import json
import os
import urllib.request

import pytest
from django.test import Client as DjangoClient
from django.utils import timezone
from mcp import Client

from jobs import actions
from jobs.agents import executors, registry
from jobs.core.vocabulary import Agent, Status
from jobs.mcp.server import get_server
from jobs.models import PermissionRequest, Task, Worker
from tests.support import SuperviseProcess, WebProcess, database_url, make_task, wait_for

pytestmark = pytest.mark.django_db(transaction=True)

NOT_LOGGED_IN = {"what": "Claude Code is not logged in (no credentials)", "fix": "run `claude` and type /login"}
READINESS = ["yes", "no", "unknown", None]  # None: the supervisor recorded nothing for that agent


def supervisor_that_records(readiness: dict[str, str | None], name: str = "sup") -> Worker:
    """A live supervisor's row (this process's, so it counts as alive) with the readiness it recorded."""
    worker = actions.register_worker(2, name=name)
    recorded = {
        agent: {"agent": agent, "ready": ready, "problems": [NOT_LOGGED_IN] if ready == "no" else []}
        for agent, ready in readiness.items()
        if ready is not None
    }
    Worker.objects.filter(pk=worker.pk).update(executors=recorded)
    worker.refresh_from_db()
    return worker


@pytest.mark.parametrize(("claude", "hermes"), list(itertools.product(READINESS, repeat=2)))
def test_a_supervisor_claims_only_tasks_of_the_agents_it_can_run(claude, hermes, work_root):
    worker = supervisor_that_records({"claude": claude, "hermes": hermes})
    queued = {agent: make_task(f"for {agent}", agent=agent, cwd=str(work_root)) for agent in Agent}

    claimed = set()
    while (task := actions.claim_next_task(worker)) is not None:
        claimed.add(task.agent)

    runnable = {agent for agent, ready in (("claude", claude), ("hermes", hermes)) if ready != "no"}
    assert claimed == runnable
    for agent, task in queued.items():
        task.refresh_from_db()
        if agent in runnable:
            continue
        assert task.status == Status.QUEUED
        assert task.wait_reason.startswith(f"no live supervisor that serves {work_root} can run {agent}: sup")
        assert f"{NOT_LOGGED_IN['what']}. Fix: {NOT_LOGGED_IN['fix']}." in task.wait_reason


def test_a_task_no_live_supervisor_can_run_says_why_at_once_on_rest_and_mcp_alike(work_root):
    supervisor_that_records({"claude": "no", "hermes": "yes"})
    rest = DjangoClient(HTTP_AUTHORIZATION=f"Bearer {actions.create_token('tests')[1]}")

    created = rest.post(
        "/v1/task/create", json.dumps({"prompt": "say rest", "cwd": str(work_root)}), content_type="application/json"
    ).json()

    async def claude_run() -> str:
        async with Client(get_server()) as client:
            result = await client.call_tool("claude_run", {"task": "say mcp", "cwd": str(work_root), "wait_s": 0})
        assert not result.is_error
        return "\n".join(c.text for c in result.content if c.type == "text")

    reply = asyncio.run(claude_run())
    reason = Task.objects.get(prompt="say mcp").wait_reason
    assert reason.startswith(f"no live supervisor that serves {work_root} can run claude: sup")
    assert f"Fix: {NOT_LOGGED_IN['fix']}" in reason
    assert created["wait_reason"] == reason
    assert f"WAITING: {reason}" in reply


def test_a_login_made_after_the_start_counts_from_the_next_heartbeat(work_root, monkeypatch, tmp_path, fake_agent):
    monkeypatch.delenv("ANTHROPIC_API_KEY")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # no credentials file either
    worker = actions.register_worker(2, name="sup")
    task = make_task("say hi", cwd=str(work_root))
    assert actions.claim_next_task(worker) is None
    assert "Claude Code is not logged in" in Task.objects.get(pk=task.pk).wait_reason

    monkeypatch.setenv("ANTHROPIC_API_KEY", "a key set since")
    actions.heartbeat(worker)

    assert actions.claim_next_task(worker).pk == task.pk


def test_health_reports_what_the_live_supervisors_can_run_not_what_the_web_process_can(work_root, fake_agent):
    assert executors.claude_status().ready == "yes", "this process has an account for Claude"
    supervisor_that_records({"claude": "no", "hermes": "yes"})

    body = DjangoClient().get("/health").json()

    recorded = {"claude", "hermes"}
    assert {e["agent"]: e["ready"] for e in body["executors"] if e["agent"] in recorded} == {
        "claude": "no",
        "hermes": "yes",
    }
    assert {e["agent"] for e in body["executors"]} == set(registry.agent_names())
    assert body["workers"][0]["executors"] == {"claude": "no", "hermes": "yes"} | {
        name: "unknown" for name in registry.PRESETS
    }


def test_health_says_how_this_process_sees_the_executors_while_no_supervisor_lives(work_root):
    body = DjangoClient().get("/health").json()

    assert body["supervisors"] == 0
    assert {e["agent"]: e["ready"] for e in body["executors"]} == {
        status.agent: status.ready for status in executors.executor_report()
    }


# --- `make run` after an MCP server started a supervisor ------------------------------------------------------------


@pytest.fixture
def bare_mcp_supervisor(settings, work_root, fake_agent, tmp_path):
    """A supervisor as `manage.py mcp` starts one, in Claude Desktop's bare environment: no account for Claude."""
    settings.DATA_DIR = tmp_path / "data"  # shared with the runbridge below: one data dir
    settings.DATA_DIR.mkdir()
    bare = {"ANTHROPIC_API_KEY": None, "HOME": str(tmp_path / "bare-home"), "BRIDGE_DATA_DIR": str(settings.DATA_DIR)}
    sup = SuperviseProcess(settings, "from-mcp", [work_root], extra_env=bare, args=("--started-by", "mcp"))
    yield sup
    sup.stop()


def test_make_run_takes_over_from_a_supervisor_the_mcp_server_started(settings, work_root, bare_mcp_supervisor):
    task = make_task("say hello", cwd=str(work_root))
    assert "from-mcp" in task.wait_reason and "Claude Code is not logged in" in task.wait_reason
    assert "it takes over from that supervisor" in task.wait_reason

    web = WebProcess(runbridge_env(settings, work_root), settings.DATA_DIR / "runbridge.log", supervisor=True)
    try:
        assert bare_mcp_supervisor.proc.wait(60) == 0, "the MCP server's supervisor handed over and exited"
        task = wait_for(task, timeout=60)
        health = json.load(urllib.request.urlopen(f"{web.url}/health"))
    finally:
        web.stop()
    assert (task.status, task.worker.started_by) == (Status.DONE, "runbridge")
    assert f"Taking over from the supervisor an MCP server started (pid {bare_mcp_supervisor.proc.pid})" in web.log()
    assert health["supervisors"] == 1


def test_a_handed_over_supervisor_lets_its_running_task_end_and_then_exits(settings, work_root, fake_agent, tmp_path):
    settings.DATA_DIR = tmp_path / "data"
    settings.DATA_DIR.mkdir()
    ready = {"BRIDGE_DATA_DIR": str(settings.DATA_DIR), "BRIDGE_DRAIN_S": "0"}
    from_mcp = SuperviseProcess(settings, "from-mcp", [work_root], extra_env=ready, args=("--started-by", "mcp"))
    web = None
    try:
        running = make_task('ask Bash {"command": "true"}', cwd=str(work_root))
        running = wait_for(running, lambda t: PermissionRequest.objects.pending().filter(task=t).exists())
        web = WebProcess(runbridge_env(settings, work_root), settings.DATA_DIR / "runbridge.log", supervisor=True)
        later = wait_for(make_task("say later", cwd=str(work_root)), timeout=60)
        assert from_mcp.proc.poll() is None, "it waits for its running task, with no deadline"

        actions.decide_permission(running, behavior="allow", by="tests")

        assert from_mcp.proc.wait(60) == 0
    except BaseException:
        print("".join(from_mcp.lines))
        raise
    finally:
        from_mcp.stop()
        if web is not None:
            web.stop()
    running.refresh_from_db()
    assert (running.status, running.worker.name) == (Status.DONE, "from-mcp")
    assert (later.status, later.worker.started_by) == (Status.DONE, "runbridge")


def test_a_supervisor_asked_to_hand_over_claims_nothing_more_whatever_wakes_it(work_root):
    worker = actions.register_worker(2)
    queued = make_task("say hi", cwd=str(work_root))
    Worker.objects.filter(pk=worker.pk).update(handover_requested_at=timezone.now())

    assert actions.claim_next_task(worker) is None  # as a ring for a new task would have it try, before its sweep

    queued.refresh_from_db()
    assert (queued.status, queued.worker_id) == (Status.QUEUED, None)


def runbridge_env(settings, work_root) -> dict[str, str]:
    env = {name: value for name, value in os.environ.items() if name not in ("REDIS_URL", "DJANGO_SECRET_KEY")}
    return env | {
        "DATABASE_URL": database_url(settings.DATABASES["default"]),
        "BRIDGE_DATA_DIR": str(settings.DATA_DIR),
        "BRIDGE_ALLOWED_ROOTS": str(work_root),
        "BRIDGE_CLAUDE_BIN": settings.BRIDGE_CLAUDE_BIN,
        "BRIDGE_SANDBOX": settings.BRIDGE_SANDBOX,
        "BRIDGE_POLL_S": "0.2",
        "BRIDGE_WEB_PROCESSES": "1",
        "PYTHONUNBUFFERED": "1",
    }
