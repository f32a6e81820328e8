"""The MCP server through the SDK's own client: `manage.py mcp` over stdio on the test database, and /mcp over
Streamable HTTP on a real `runbridge`. Jobs run on the fake stream-json agent (and the fake one-shot Hermes)."""

import asyncio
import contextlib
import json
import os
import re
import signal
import socket
import sqlite3
import subprocess
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import httpx2
import psutil
import pytest
from django.utils import timezone
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from jobs import actions, processes
from jobs.agents import hermes_skills
from jobs.core.vocabulary import Status
from jobs.mcp import full_log, reads
from jobs.models import Task, TaskEvent, Worker
from tests.bridge_server import BridgeServer
from tests.support import FAKES, REPO, TOOLS, has_event, make_task, wait_for

pytestmark = pytest.mark.django_db(transaction=True)
JOB_ID = re.compile(r"^JOB_ID: (\S+)$", re.M)
SESSION_ID = re.compile(r"^SESSION_ID: (\S+)$", re.M)


class Reply:
    def __init__(self, result: Any) -> None:
        self.text = "\n".join(c.text for c in result.content if c.type == "text")
        self.is_error = bool(result.is_error)

    @property
    def job_id(self) -> str:
        match = JOB_ID.search(self.text)
        assert match, f"no JOB_ID in:\n{self.text}"
        return match.group(1)

    @property
    def status(self) -> str:
        return self.text.splitlines()[0]

    def __repr__(self) -> str:
        return f"Reply(is_error={self.is_error}):\n{self.text}"


class Session:
    """A connected MCP client with a one-line call."""

    def __init__(self, client: Client) -> None:
        self.client = client

    async def call(self, tool: str, **arguments: Any) -> Reply:
        return Reply(await self.client.call_tool(tool, arguments))


def over_stdio(env: dict[str, str], steps: Callable[[Session], Awaitable[Any]]) -> Any:
    """Spawn `manage.py mcp`, run `steps` with a session, and let the process exit."""

    async def main() -> Any:
        params = StdioServerParameters(command=sys.executable, args=[str(REPO / "manage.py"), "mcp"], env=env, cwd=REPO)
        async with Client(params, read_timeout_seconds=60) as client:
            return await steps(Session(client))

    return asyncio.run(main())


def call_stdio(env: dict[str, str], tool: str, **arguments: Any) -> Reply:
    return over_stdio(env, lambda s: s.call(tool, **arguments))


def test_tools_schemas_and_instructions_over_stdio(mcp_env):
    async def steps(session: Session):
        return session.client.instructions, (await session.client.list_tools()).tools

    instructions, tools = over_stdio(mcp_env, steps)
    assert {t.name for t in tools} == TOOLS
    schemas = {t.name: t.input_schema for t in tools}
    assert schemas["hermes_run"]["required"] == ["task"]
    assert list(schemas["hermes_run"]["properties"]) == [
        "task",
        "cwd",
        "max_turns",
        "timeout_s",
        "wait_s",
        "skills",
        "toolsets",
        "target",
        "isolation",
        "base",
        "permission_timeout_s",
    ]
    assert list(schemas["claude_run"]["properties"])[-4:] == ["target", "isolation", "base", "permission_timeout_s"]
    assert schemas["hermes_run"]["properties"]["isolation"]["anyOf"][0]["enum"] == ["worktree", "none"]
    assert schemas["hermes_run"]["properties"]["wait_s"]["default"] == 5
    assert schemas["hermes_status"]["properties"]["wait_s"]["default"] == 30
    assert set(schemas["hermes_resume"]["required"]) == {"session_id", "task"}
    assert schemas["permission_decide"]["properties"]["behavior"]["enum"] == ["allow", "deny"]
    assert all(t.description for t in tools)
    assert "NOT a failure" in instructions and "hermes_read" in instructions and "orphaned" in instructions


def test_run_then_status_then_read_the_artifact(mcp_env, supervisor, work_root):
    script = 'say starting\nask Bash {"command": "echo made by the agent > out.txt"}\nsay the end'

    async def steps(session: Session):
        started = await session.call("claude_run", task=script, cwd=str(work_root), permission_mode="bypass", wait_s=0)
        done = await session.call("hermes_status", job_id=started.job_id, wait_s=60)
        read = await session.call("hermes_read", path=str(work_root / "out.txt"))
        listing = await session.call("hermes_read", path=str(work_root))
        jobs = await session.call("hermes_jobs")
        return started, done, read, listing, jobs

    started, done, read, listing, jobs = over_stdio(mcp_env, steps)
    assert not started.is_error and started.status in ("STATUS: queued", "STATUS: running"), started
    assert "This is NOT a failure and NOT a timeout" in started.text and "Do not re-run the task" in started.text
    assert f"CWD: {work_root}" in started.text and "TIMEOUT_S: 1800" in started.text
    assert done.status == "STATUS: ok", done
    assert "EXIT_CODE: 0" in done.text and done.text.endswith("--- CLAUDE OUTPUT ---\n| the end")
    assert SESSION_ID.search(done.text)
    assert "made by the agent" in read.text and not read.is_error
    assert "out.txt" in listing.text and listing.text.startswith(f"DIRECTORY: {work_root}")
    assert started.job_id in jobs.text and "ok" in jobs.text
    task = Task.objects.get(public_id=started.job_id)
    assert (task.source, task.agent, task.status) == ("mcp", "claude", Status.DONE)


def test_identical_task_joins_the_running_job_and_cancel_stops_it(mcp_env, supervisor, work_root):
    script = "say working\nsleep 30"

    async def steps(session: Session):
        first = await session.call("claude_run", task=script, cwd=str(work_root), wait_s=0)
        second = await session.call("claude_run", task=script, cwd=str(work_root), wait_s=0)
        other = await session.call("claude_run", task=script + "\nsay more", cwd=str(work_root), wait_s=0)
        cancelled = await session.call("task_cancel", job_id=first.job_id, reason="enough")
        final = await session.call("hermes_status", job_id=first.job_id, wait_s=30)
        await session.call("task_cancel", job_id=other.job_id)
        return first, second, other, cancelled, final

    first, second, other, cancelled, final = over_stdio(mcp_env, steps)
    assert second.job_id == first.job_id
    assert "identical task was already" in second.text and "no second worker" in second.text
    assert "identical task" not in first.text
    assert other.job_id != first.job_id
    assert Task.objects.filter(prompt=script).count() == 1
    assert not cancelled.is_error
    assert final.status == "STATUS: cancelled" and "ERROR: enough" in final.text, final


