"""While a run or status tool waits (wait_s), the MCP client hears what the job does (notifications/progress, when
it gave a progress token) and its user is asked the job's permission requests (elicitation, when it declared the
capability): with the SDK's own client, over stdio on the test database (both ways a question travels: during the
call, as Claude Code speaks, and between the call's rounds, as 2026-07-28 does) and over HTTP on a real runbridge.
Jobs run on the fake stream-json agent."""

import asyncio
import json
import os
import re
import subprocess
import sys
from collections.abc import Awaitable, Callable
from typing import Any

import httpx2
import pytest
from asgiref.sync import sync_to_async
from django.utils import timezone
from hypothesis import given
from hypothesis import strategies as st
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.types import ElicitRequestParams, ElicitResult, Implementation

from jobs import actions
from jobs.core.access import Scope
from jobs.core.vocabulary import DecidedVia, PermissionStatus, Status
from jobs.mcp import replies, server, waiting
from jobs.models import PermissionRequest, Task
from jobs.web import mcp_http
from tests.bridge_server import BridgeServer, run_manage
from tests.support import REPO, make_task, wait_for

pytestmark = pytest.mark.django_db(transaction=True)
CLIENT = "bridge-test-client"
JOB_ID = re.compile(r"^JOB_ID: (\S+)$", re.M)
# How a question reaches the user: `legacy` speaks 2025-11-25 (elicitation/create during the call, as Claude Code
# does); `auto` settles on 2026-07-28 with Bridge (the call's round ends with the question, the retry answers it).
MODES = {"legacy": "2025-11-25", "auto": "2026-07-28"}
ASKS = 'ask Bash {"command": "touch asked.txt"}\nsay after the answer'


def text_of(result: Any) -> str:
    return "\n".join(c.text for c in result.content if c.type == "text")


def job_id(reply: str) -> str:
    match = JOB_ID.search(reply)
    assert match, reply
    return match.group(1)


def over_stdio(env: dict[str, str], steps: Callable[[Client], Awaitable[Any]], **options: Any) -> Any:
    """Spawn `manage.py mcp` and run `steps` with an SDK client made with `options` (mode, callbacks)."""

    async def main() -> Any:
        params = StdioServerParameters(command=sys.executable, args=[str(REPO / "manage.py"), "mcp"], env=env, cwd=REPO)
        info = Implementation(name=CLIENT, version="1")
        async with Client(params, read_timeout_seconds=120, client_info=info, **options) as client:
            return await steps(client)

    return asyncio.run(main())


class User:
    """The person behind an elicitation callback: gives `answer` to every question, keeping what was asked."""

    def __init__(self, action: str = "accept", content: dict | None = None) -> None:
        self.action, self.content = action, content
        self.questions: list[ElicitRequestParams] = []

    async def __call__(self, context: Any, params: ElicitRequestParams) -> ElicitResult:
        self.questions.append(params)
        return ElicitResult(action=self.action, content=self.content if self.action == "accept" else None)


class Progress:
    """A progress callback's notifications, in order."""

    def __init__(self) -> None:
        self.seen: list[tuple[float, float | None, str | None]] = []

    async def __call__(self, progress: float, total: float | None, message: str | None) -> None:
        self.seen.append((progress, total, message))

    @property
    def messages(self) -> list[str]:
        return [message or "" for _, _, message in self.seen]