def test_replies_are_plain_text_with_usage_worker_and_no_structured_copy(mcp_env, supervisor, work_root):
    """Claude Code shows a tool's structuredContent when the tool declares an output schema: Bridge's tools declare
    none and send the reply as one text block, so clients see `STATUS: ok…`, not `{"result": "STATUS: ok…"}`."""
    env = {**mcp_env, "BRIDGE_TASK_TIMEOUT_S": "0"}  # no limit: the reply says `none`

    async def steps(session: Session):
        tools = (await session.client.list_tools()).tools
        raw = await session.client.call_tool(
            "claude_run", {"task": "say plain", "cwd": str(work_root), "permission_mode": "bypass", "wait_s": 60}
        )
        return tools, raw

    tools, raw = over_stdio(env, steps)
    assert [t.output_schema for t in tools] == [None] * len(tools)
    assert raw.structured_content is None and [c.type for c in raw.content] == ["text"]
    reply = Reply(raw)
    task = Task.objects.select_related("worker").get(public_id=reply.job_id)
    assert reply.status == "STATUS: ok", reply
    header = reply.text.split("\n--- ")[0].splitlines()
    assert "TIMEOUT_S: none" in header and task.timeout_s is None
    assert f"WORKER: {task.worker.name}" in header
    assert f"COST_USD: {task.cost_usd:.4f}" in header and task.cost_usd > 0
    assert "TOKENS: input=100 output=50 cache_creation=20 cache_read=30" in header
    assert not [line for line in header if line.startswith(("TARGET:", "WAITING:"))], "only when they apply"


def test_a_target_is_taken_and_checked_as_rest_does(mcp_env, supervisor, work_root):
    """claude_run and hermes_run take `target` through the same action as REST: the same check, the same refusal;
    a queued job that no live supervisor can serve says why on a WAITING line."""

    async def steps(session: Session):
        return {
            "bad": await session.call("claude_run", task="say hi", cwd=str(work_root), target="-rf"),
            "not text": await session.call("claude_run", task="say hi", cwd=str(work_root), target=5),
            "hermes bad": await session.call("hermes_run", task="say hi", cwd=str(work_root), target="--all"),
            "gpu": await session.call("claude_run", task="say gpu", cwd=str(work_root), target="gpu", wait_s=0),
        }

    replies = over_stdio(mcp_env, steps)
    assert replies["bad"].is_error and "target" in replies["bad"].text, replies["bad"]
    assert replies["not text"].is_error and "target" in replies["not text"].text, replies["not text"]
    assert replies["hermes bad"].is_error and "target" in replies["hermes bad"].text, replies["hermes bad"]
    gpu = replies["gpu"]
    assert not gpu.is_error and gpu.status == "STATUS: queued", gpu
    task = Task.objects.get(public_id=gpu.job_id)
    assert task.target == "gpu"
    assert "TARGET: gpu" in gpu.text
    assert f"WAITING: {task.wait_reason}" in gpu.text
    assert "no live supervisor has the name, host or label 'gpu'" in task.wait_reason
    assert Task.objects.count() == 1, "nothing was queued for the refused targets"
    actions.request_cancel(task, reason="test over")