# --- elicitation over stdio ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", list(MODES))
def test_a_user_asked_through_elicitation_allows_and_the_job_goes_on_to_done(mcp_env, supervisor, work_root, mode):
    user = User(content={"decision": "allow"})

    async def steps(client: Client) -> tuple[str, str]:
        result = await client.call_tool("claude_run", {"task": ASKS, "cwd": str(work_root), "wait_s": 60})
        return client.protocol_version, text_of(result)

    version, reply = over_stdio(mcp_env, steps, mode=mode, elicitation_callback=user)
    assert version == MODES[mode]
    assert reply.startswith("STATUS: ok") and reply.endswith("| after the answer"), reply
    perm = PermissionRequest.objects.get(task__public_id=job_id(reply))
    assert (perm.status, perm.decided_via, perm.decided_by) == (
        PermissionStatus.ALLOWED,
        DecidedVia.MCP,
        f"mcp:{CLIENT}",
    )
    assert (work_root / "asked.txt").exists(), "the allowed command ran"
    [question] = user.questions
    assert str(perm.task.public_id) in question.message and "Bash" in question.message
    assert '"touch asked.txt"' in question.message
    assert question.requested_schema["properties"]["decision"]["enum"] == ["allow", "deny"]
    assert question.requested_schema["required"] == ["decision"]
    assert f"NOTE: permission request {perm.request_id} (Bash) was put to the user (elicitation): allowed" in reply


@pytest.mark.parametrize("mode", list(MODES))
def test_a_denial_through_elicitation_carries_its_message_to_the_agent(mcp_env, supervisor, work_root, mode):
    user = User(content={"decision": "deny", "message": "not in this repository"})

    async def steps(client: Client) -> str:
        return text_of(await client.call_tool("claude_run", {"task": ASKS, "cwd": str(work_root), "wait_s": 60}))

    reply = over_stdio(mcp_env, steps, mode=mode, elicitation_callback=user)
    perm = PermissionRequest.objects.get(task__public_id=job_id(reply))
    assert (perm.status, perm.message, perm.decided_via) == (
        PermissionStatus.DENIED,
        "not in this repository",
        DecidedVia.MCP,
    )
    assert not (work_root / "asked.txt").exists(), "the denied command did not run"
    assert reply.startswith("STATUS: ok") and len(user.questions) == 1, reply


@pytest.mark.parametrize("action", ["decline", "cancel"])
@pytest.mark.parametrize("mode", list(MODES))
def test_a_user_who_declines_leaves_the_request_pending_and_is_asked_once(mcp_env, supervisor, work_root, mode, action):
    user = User(action=action)

    async def steps(client: Client) -> str:
        return text_of(await client.call_tool("claude_run", {"task": ASKS, "cwd": str(work_root), "wait_s": 30}))

    reply = over_stdio(mcp_env, steps, mode=mode, elicitation_callback=user)
    task = Task.objects.get(public_id=job_id(reply))
    perm = PermissionRequest.objects.get(task=task)
    assert perm.status == PermissionStatus.PENDING and not perm.decided_via
    assert len(user.questions) == 1, "a request is put to the user once in a call"
    assert reply.startswith("STATUS: running") and "PENDING_PERMISSIONS: 1" in reply, reply
    assert f"(elicitation) and {replies.UNANSWERED[action]}: it is still pending" in reply
    actions.request_cancel(task, reason="test over")


def test_a_call_asks_between_rounds_only_as_many_questions_as_a_client_takes(mcp_env, supervisor, work_root):
    """2026-07-28: each question is a round, and the SDK's client gives up after 10: the call stops asking before, and
    the next call asks the rest."""
    script = "\n".join(f'ask Bash {{"command": "true {n}"}}' for n in range(waiting.MAX_ROUNDS + 1)) + "\nsay done"
    user = User(content={"decision": "allow"})

    async def steps(client: Client) -> tuple[str, int, str]:
        first = text_of(await client.call_tool("claude_run", {"task": script, "cwd": str(work_root), "wait_s": 60}))
        asked_in_the_first = len(user.questions)
        then = text_of(await client.call_tool("hermes_status", {"job_id": job_id(first), "wait_s": 60}))
        return first, asked_in_the_first, then

    first, asked_in_the_first, then = over_stdio(mcp_env, steps, mode="auto", elicitation_callback=user)
    assert asked_in_the_first == waiting.MAX_ROUNDS and "PENDING_PERMISSIONS: 1" in first, first
    assert replies.questions_for_the_next_call(waiting.MAX_ROUNDS) in first
    assert then.startswith("STATUS: ok") and len(user.questions) == waiting.MAX_ROUNDS + 1, then