def test_cwd_outside_the_roots_is_refused_and_nothing_starts(mcp_env, supervisor, work_root, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (work_root / "escape").symlink_to(outside)

    async def steps(session: Session):
        return [
            await session.call("claude_run", task="say hi", cwd=str(outside)),
            await session.call("claude_run", task="say hi", cwd=str(work_root / "escape")),
        ]

    for reply in over_stdio(mcp_env, steps):
        assert reply.is_error and reply.status == "STATUS: refused", reply
        assert str(work_root) in reply.text and "allowed roots" in reply.text
    assert Task.objects.count() == 0


def test_resume_latest_and_bad_session_ids(mcp_env, supervisor, work_root):
    other_cwd = work_root / "other"
    other_cwd.mkdir()

    async def steps(session: Session):
        first = await session.call("claude_run", task="say one", cwd=str(work_root), wait_s=60)
        resumed = await session.call(
            "claude_resume", session_id="latest", task="say two", cwd=str(work_root), wait_s=60
        )
        session_id = SESSION_ID.search(first.text).group(1)
        by_id = await session.call("claude_resume", session_id=session_id, task="say three", wait_s=60)
        unknown = await session.call("claude_resume", session_id="no-such-session", task="x", cwd=str(work_root))
        wrong_cwd = await session.call("claude_resume", session_id=session_id, task="x", cwd=str(other_cwd))
        no_latest = await session.call("claude_resume", session_id="latest", task="x", cwd=str(other_cwd))
        return first, resumed, by_id, unknown, wrong_cwd, no_latest

    first, resumed, by_id, unknown, wrong_cwd, no_latest = over_stdio(mcp_env, steps)
    assert first.status == resumed.status == by_id.status == "STATUS: ok", (first, resumed, by_id)
    session_id = SESSION_ID.search(first.text).group(1)
    assert SESSION_ID.search(resumed.text).group(1) == session_id
    assert Task.objects.get(public_id=resumed.job_id).resume_session_id == session_id
    assert Task.objects.get(public_id=by_id.job_id).cwd == str(work_root), "a resume defaults to its session's cwd"
    assert unknown.is_error and "knows no claude session 'no-such-session'" in unknown.text
    assert wrong_cwd.is_error and "can only be resumed where it started" in wrong_cwd.text
    assert no_latest.is_error and "no 'latest'" in no_latest.text
    assert Task.objects.count() == 3


def test_a_job_outlives_the_mcp_process_that_started_it(mcp_env, supervisor, work_root):
    started = call_stdio(mcp_env, "claude_run", task="sleep 0.5\nsay survived", cwd=str(work_root), wait_s=0)
    assert started.status in ("STATUS: queued", "STATUS: running"), started
    collected = call_stdio(mcp_env, "hermes_status", job_id=started.job_id, wait_s=60)
    assert collected.status == "STATUS: ok" and collected.text.endswith("survived"), collected


def test_without_a_supervisor_the_mcp_server_starts_one_that_outlives_it(mcp_env, work_root):
    """It also hands on the time zone the MCP server was started with, which Django replaced with UTC in the
    server's own process: the agents it runs keep the user's zone."""
    task = "sleep 1\nenv TZ\nsay hello from the detached one"
    mcp_env = {**mcp_env, "TZ": "Asia/Tokyo"}
    started = call_stdio(mcp_env, "claude_run", task=task, cwd=str(work_root), wait_s=0)
    match = re.search(r"started one \(pid (\d+), log (\S+)\)", started.text)
    assert match, started
    pid = int(match.group(1))
    try:
        assert os.getsid(pid) == pid, "the supervisor runs in a session of its own, detached from the MCP client"
        assert psutil.Process(pid).status() != psutil.STATUS_ZOMBIE, "it outlives the MCP process that started it"
        collected = call_stdio(mcp_env, "hermes_status", job_id=started.job_id, wait_s=60)
        assert collected.status == "STATUS: ok" and collected.text.endswith("hello from the detached one")
        said = TaskEvent.objects.filter(task__public_id=started.job_id, kind="text").order_by("seq")
        assert [event.data["text"] for event in said] == ["Asia/Tokyo", "hello from the detached one"]
        assert Worker.objects.filter(pid=pid, stopped_at__isnull=True).exists()
        health = call_stdio(mcp_env, "hermes_health")
        assert f"pid {pid}" in health.text
        assert Path(match.group(2)).parent == Path(mcp_env["BRIDGE_DATA_DIR"]).resolve()
    finally:
        os.kill(pid, signal.SIGTERM)
        try:
            psutil.Process(pid).wait(timeout=30)
        except psutil.NoSuchProcess:
            pass


def stop_started_supervisors() -> None:
    """SIGTERM the supervisors this test's MCP servers started, and wait for them."""
    for pid in Worker.objects.filter(started_by="mcp", stopped_at=None).values_list("pid", flat=True):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
        with contextlib.suppress(psutil.NoSuchProcess):
            psutil.Process(pid).wait(timeout=30)


def test_a_job_the_started_supervisor_cannot_run_waits_saying_why_and_the_fix(mcp_env, work_root, tmp_path):
    """As Claude Desktop may start it: no login anywhere Claude Code would look. The job is queued, as on REST (one
    rule), and the reply comes as soon as the supervisor it started has said it cannot run Claude."""
    home = tmp_path / "bare-home"
    home.mkdir()
    env = {name: value for name, value in mcp_env.items() if not name.startswith(("ANTHROPIC_", "CLAUDE_"))}
    env["HOME"] = str(home)

    try:
        asked = time.monotonic()
        waiting = call_stdio(env, "claude_run", task="say hi", cwd=str(work_root), wait_s=55)
        assert time.monotonic() - asked < 45, "it answered once the supervisor said why, not at the end of wait_s"
        assert waiting.status == "STATUS: queued", waiting
        reason = Task.objects.get(public_id=waiting.job_id).wait_reason
        assert f"WAITING: {reason}" in waiting.text
        assert reason.startswith(f"no live supervisor that serves {work_root} can run claude: ")
        assert "which an MCP server started in its client's environment" in reason and "/login" in reason
        assert "in a terminal where claude works: it takes over from that supervisor" in reason
        worker = Worker.objects.get(stopped_at__isnull=True)
        assert (worker.started_by, worker.executors["claude"]["ready"]) == ("mcp", "no")
    finally:
        stop_started_supervisors()


def test_a_hermes_job_where_hermes_is_not_installed_waits_saying_so(mcp_env, work_root):
    async def steps(session: Session):
        return [
            await session.call("hermes_run", task="say hi", cwd=str(work_root), wait_s=60),
            await session.call("hermes_health"),
        ]

    try:
        waiting, health = over_stdio(mcp_env, steps)
        assert waiting.status == "STATUS: queued", waiting
        assert "WAITING: no live supervisor that serves" in waiting.text and "can run hermes" in waiting.text
        assert "BRIDGE_HERMES_BIN" in waiting.text and "no-such-hermes" in waiting.text
        assert health.is_error and "HERMES_READY: no" in health.text and "no-such-hermes" in health.text
    finally:
        stop_started_supervisors()


def test_bad_input_gets_clear_errors(mcp_env, supervisor, work_root, tmp_path):
    (tmp_path / "secret.txt").write_text("not for planners")
    (work_root / "link").symlink_to(tmp_path / "secret.txt")
    (work_root / "big.txt").write_text("x" * 5000)
    (work_root / "blob.bin").write_bytes(b"\x89PNG\0\0\x01\x02" * 10)
    done = actions.create_task(actions.TaskSpec(prompt="say quick", cwd=str(work_root)))

    async def steps(session: Session):
        await session.call("hermes_status", job_id=str(done.public_id), wait_s=60)
        return {
            "unknown job": await session.call("hermes_status", job_id="7d0c1f9e-0000-4000-8000-000000000000"),
            "not a uuid": await session.call("hermes_status", job_id="job-1"),
            "negative wait": await session.call("hermes_status", job_id=str(done.public_id), wait_s=-1),
            "huge wait": await session.call("hermes_status", job_id=str(done.public_id), wait_s=1e9),
            "missing path": await session.call("hermes_read", path=str(work_root / "nope.txt")),
            "relative path": await session.call("hermes_read", path="big.txt"),
            "outside": await session.call("hermes_read", path=str(tmp_path / "secret.txt")),
            "symlink out": await session.call("hermes_read", path=str(work_root / "link")),
            "truncated": await session.call("hermes_read", path=str(work_root / "big.txt"), max_bytes=100),
            "over cap": await session.call("hermes_read", path=str(work_root / "big.txt"), max_bytes=10**12),
            "zero bytes": await session.call("hermes_read", path=str(work_root / "big.txt"), max_bytes=0),
            "binary": await session.call("hermes_read", path=str(work_root / "blob.bin")),
            "empty task": await session.call("claude_run", task="  ", cwd=str(work_root)),
            "cancel done": await session.call("task_cancel", job_id=str(done.public_id)),
            "decide nothing": await session.call("permission_decide", job_id=str(done.public_id), behavior="allow"),
        }

    replies = over_stdio(mcp_env, steps)
    expected_errors = {
        "unknown job": "unknown job_id '7d0c1f9e-0000-4000-8000-000000000000': hermes_jobs lists the jobs",
        "not a uuid": "unknown job_id 'job-1': hermes_jobs lists the jobs",
        "negative wait": "wait_s must be a number of seconds >= 0",
        "missing path": "does not exist",
        "relative path": "must be an absolute path",
        "outside": "outside the readable roots",
        "symlink out": "outside the readable roots",
        "zero bytes": "max_bytes must be at least 1",
        "empty task": "prompt is empty",
        "cancel done": "already ended",
        "decide nothing": "no pending permission request",
    }
    for name, words in expected_errors.items():
        reply = replies[name]
        assert reply.is_error and words in reply.text, (name, reply)
        assert reply.status in ("STATUS: error", "STATUS: refused"), (name, reply)
    codes = {"unknown job": "no_such_task", "not a uuid": "no_such_task", "cancel done": "task_ended"}
    codes |= {"decide nothing": "nothing_pending", "empty task": "invalid_input", "outside": "refused"}
    for name, code in codes.items():
        assert f"\nCODE: {code}" in replies[name].text, (name, replies[name])
    assert replies["outside"].status == replies["symlink out"].status == "STATUS: refused"
    assert "not for planners" not in replies["symlink out"].text
    huge = replies["huge wait"]
    assert not huge.is_error and "clamped to 150 s" in huge.text and huge.status == "STATUS: ok"
    assert "showed 100 of 5000 bytes" in replies["truncated"].text
    assert "x" * 100 in replies["truncated"].text and "x" * 101 not in replies["truncated"].text
    assert "clamped to 1048576" in replies["over cap"].text and "x" * 5000 in replies["over cap"].text
    binary = replies["binary"]
    assert not binary.is_error and "BINARY: yes" in binary.text and "PNG" not in binary.text.split("First bytes")[1]
    assert Task.objects.count() == 1


def test_an_unknown_job_id_points_to_hermes_jobs_in_every_tool_that_takes_one(mcp_env, work_root):
    """In the older bridge's words: the planner lists jobs with hermes_jobs; REST's list is no help over MCP."""
    long_id = "j" * 80
    calls = {
        "hermes_status": {"wait_s": 0},
        "task_cancel": {},
        "permissions_pending": {},
        "permission_decide": {"behavior": "allow"},
    }
    ids = {
        "7d0c1f9e-0000-4000-8000-000000000000": "'7d0c1f9e-0000-4000-8000-000000000000'",
        "job-1": "'job-1'",
        long_id: f"'{'j' * 36}… (80 characters)'",
    }

    async def steps(session: Session) -> dict[tuple[str, str], Reply]:
        return {
            (tool, job_id): await session.call(tool, job_id=job_id, **arguments)
            for tool, arguments in calls.items()
            for job_id in ids
        }

    for (tool, job_id), reply in over_stdio(mcp_env, steps).items():
        assert reply.is_error and reply.text == (
            "STATUS: error\n"
            f"ERROR: unknown job_id {ids[job_id]}: hermes_jobs lists the jobs (a job id is the JOB_ID line of a "
            "hermes_run, hermes_resume, claude_run or claude_resume reply)\n"
            "CODE: no_such_task"
        ), (tool, reply)
        assert "/v1/" not in reply.text


def test_a_running_jobs_output_comes_under_the_older_bridges_marker(mcp_env, supervisor, work_root):
    task = make_task("say working on it\nsleep 30", cwd=str(work_root))
    wait_for(task, has_event("text", text="working on it"))

    async def steps(session: Session) -> Reply:
        running = await session.call("hermes_status", job_id=str(task.public_id), wait_s=0)
        await session.call("task_cancel", job_id=str(task.public_id))
        return running

    running = over_stdio(mcp_env, steps)
    assert running.status == "STATUS: running", running
    assert running.text.splitlines()[-3:] == [
        f"Still running. This is NOT a failure and NOT a timeout. Collect the result with "
        f'hermes_status(job_id="{task.public_id}"). Do not re-run the task.',
        "--- OUTPUT SO FAR (tail) ---",
        "| working on it",
    ], running


def test_read_roots_widen_reading_and_read_anywhere_lifts_it(mcp_env, supervisor, tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "spec.md").write_text("the spec")
    elsewhere = tmp_path / "elsewhere.txt"
    elsewhere.write_text("anywhere")
    with_roots = {**mcp_env, "BRIDGE_READ_ROOTS": str(docs)}
    assert "the spec" in call_stdio(with_roots, "hermes_read", path=str(docs / "spec.md")).text
    refused = call_stdio(with_roots, "hermes_read", path=str(elsewhere))
    assert refused.is_error and str(docs) in refused.text, "the refusal names every readable root"
    anywhere = call_stdio({**mcp_env, "BRIDGE_READ_ANYWHERE": "1"}, "hermes_read", path=str(elsewhere))
    assert not anywhere.is_error and "anywhere" in anywhere.text
    secret = Path(mcp_env["BRIDGE_DATA_DIR"]) / "secret_key"
    private = call_stdio({**mcp_env, "BRIDGE_READ_ANYWHERE": "1"}, "hermes_read", path=str(secret))
    assert private.is_error and "Bridge's own data" in private.text
    assert secret.read_text().strip() not in private.text


def test_permissions_listed_and_decided_with_updated_input(mcp_env, supervisor, work_root):
    script = 'ask Bash {"command": "echo original"}\nask Bash {"command": "echo second"}'

    async def steps(session: Session):
        started = await session.call("claude_run", task=script, cwd=str(work_root), wait_s=30)
        pending = await session.call("permissions_pending", job_id=started.job_id)
        allowed = await session.call(
            "permission_decide",
            job_id=started.job_id,
            behavior="allow",
            updated_input={"command": "echo replaced"},
        )
        await session.call("hermes_status", job_id=started.job_id, wait_s=30)
        denied = await session.call("permission_decide", job_id=started.job_id, behavior="deny", message="no more")
        final = await session.call("hermes_status", job_id=started.job_id, wait_s=30)
        return started, pending, allowed, denied, final

    started, pending, allowed, denied, final = over_stdio(mcp_env, steps)
    assert "PENDING_PERMISSIONS: 1" in started.text, "run returns early when the agent asks"
    assert "TOOL: Bash" in pending.text and "echo original" in pending.text
    assert allowed.text.startswith("DECISION: allowed") and denied.text.startswith("DECISION: denied")
    assert final.status == "STATUS: ok", final
    task = Task.objects.get(public_id=started.job_id)
    results = [e.data for e in actions.events_since(task) if e.kind == "tool_result"]
    assert "replaced" in str(results[0]) and "no more" in str(results[1])
    assert set(task.permission_requests.values_list("decided_via", flat=True)) == {"mcp"}


def fake_hermes_install(root: Path, version: str = "0.19.7") -> Path:
    """A venv-shaped folder with an executable Python console script `hermes` (leaving a `ran` file when run), as
    pip writes one, and hermes-agent's package metadata."""
    executable = root / "bin" / "hermes"
    executable.parent.mkdir(parents=True)
    executable.write_text(
        f"#!{sys.executable}\nimport pathlib, runpy\npathlib.Path({str(root / 'ran')!r}).touch()\n"
        f"runpy.run_path({str(FAKES / 'fake_hermes.py')!r}, run_name='__main__')\n"
    )
    executable.chmod(0o755)
    dist = root / "lib" / "python3.11" / "site-packages" / f"hermes_agent-{version}.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: hermes-agent\nVersion: {version}\n")
    return executable