def test_a_request_answered_elsewhere_withdraws_the_question_put_during_the_call(mcp_env, supervisor, work_root):
    """Someone decides on the web page while the user looks at the question: the call does not wait for them."""
    forever = asyncio.Event()

    async def decides_elsewhere_then_looks_away(context: Any, params: ElicitRequestParams) -> ElicitResult:
        task = await sync_to_async(Task.objects.get)(prompt=ASKS)
        await sync_to_async(actions.decide_permission)(task, behavior="allow", by="user:alice", via=DecidedVia.WEB)
        await forever.wait()  # never answers: only the withdrawal ends the question
        raise AssertionError("unreachable")

    async def steps(client: Client) -> str:
        return text_of(await client.call_tool("claude_run", {"task": ASKS, "cwd": str(work_root), "wait_s": 60}))

    reply = over_stdio(mcp_env, steps, mode="legacy", elicitation_callback=decides_elsewhere_then_looks_away)
    perm = PermissionRequest.objects.get(task__public_id=job_id(reply))
    assert (perm.decided_by, perm.decided_via) == ("user:alice", DecidedVia.WEB)
    assert "answered elsewhere (allowed by user:alice via web) while it was put to the user" in reply, reply
    assert reply.startswith("STATUS: ok"), reply


def test_an_answer_that_comes_after_a_decision_elsewhere_does_not_count(mcp_env, supervisor, work_root):
    """2026-07-28: the user answers between rounds, after someone else decided; the retry says so and goes on."""

    async def decides_elsewhere_then_denies(context: Any, params: ElicitRequestParams) -> ElicitResult:
        task = await sync_to_async(Task.objects.get)(prompt=ASKS)
        await sync_to_async(actions.decide_permission)(task, behavior="allow", by="user:alice", via=DecidedVia.WEB)
        return ElicitResult(action="accept", content={"decision": "deny"})

    async def steps(client: Client) -> str:
        return text_of(await client.call_tool("claude_run", {"task": ASKS, "cwd": str(work_root), "wait_s": 60}))

    reply = over_stdio(mcp_env, steps, mode="auto", elicitation_callback=decides_elsewhere_then_denies)
    perm = PermissionRequest.objects.get(task__public_id=job_id(reply))
    assert (perm.status, perm.decided_by) == (PermissionStatus.ALLOWED, "user:alice")
    assert "answered elsewhere (allowed by user:alice via web) while it was put to the user" in reply, reply
    assert reply.startswith("STATUS: ok") and (work_root / "asked.txt").exists(), reply


def test_a_request_is_put_to_one_call_at_a_time(mcp_env, supervisor, work_root):
    """Two calls wait on one job: the second, while the first's question is open, gets the text reply instead."""
    task = wait_for(make_task(ASKS), lambda t: bool(actions.pending_permissions(t)))
    asked, release = asyncio.Event(), asyncio.Event()
    questions: list[str] = []

    async def answers_when_released(context: Any, params: ElicitRequestParams) -> ElicitResult:
        questions.append(params.message)
        asked.set()
        await release.wait()
        return ElicitResult(action="accept", content={"decision": "allow"})

    async def steps(client: Client) -> tuple[str, str]:
        status = {"job_id": str(task.public_id), "wait_s": 60}
        first = asyncio.create_task(client.call_tool("hermes_status", status))
        await asyncio.wait_for(asked.wait(), 60)
        second = text_of(await client.call_tool("hermes_status", status | {"wait_s": 0}))
        release.set()
        return text_of(await first), second

    first, second = over_stdio(mcp_env, steps, mode="legacy", elicitation_callback=answers_when_released)
    assert len(questions) == 1, questions
    assert "PENDING_PERMISSIONS: 1" in second and "elicitation" not in second, second
    assert first.startswith("STATUS: ok") and "(elicitation): allowed" in first, first


# --- progress over stdio ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", list(MODES))
def test_progress_during_wait_s_tells_the_newest_line_and_the_decision_awaited(mcp_env, supervisor, work_root, mode):
    script = 'say first line\nsleep 3\nsay second line\nsleep 1\nask Bash {"command": "rm -rf build"}\nsay done'
    progress = Progress()

    async def steps(client: Client) -> str:
        arguments = {"task": script, "cwd": str(work_root), "wait_s": 40}
        return text_of(await client.call_tool("claude_run", arguments, progress_callback=progress))

    reply = over_stdio(mcp_env, steps, mode=mode)
    numbers = [number for number, _, _ in progress.seen]
    assert numbers == sorted(set(numbers)) and len(numbers) >= 3, progress.seen
    assert {total for _, total, _ in progress.seen} == {40}
    running = [m for m in progress.messages if re.fullmatch(r"running \d+ s: first line", m)]
    assert len(running) >= 2, f"a message every 2 s while the agent sleeps: {progress.messages}"
    assert any(re.fullmatch(r"running \d+ s: second line", m) for m in progress.messages), progress.messages
    assert progress.messages[-1] == "waiting for a decision: Bash rm -rf build", progress.messages
    assert reply.startswith("STATUS: running") and "PENDING_PERMISSIONS: 1" in reply, reply
    actions.request_cancel(Task.objects.get(public_id=job_id(reply)), reason="test over")


def test_a_client_without_progress_or_elicitation_gets_the_text_replies_it_always_did(mcp_env, supervisor, work_root):
    notifications: list[str] = []

    async def every_message(message: Any) -> None:
        notifications.append(getattr(getattr(message, "root", message), "method", type(message).__name__))

    async def steps(client: Client) -> tuple[str, float]:
        began = asyncio.get_running_loop().time()
        reply = text_of(await client.call_tool("claude_run", {"task": ASKS, "cwd": str(work_root), "wait_s": 60}))
        return reply, asyncio.get_running_loop().time() - began

    for mode in MODES:
        reply, took = over_stdio(mcp_env, steps, mode=mode, message_handler=every_message)
        task = Task.objects.get(public_id=job_id(reply))
        assert reply.startswith("STATUS: running") and took < 30, "it returned as the question came, as always"
        assert (
            "PENDING_PERMISSIONS: 1 — the agent is waiting: answer with permissions_pending / permission_decide"
            in reply
        )
        assert "NOTE:" not in reply and "notifications/progress" not in notifications, (reply, notifications)
        assert PermissionRequest.objects.get(task=task).status == PermissionStatus.PENDING
        actions.request_cancel(task, reason="test over")


# --- over HTTP on a real runbridge -----------------------------------------------------------------------------------


def over_http(bridge: BridgeServer, token: str, steps: Callable[[Client], Awaitable[Any]], **options: Any) -> Any:
    async def main() -> Any:
        headers = {"Authorization": f"Bearer {token}"}
        async with (
            httpx2.AsyncClient(headers=headers, timeout=120, trust_env=False) as http,
            Client(
                streamable_http_client(bridge.url + "/mcp", http_client=http),
                client_info=Implementation(name=CLIENT, version="1"),
                **options,
            ) as client,
        ):
            return await steps(client)

    return asyncio.run(main())