def test_health_reads_the_version_from_package_metadata(mcp_env, supervisor, tmp_path):
    executable = fake_hermes_install(tmp_path / "hermes-venv")
    reply = call_stdio({**mcp_env, "BRIDGE_HERMES_BIN": str(executable)}, "hermes_health")
    assert not reply.is_error, reply
    assert not (tmp_path / "hermes-venv" / "ran").exists(), "health must not run Hermes"
    assert f"HERMES: {executable}" in reply.text and "HERMES_VERSION: 0.19.7" in reply.text
    assert "HERMES_MODE: auto (no ACP extra: one-shot only)" in reply.text
    assert "DATABASE: ok" in reply.text and "SUPERVISOR: alive" in reply.text and "JOBS: queued=0" in reply.text


def write_skill(home: Path, category: str, name: str, description: str, tags: list[str]) -> None:
    folder = home / "skills" / category / name
    folder.mkdir(parents=True)
    (folder / "SKILL.md").write_text(
        f"---\nname: {name}\ndescription: {description}\nversion: 1.0.0\n"
        f"metadata:\n  hermes:\n    tags: [{', '.join(tags)}]\n---\n# {name}\nBody text.\n"
    )


def test_capabilities_read_the_skill_library_from_disk(mcp_env, supervisor):
    home = Path(mcp_env["HERMES_HOME"])
    write_skill(home, "devops", "docker-compose", "Run multi-container apps with Docker Compose", ["docker"])
    write_skill(home, "devops", "kubernetes", "Deploy to a Kubernetes cluster", ["k8s", "docker"])
    write_skill(home, "research", "arxiv", "Search and summarise arXiv papers", ["papers"])
    (home / "skills" / "devops" / "DESCRIPTION.md").write_text("Building, shipping and running software.\n")

    async def steps(session: Session):
        return [
            await session.call("hermes_capabilities"),
            await session.call("hermes_capabilities", query="docker"),
            await session.call("hermes_capabilities", category="research"),
            await session.call("hermes_capabilities", query="docker", limit=1),
            await session.call("hermes_capabilities", limit=0),
        ]

    summary, docker, research, limited, bad = over_stdio(mcp_env, steps)
    assert "CATEGORIES: 2  SKILLS: 3" in summary.text
    assert "devops (2 skills): Building, shipping and running software." in summary.text
    assert "research (1 skills)" in summary.text and "arxiv" not in summary.text
    assert "MATCHES: 2" in docker.text and "docker-compose (devops)" in docker.text and "kubernetes" in docker.text
    assert "MATCHES: 1" in research.text and "arxiv (research): Search and summarise arXiv papers" in research.text
    assert "MATCHES: 2 (showing 1)" in limited.text and len(limited.text.splitlines()) == 3
    assert bad.is_error and "limit must be at least 1" in bad.text


def test_hermes_run_status_and_latest_resume_with_the_fake_hermes(mcp_env, supervisor, work_root, tmp_path, settings):
    settings.BRIDGE_HERMES_BIN = str(fake_hermes_install(tmp_path / "hv"))
    settings.BRIDGE_HERMES_MODE = "oneshot"
    env = {**mcp_env, "BRIDGE_HERMES_BIN": settings.BRIDGE_HERMES_BIN, "BRIDGE_HERMES_MODE": "oneshot"}

    async def steps(session: Session):
        first = await session.call("hermes_run", task="write out.txt made\nsay hermes done", cwd=str(work_root))
        first = await session.call("hermes_status", job_id=first.job_id, wait_s=60)
        again = await session.call("hermes_resume", session_id="latest", task="say again", cwd=str(work_root))
        again = await session.call("hermes_status", job_id=again.job_id, wait_s=60)
        return first, again

    first, again = over_stdio(env, steps)
    assert first.status == "STATUS: ok" and "--- HERMES OUTPUT ---" in first.text and "hermes done" in first.text
    assert (work_root / "out.txt").read_text() == "made\n"
    assert SESSION_ID.search(again.text).group(1) == SESSION_ID.search(first.text).group(1)


# --- Streamable HTTP on a real runbridge ----------------------------------------------------------------


def over_http(bridge: BridgeServer, token: str, steps: Callable[[Session], Awaitable[Any]]) -> Any:
    async def main() -> Any:
        headers = {"Authorization": f"Bearer {token}"}
        async with (
            httpx2.AsyncClient(headers=headers, timeout=60, trust_env=False) as http,
            Client(streamable_http_client(bridge.url + "/mcp", http_client=http)) as client,
        ):
            return await steps(Session(client))

    return asyncio.run(main())


def test_http_needs_a_token(bridge):
    """In the words REST uses: which of missing / unknown it was, and the command that makes a token."""
    for headers, reason in (
        ({}, "missing"),
        ({"Authorization": "Bearer brg_wrong-token-that-is-long-enough"}, "no_such_token"),
    ):
        response = httpx.post(
            bridge.url + "/mcp",
            json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
            headers={"Accept": "application/json, text/event-stream", **headers},
            trust_env=False,
            timeout=30,
        )
        body = response.json()
        assert response.status_code == 401 and body["reason"] == reason and "token create" in body["error"], body
    rebound = httpx.post(
        bridge.url + "/mcp",
        json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
        headers={"Accept": "application/json, text/event-stream", "Authorization": f"Bearer {bridge.token}"}
        | {"Host": "evil.example"},
        trust_env=False,
        timeout=30,  # the first request with a valid token loads the MCP SDK: seconds on a busy machine
    )
    assert rebound.status_code == 421, "a Host outside ALLOWED_HOSTS is refused (DNS rebinding)"
    with pytest.raises(Exception):  # noqa: B017 - the SDK client's own failure, whatever its class
        over_http(bridge, "brg_wrong-token-that-is-long-enough", lambda s: s.client.list_tools())
    assert httpx.get(bridge.url + "/health", trust_env=False, timeout=30).status_code == 200, (
        "Django still answers the rest"
    )


def test_http_tools_and_the_run_status_read_flow(bridge):
    script = 'ask Bash {"command": "echo over http > http.txt"}\nsay served'

    async def steps(session: Session):
        tools = (await session.client.list_tools()).tools
        started = await session.call(
            "claude_run", task=script, cwd=str(bridge.work), permission_mode="bypass", wait_s=0
        )
        done = await session.call("hermes_status", job_id=started.job_id, wait_s=60)
        read = await session.call("hermes_read", path=str(bridge.work / "http.txt"))
        refused = await session.call("claude_run", task="say hi", cwd="/")
        return tools, started, done, read, refused

    tools, started, done, read, refused = over_http(bridge, bridge.token, steps)
    assert {t.name for t in tools} == TOOLS
    assert started.status in ("STATUS: queued", "STATUS: running") and "started one" not in started.text
    assert done.status == "STATUS: ok" and done.text.endswith("served"), done
    assert "over http" in read.text
    assert refused.is_error and refused.status == "STATUS: refused"
    assert bridge.task(started.job_id)["source"] == "mcp", "the REST API sees the same job"


# --- latency ---------------------------------------------------------------------------------------------


def test_capabilities_fall_back_to_the_index_hermes_writes(tmp_path):
    snapshot = {
        "version": 1,
        "skills": [
            {"skill_name": "arxiv", "category": "research", "frontmatter_name": "arxiv", "description": "Find papers"},
            {"skill_name": "gif", "category": "media/images", "frontmatter_name": "gif-maker", "description": "GIFs"},
        ],
        "category_descriptions": {"research": "Reading the literature."},
    }
    (tmp_path / ".skills_prompt_snapshot.json").write_text(json.dumps(snapshot))
    library = hermes_skills.read_library(tmp_path)
    assert library.categories == {"research": "Reading the literature.", "media/images": ""}
    assert [(s.name, s.category) for s in hermes_skills.search(library, "gif")] == [("gif-maker", "media/images")]
    missing = tmp_path / "missing"
    assert hermes_skills.read_library(missing).problems == [f"no skill library at {missing / 'skills'}"]


# --- orphans seen when a job is read -----------------------------------------------------------------------


def test_a_killed_supervisors_job_is_orphaned_by_the_very_next_read(mcp_env, work_root):
    """No other supervisor runs here and the MCP server starts none for reads: only the read can settle it."""
    proc = subprocess.Popen(
        [sys.executable, str(REPO / "manage.py"), "supervise"], env=mcp_env, cwd=REPO, stderr=subprocess.DEVNULL
    )
    try:
        task = wait_for(make_task("say before the crash\nsleep 60"), has_event("text", text="before the crash"))
        worker = Task.objects.select_related("worker").get(pk=task.pk).worker
        proc.kill()
        proc.wait()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(task.pid, signal.SIGKILL)  # the agent too, whatever the parent-death signal did
    finally:
        proc.kill()
    assert heartbeat_alone_calls_alive(Worker.objects.get(pk=worker.pk)), (
        "its heartbeat is still fresh: heartbeat age alone calls it alive"
    )

    async def steps(session: Session):
        status = await session.call("hermes_status", job_id=str(task.public_id), wait_s=60)
        return status, await session.call("hermes_health"), await session.call("hermes_jobs")

    status, health, jobs = over_stdio(mcp_env, steps)
    assert status.status == "STATUS: orphaned", status
    assert f"ERROR: its supervisor ({worker.name}, pid {worker.pid}) stopped while the task was running" in status.text
    assert "NOT a failure" not in status.text and "before the crash" in status.text
    assert "SUPERVISOR: none alive" in health.text and "running=0, ok=0, error=0, cancelled=0" in health.text
    assert "orphaned=1" in health.text and "orphaned=1" in jobs.text
    task.refresh_from_db()
    assert task.status == Status.ORPHANED and actions.events_since(task)[-1].data["status"] == "orphaned"