def test_over_http_a_token_that_may_decide_is_asked_and_one_that_may_not_is_not(bridge):
    """A token with scope decide is asked between the call's rounds; one with scope run is not, nor a client that
    speaks 2025-11-25, since stateless HTTP cannot carry a question during the call."""
    runner = run_manage(["token", "create", "runner", "--scope", "run"], bridge.env).stdout.strip().splitlines()[-1]
    decider, bystander, progress = User(content={"decision": "allow"}), User(content={"decision": "allow"}), Progress()

    async def run(client: Client, task: str) -> str:
        arguments = {"task": task, "cwd": str(bridge.work), "wait_s": 60}
        return text_of(await client.call_tool("claude_run", arguments, progress_callback=progress))

    decided = over_http(bridge, bridge.token, lambda c: run(c, ASKS), elicitation_callback=decider)
    refused = over_http(bridge, runner, lambda c: run(c, ASKS + "\nsay again"), elicitation_callback=bystander)
    # stateless HTTP keeps no handshake (its capabilities) and no way to send a request: 2025-11-25 gets the text reply
    older = User(content={"decision": "allow"})
    unasked = over_http(
        bridge, bridge.token, lambda c: run(c, ASKS + "\nsay once more"), mode="legacy", elicitation_callback=older
    )
    # over HTTP the token is who decided, not the name the client gives itself
    assert decided.startswith("STATUS: ok") and "(elicitation): allowed by token:" in decided, decided
    assert len(decider.questions) == 1 and (bridge.work / "asked.txt").exists()
    assert "waiting for a decision: Bash touch asked.txt" in progress.messages, progress.messages
    assert refused.startswith("STATUS: running") and "PENDING_PERMISSIONS: 1" in refused, refused
    assert bystander.questions == [], "a token with scope run may not decide: it is not asked"
    assert unasked.startswith("STATUS: running") and "PENDING_PERMISSIONS: 1" in unasked, unasked
    assert "elicitation" not in unasked + refused and older.questions == []
    for reply in (refused, unasked):
        assert [p["status"] for p in bridge.permissions(job_id(reply))] == ["pending"]
        bridge.post("/v1/task/cancel", {"task_id": job_id(reply)})


def test_an_answer_over_http_needs_a_token_that_may_decide():
    """The retry that brings a user's answers decides: a token whose scope is run or read cannot send it."""
    call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "hermes_status", "arguments": {}}}
    assert mcp_http.needed_scope(json.dumps(call).encode()) == Scope.READ
    call["params"]["inputResponses"] = {"decision": {"action": "accept", "content": {"decision": "allow"}}}
    assert mcp_http.needed_scope(json.dumps(call).encode()) == Scope.DECIDE


def test_a_round_sealed_by_one_process_opens_in_another(settings):
    """A call's next round may reach another web process (runbridge runs two) or a restarted MCP server: each
    derives the sealing key from the install's secret key instead of making one of its own."""
    code = (
        "import django; django.setup(); from jobs.mcp import server; "
        "print(server.request_state_security().codec.seal(b'the first round'))"
    )
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "bridge.settings", "DJANGO_SECRET_KEY": settings.SECRET_KEY}
    sealed = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, check=True)
    codec = server.request_state_security().codec
    assert codec.unseal(sealed.stdout.strip()) == b"the first round"


# --- the words ------------------------------------------------------------------------------------------------------

CONTROLS = st.sampled_from(["\n", "\r", "\x1b[2J", "\u202e", "\u2028", "\x00", "STATUS: ok", "| "])
hostile = st.lists(CONTROLS | st.text(max_size=30), max_size=60).map("".join)


@given(prompt=hostile, command=hostile, said=hostile)
def test_questions_and_progress_show_an_agents_text_escaped_and_cut(prompt, command, said):
    """A question and a progress message carry the agent's text (its input, its output): a client shows them as
    they are, so nothing in them may move the cursor or add a line, and neither grows with what the agent wrote."""
    task = Task(agent="claude", prompt=prompt, cwd="/work", status=Status.RUNNING)
    perm = PermissionRequest(task=task, request_id="r1", tool_name="Bash", input={"command": command})
    question = replies.question(task, perm)
    assert len(question.splitlines()) == 4 and len(question) < 3 * replies.QUESTION_INPUT_CHARS
    waiting = replies.progress_message(Status.RUNNING, timezone.now(), [perm], "")
    running = replies.progress_message(Status.RUNNING, timezone.now(), [], said)
    for text in (question, waiting, running):
        assert not re.search("[\x00-\x09\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]", text), text
    for message in (waiting, running):
        assert "\n" not in message and len(message) < 3 * replies.PROGRESS_LINE_CHARS