def running_task(worker: Worker, pid: int | None = None, create_time: float | None = None) -> Task:
    task = make_task("say hi")
    Task.objects.filter(pk=task.pk).update(
        status=Status.RUNNING, worker=worker, pid=pid, process_create_time=create_time, started_at=timezone.now()
    )
    return Task.objects.get(pk=task.pk)


def a_worker(name: str, *, host: str | None = None, create_time: float = 0.0, heartbeat_age_s: float = 0) -> Worker:
    """A supervisor row: on this host with this process's pid and `create_time` (0: not this process, so dead)."""
    return Worker.objects.create(
        name=name,
        host=host or socket.gethostname(),
        pid=os.getpid(),
        process_create_time=create_time,
        capacity=1,
        heartbeat_at=timezone.now() - timedelta(seconds=heartbeat_age_s),
    )


def heartbeat_alone_calls_alive(worker: Worker) -> bool:
    """What a peer on another host concludes from the row alone (Worker.may_be_alive, no process to ask)."""
    return worker.may_be_alive(timezone.now(), actions.WORKER_STALE_AFTER, "another host", timedelta(0))


def test_reads_settle_orphans_and_kill_an_agent_that_outlived_its_supervisor(transactional_db, work_root):
    agent = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        dead = a_worker("here:dead")
        task = running_task(dead, agent.pid, processes.process_identity(agent.pid))
        assert heartbeat_alone_calls_alive(dead) and dead not in actions.live_supervisors()
        read = actions.get_task(str(task.public_id))
        assert read.status == Status.ORPHANED
        assert read.error.startswith(f"its supervisor (here:dead, pid {os.getpid()}) stopped while the task was")
        assert "the agent process was still alive and has been killed" in read.error
        assert agent.wait(timeout=10) == -signal.SIGKILL
    finally:
        agent.kill()
        agent.wait()

    alive = a_worker("here:alive", create_time=processes.process_identity(os.getpid()), heartbeat_age_s=3600)
    far_fresh = a_worker("far:fresh", host="elsewhere.example")
    far_stale = a_worker("far:stale", host="elsewhere.example", heartbeat_age_s=60)
    tasks = [running_task(w) for w in (alive, far_fresh, far_stale, a_worker("here:dead2"))]
    waiting_on = running_task(a_worker("here:dead3"))
    assert actions.settle_running_tasks() == 3
    statuses = [Task.objects.get(pk=t.pk).status for t in tasks]
    assert statuses == [Status.RUNNING, Status.RUNNING, Status.ORPHANED, Status.ORPHANED]
    live = {w.name for w in actions.live_supervisors()}
    assert live == {"far:fresh", "here:alive"}, "same host: the process decides, not a heartbeat an hour old"
    assert reads.needs_attention(waiting_on.pk) is True, "a waiting hermes_status sees the orphan too"
    assert Task.objects.get(pk=waiting_on.pk).status == Status.ORPHANED


# --- FULL_LOG ------------------------------------------------------------------------------------------------

FULL_LOG = re.compile(r"^FULL_LOG: (\S+)$", re.M)
LOGGED_SEQ = re.compile(r"^\[\d\d:\d\d:\d\d #(\d+)\] ", re.M)


def test_full_log_is_the_whole_transcript_appended_once_and_only_it_is_readable(mcp_env, supervisor, work_root):
    script = 'say first words\nask Bash {"command": "echo made > made.txt"}\nsay last words'
    data_dir = Path(mcp_env["BRIDGE_DATA_DIR"]).resolve()

    async def steps(session: Session):
        asked = await session.call("claude_run", task=script, cwd=str(work_root), wait_s=60)
        early = await session.call("hermes_read", path=FULL_LOG.search(asked.text).group(1))
        await session.call("permission_decide", job_id=asked.job_id, behavior="allow")
        done = await session.call("hermes_status", job_id=asked.job_id, wait_s=60)
        again = await session.call("hermes_status", job_id=asked.job_id, wait_s=0)
        path = FULL_LOG.search(done.text).group(1)
        link = data_dir / "logs" / f"{uuid.uuid4()}.log"
        link.symlink_to(data_dir / "secret_key")
        return (
            asked,
            early,
            done,
            again,
            {
                "log": await session.call("hermes_read", path=path),
                "folder": await session.call("hermes_read", path=str(data_dir / "logs")),
                "secret": await session.call("hermes_read", path=str(data_dir / "secret_key")),
                "linked": await session.call("hermes_read", path=str(link)),
                "no log yet": await session.call("hermes_read", path=str(data_dir / "logs" / f"{uuid.uuid4()}.log")),
            },
        )

    asked, early, done, again, read = over_stdio(mcp_env, steps)
    assert "PENDING_PERMISSIONS: 1" in asked.text and done.status == "STATUS: ok", done
    path = Path(FULL_LOG.search(done.text).group(1))
    assert path == data_dir / "logs" / f"{done.job_id}.log" and FULL_LOG.search(again.text).group(1) == str(path)
    assert "permission_request: request" in early.text and "text\n| last words" not in early.text
    log_text = path.read_text()
    task = Task.objects.get(public_id=done.job_id)
    seqs = [int(n) for n in LOGGED_SEQ.findall(log_text)]
    assert seqs == list(range(1, task.last_seq + 1)), "every event once, in order, across three refreshes"
    for words in ("first words", "tool_use: Bash", "permission_decision: request", "allowed by mcp", "last words"):
        assert words in log_text, words
    assert f"TASK:\n{script}" in log_text and "status: done" in log_text
    assert not read["log"].is_error and "last words" in read["log"].text
    assert f"{done.job_id}.log" in read["folder"].text
    assert path.stat().st_mode & 0o777 == 0o600 and path.parent.stat().st_mode & 0o777 == 0o700
    secret = (data_dir / "secret_key").read_text().strip()
    for name in ("secret", "linked"):
        assert read[name].status == "STATUS: refused" and secret not in read[name].text, read[name]
    assert read["no log yet"].is_error and "no full log for job" in read["no log yet"].text


def test_full_log_renders_streamed_text_once_under_one_heading():
    def event(seq: int, kind: str, **data: Any) -> TaskEvent:
        return TaskEvent(seq=seq, kind=kind, data=data, created_at=timezone.now())

    events = [event(1, "text_delta", text="Hel"), event(2, "text_delta", text="lo")]
    text, run, at_line_start = full_log.render(events, "-", True)
    assert run == "text_delta" and not at_line_start and text.endswith("text_delta\nHello")
    more = [event(3, "text_delta", text=" there"), event(4, "context_usage", used=1)]
    text, run, at_line_start = full_log.render(more, run, at_line_start)
    assert text.startswith(" there\n\n[") and text.endswith('context_usage: {"used": 1}\n')
    last = [event(5, "text", text="Hello there"), event(6, "text", text="Next"), event(7, "output", text="a")]
    text, run, at_line_start = full_log.render(last, run, at_line_start)
    assert "Hello there" not in text and "] text\nNext\n" in text and text.endswith("output\na\n")
    assert (run, at_line_start) == ("output", True)


# --- resuming sessions Bridge never ran -------------------------------------------------------------------


def hermes_store(home: Path, *session_ids: str) -> None:
    """A Hermes session store as 0.19 keeps it ($HERMES_HOME/state.db, table `sessions`), in WAL mode."""
    home.mkdir(parents=True, exist_ok=True)
    with contextlib.closing(sqlite3.connect(home / "state.db")) as db:
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("CREATE TABLE sessions (id TEXT PRIMARY KEY, source TEXT NOT NULL, started_at REAL NOT NULL)")
        db.executemany("INSERT INTO sessions VALUES (?, 'cli', 0)", [(s,) for s in session_ids])
        db.commit()


def test_hermes_resume_continues_sessions_started_elsewhere(mcp_env, supervisor, work_root, tmp_path, settings):
    settings.BRIDGE_HERMES_BIN = str(fake_hermes_install(tmp_path / "hv"))
    settings.BRIDGE_HERMES_MODE = "oneshot"
    by_hand = "20260101_093000_a1b2c3"
    hermes_store(Path(mcp_env["HERMES_HOME"]), by_hand)
    elsewhere = work_root / "elsewhere"
    elsewhere.mkdir()
    env = {**mcp_env, "BRIDGE_HERMES_BIN": settings.BRIDGE_HERMES_BIN, "BRIDGE_HERMES_MODE": "oneshot"}
    no_store = {**env, "HERMES_HOME": str(tmp_path / "no-hermes-home")}

    async def steps(session: Session):
        resumed = await session.call("hermes_resume", session_id=by_hand, task="say resumed", cwd=str(elsewhere))
        resumed = await session.call("hermes_status", job_id=resumed.job_id, wait_s=60)
        typo = await session.call("hermes_resume", session_id=by_hand[:-1], task="say x", cwd=str(elsewhere))
        return resumed, typo

    async def without_a_store(session: Session):
        unchecked = await session.call("hermes_resume", session_id="20250101_000000_ffffff", task="say y", wait_s=60)
        return unchecked, await session.call("hermes_resume", session_id="--yolo", task="say x")

    resumed, typo = over_stdio(env, steps)
    unchecked, flag = over_stdio(no_store, without_a_store)
    assert resumed.status == "STATUS: ok" and "resumed" in resumed.text, resumed
    assert SESSION_ID.search(resumed.text).group(1) == by_hand and f"CWD: {elsewhere}" in resumed.text
    task = Task.objects.get(public_id=resumed.job_id)
    assert (task.resume_session_id, task.cwd, task.session.session_id) == (by_hand, str(elsewhere), by_hand)
    assert typo.is_error and "\nCODE: no_such_session" in typo.text
    assert f"neither does Hermes' session store {Path(mcp_env['HERMES_HOME']) / 'state.db'}" in typo.text
    assert flag.is_error and "not starting with '-'" in flag.text
    assert not unchecked.is_error and "SESSION_ID: 20250101_000000_ffffff" in unchecked.text, unchecked
    assert Task.objects.count() == 2


def hermes_terminal_store(home: Path, sessions: list[tuple[str, Path | None, float, list[float]]]) -> Path:
    """Hermes 0.19's store as far as "latest" and the launcher read it: each session's id, the cwd it recorded (only
    sessions started at a terminal, source "cli", record one), when it started, and when its messages were written."""
    home.mkdir(parents=True, exist_ok=True)
    with contextlib.closing(sqlite3.connect(home / "state.db")) as db:
        db.execute("PRAGMA journal_mode=WAL")
        db.execute(
            "CREATE TABLE sessions (id TEXT PRIMARY KEY, source TEXT NOT NULL, cwd TEXT, started_at REAL NOT NULL)"
        )
        db.execute("CREATE TABLE messages (id INTEGER PRIMARY KEY, session_id TEXT NOT NULL, timestamp REAL NOT NULL)")
        for session_id, cwd, started_at, message_times in sessions:
            source = "cli" if cwd else "tool"
            db.execute("INSERT INTO sessions VALUES (?, ?, ?, ?)", (session_id, source, cwd and str(cwd), started_at))
            db.executemany(
                "INSERT INTO messages (session_id, timestamp) VALUES (?, ?)", [(session_id, t) for t in message_times]
            )
        db.commit()
    return home / "state.db"


@pytest.fixture
def oneshot_hermes(mcp_env, tmp_path, settings, monkeypatch) -> dict[str, str]:
    """The fake one-shot Hermes for `manage.py mcp` and for the test's supervisor, both with mcp_env's HERMES_HOME
    (where a model provider is chosen, so both count Hermes as ready)."""
    settings.BRIDGE_HERMES_BIN = str(fake_hermes_install(tmp_path / "hv"))
    settings.BRIDGE_HERMES_MODE = "oneshot"
    settings.BRIDGE_HERMES_HOME = Path(mcp_env["HERMES_HOME"])
    settings.BRIDGE_HERMES_HOME.mkdir(parents=True, exist_ok=True)
    (settings.BRIDGE_HERMES_HOME / "config.yaml").write_text("model:\n  provider: custom\n")
    monkeypatch.setenv("HERMES_HOME", mcp_env["HERMES_HOME"])  # the launcher, in the supervisor's children
    return {**mcp_env, "BRIDGE_HERMES_BIN": settings.BRIDGE_HERMES_BIN, "BRIDGE_HERMES_MODE": "oneshot"}


def test_hermes_latest_where_bridge_ran_none_continues_hermes_own_newest_session_there(
    oneshot_hermes, supervisor, work_root
):
    project, elsewhere = work_root / "project", work_root / "elsewhere"
    project.mkdir()
    elsewhere.mkdir()
    hermes_terminal_store(
        Path(oneshot_hermes["HERMES_HOME"]),
        [
            ("20260101_090000_aaaaaa", project, 100.0, [110.0, 400.0]),  # started first, talked to last: the newest
            ("20260101_100000_bbbbbb", project, 200.0, [210.0]),
            ("20260101_110000_cccccc", elsewhere, 300.0, [500.0]),  # newer, in another cwd
            ("20260101_120000_dddddd", None, 600.0, [700.0]),  # newest of all, but recorded no cwd (not a terminal's)
        ],
    )

    async def steps(session: Session) -> tuple[Reply, Reply]:
        resumed = await session.call("hermes_resume", session_id="latest", task="cmdline\nsay again", cwd=str(project))
        return resumed, await session.call("hermes_status", job_id=resumed.job_id, wait_s=60)

    resumed, done = over_stdio(oneshot_hermes, steps)
    assert (
        f"NOTE: Bridge has run no hermes session in {project}, so 'latest' is Hermes' own newest session recorded "
        "there: 20260101_090000_aaaaaa."
    ) in resumed.text.splitlines(), resumed
    assert done.status == "STATUS: ok" and SESSION_ID.search(done.text).group(1) == "20260101_090000_aaaaaa", done
    argv = json.loads(re.search(r"^\| cmdline: (.*)$", done.text, re.M).group(1))
    assert argv[argv.index("--resume") + 1] == "20260101_090000_aaaaaa"
    task = Task.objects.get(public_id=resumed.job_id)
    assert (task.resume_session_id, task.cwd) == ("20260101_090000_aaaaaa", str(project))


def test_hermes_latest_prefers_the_session_bridge_ran_in_cwd(oneshot_hermes, supervisor, work_root):
    hermes_terminal_store(Path(oneshot_hermes["HERMES_HOME"]), [("20260101_090000_aaaaaa", work_root, 1e12, [1e12])])

    async def steps(session: Session) -> tuple[Reply, Reply]:
        first = await session.call("hermes_run", task="say first", cwd=str(work_root), wait_s=60)
        again = await session.call("hermes_resume", session_id="latest", task="say again", cwd=str(work_root))
        return first, await session.call("hermes_status", job_id=again.job_id, wait_s=60)

    first, again = over_stdio(oneshot_hermes, steps)
    assert first.status == again.status == "STATUS: ok", (first, again)
    assert SESSION_ID.search(again.text).group(1) == SESSION_ID.search(first.text).group(1) != "20260101_090000_aaaaaa"
    assert "Hermes' own newest session" not in again.text


def test_hermes_latest_with_no_session_in_cwd_anywhere_says_so_and_starts_nothing(
    oneshot_hermes, supervisor, work_root, tmp_path
):
    elsewhere = work_root / "elsewhere"
    elsewhere.mkdir()
    store = hermes_terminal_store(Path(oneshot_hermes["HERMES_HOME"]), [("20260101_110000_cccccc", elsewhere, 1, [2])])
    missing_home = tmp_path / "no-hermes-home"

    async def steps(session: Session) -> Reply:
        return await session.call("hermes_resume", session_id="latest", task="say x", cwd=str(work_root))

    none_there = over_stdio(oneshot_hermes, steps)
    no_store = over_stdio({**oneshot_hermes, "HERMES_HOME": str(missing_home)}, steps)
    tail = "so there is no 'latest' to resume: start one, or pass a session id (`hermes sessions list` "
    assert none_there.text == (
        "STATUS: error\n"
        f"ERROR: Bridge has run no hermes session in {work_root} yet, and Hermes' session store {store} has none "
        f"recorded there either, {tail}shows Hermes' own)\n"
        "CODE: no_such_session"
    ), none_there
    assert no_store.text == (
        "STATUS: error\n"
        f"ERROR: Bridge has run no hermes session in {work_root} yet, and there is no Hermes session store to look in "
        f"here ({missing_home / 'state.db'} is missing or unreadable), {tail}shows Hermes' own)\n"
        "CODE: no_such_session"
    ), no_store
    assert none_there.is_error and no_store.is_error and not Task.objects.exists()


def test_a_hermes_session_recorded_in_another_directory_is_not_resumed_in_this_one(
    oneshot_hermes, supervisor, work_root, tmp_path
):
    """Hermes would move the resumed session back into the directory it recorded, maybe outside the roots: the
    launcher refuses before Hermes starts (the fake Hermes, like the real one, would otherwise run)."""
    outside = (tmp_path / "outside").resolve()
    outside.mkdir()
    hermes_terminal_store(Path(oneshot_hermes["HERMES_HOME"]), [("20260101_090000_aaaaaa", outside, 1, [2])])

    async def steps(session: Session) -> Reply:
        resumed = await session.call(
            "hermes_resume", session_id="20260101_090000_aaaaaa", task="write here.txt x", cwd=str(work_root)
        )
        return await session.call("hermes_status", job_id=resumed.job_id, wait_s=60)

    done = over_stdio(oneshot_hermes, steps)
    assert done.status == "STATUS: error" and "EXIT_CODE: 1" in done.text.splitlines(), done
    assert (
        "ERROR: hermes exited with code 1: hermes_launch.py: session 20260101_090000_aaaaaa was started in "
        f"{outside}, and Hermes continues a session only there, not in this task's cwd {work_root}: resume it with "
        "that cwd (if it is inside Bridge's allowed roots), or start a new session here"
    ) in done.text.splitlines(), done
    assert not (work_root / "here.txt").exists() and not (outside / "here.txt").exists()


def test_arguments_a_tool_does_not_take_are_refused_as_rest_refuses_unknown_fields(mcp_env, work_root):
    """One rule on every interface: a misspelt or unknown argument is an error naming it, never silently ignored."""

    async def steps(session: Session) -> dict[str, Reply]:
        return {
            "unknown": await session.call("hermes_jobs", limit=5, colour="blue"),
            "misspelt": await session.call("claude_run", task="say hi", cwd=str(work_root), max_turn=3),
            "bool as number": await session.call("claude_run", task="say hi", cwd=str(work_root), max_turns=True),
        }

    replies = over_stdio(mcp_env, steps)
    for name, word in (("unknown", "colour"), ("misspelt", "max_turn"), ("bool as number", "max_turns")):
        assert replies[name].is_error and word in replies[name].text, (name, replies[name])
    assert not Task.objects.exists(), "nothing was started with arguments that were refused"


def test_a_busy_database_is_a_retry_later_reply_not_an_internal_error():
    """The MCP tools answer a busy database as REST does (code database_busy), and anything else as internal."""
    from django.db import OperationalError

    from jobs.mcp.registry import TOOLS, tool

    async def busy() -> str:
        raise OperationalError("database is locked")

    async def broken() -> str:
        raise OperationalError("no such table: jobs_task")

    replies = {}
    for fn in (busy, broken):
        tool(fn)
        wrapped = TOOLS.pop().fn  # registered only for this test
        replies[fn.__name__] = asyncio.run(wrapped()).content[0].text
    assert "CODE: database_busy" in replies["busy"] and "again in" in replies["busy"], replies["busy"]
    assert "CODE: internal_error" in replies["broken"], replies["broken"]


@pytest.mark.parametrize(
    ("failure", "status", "code"),
    [("database is locked", 503, "database_busy"), ("no such table: jobs_api_token", 500, "internal_error")],
)
def test_the_http_front_door_answers_its_own_failures_in_json(monkeypatch, caplog, failure, status, code):
    """A failure before the MCP server takes the request is the JSON every HTTP interface sends (a logged 500 for a
    bug), never Daphne's HTML page."""
    from django.db import OperationalError

    from jobs.web import mcp_http as http_app

    def fails(headers):
        raise OperationalError(failure)

    monkeypatch.setattr(http_app, "_caller", fails)
    sent: list[dict] = []

    async def send(message: dict) -> None:
        sent.append(message)

    async def never_called(scope, receive, send):
        raise AssertionError("the request went past /mcp")

    scope = {"type": "http", "path": "/mcp", "method": "POST", "headers": []}
    asyncio.run(http_app.McpHttpApp(never_called)(scope, None, send))
    assert sent[0]["status"] == status and json.loads(sent[1]["body"])["code"] == code
    assert (status == 500) == any("MCP over HTTP failed" in r.getMessage() and r.exc_info for r in caplog.records)


def test_a_web_process_loads_the_mcp_sdk_only_for_a_request_to_mcp(tmp_path):
    """The SDK costs about 20 MB in every web process (runbridge runs two by default) and most never serve /mcp:
    serving the rest must not import it. (The HTTP tests above show /mcp working once it loads.)"""
    code = (
        "import sys, bridge.asgi; "
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'mcp', 'starlette', 'sse_starlette', 'uvicorn'}))"
    )
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "bridge.settings", "BRIDGE_DATA_DIR": str(tmp_path)}
    loaded = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, check=True
    ).stdout
    assert loaded.strip() == "[]"
