"""Scoped tokens: `read` follows tasks, `run` also creates, resumes and cancels them, `decide` also answers permission
questions; a token limited to roots sees and creates only tasks under them. Each interface asks jobs/actions/tokens.py:
REST (every operation, from the API's own list), the SSE stream, the websockets, the pages and MCP over HTTP."""

import asyncio
import json
import os
import sqlite3
from collections.abc import Callable
from pathlib import Path

import httpx
import httpx2
import pytest
from asgiref.sync import async_to_sync
from channels.testing import WebsocketCommunicator
from django.core.management import CommandError, call_command
from django.test import Client
from mcp import Client as McpClient
from mcp.client.streamable_http import streamable_http_client

from bridge.asgi import application
from jobs import actions
from jobs.core.access import Scope
from jobs.core.errors import InvalidInput
from jobs.core.hints import manage_command
from jobs.core.vocabulary import PermissionStatus, Status
from jobs.models import ApiToken, Task
from jobs.web import mcp_http
from jobs.web.api import api
from tests.bridge_server import BridgeServer, run_manage
from tests.support import make_task

pytestmark = pytest.mark.django_db(transaction=True)
HOST = (b"host", b"127.0.0.1:8800")


def task_id_of(task: Task) -> dict:
    return {"task_id": str(task.public_id)}


# Every REST operation, the scope it needs, and a request it answers 200 to for a task that runs and asks a question.
# A new operation fails `test_every_rest_operation_names_the_scope_it_needs` until it is named here.
OPERATIONS: dict[str, tuple[Scope, Callable[[Task], dict]]] = {
    "POST /v1/task/create": (Scope.RUN, lambda task: {"prompt": "say hi", "cwd": task.cwd}),
    "POST /v1/task/cancel": (Scope.RUN, task_id_of),
    "POST /v1/task/permission": (Scope.DECIDE, lambda task: {**task_id_of(task), "behavior": "allow"}),
    "GET /v1/task/output": (Scope.READ, task_id_of),
    "GET /v1/task/transcript": (Scope.READ, task_id_of),
    "GET /v1/task": (Scope.READ, task_id_of),
    "GET /v1/tasks": (Scope.READ, lambda task: {}),
    "GET /v1/workers": (Scope.READ, lambda task: {}),
    "GET /v1/agents": (Scope.READ, lambda task: {}),
    "GET /v1/permissions": (Scope.READ, task_id_of),
    "GET /v1/task/events": (Scope.READ, task_id_of),
    "GET /v1/task/changes": (Scope.READ, task_id_of),
    "POST /v1/task/merge": (Scope.RUN, task_id_of),
    "POST /v1/task/discard": (Scope.RUN, task_id_of),
    "POST /v1/rules": (Scope.DECIDE, lambda task: {"rule": "Bash(git status)", "decision": "allow"}),
    "GET /v1/rules": (Scope.READ, lambda task: {}),
    "DELETE /v1/rules/{rule_id}": (Scope.DECIDE, lambda task: {"rule_id": actions.add_rule("Read", "allow").pk}),
    "GET /v1/rules/presets": (Scope.READ, lambda task: {}),
    "POST /v1/rules/presets": (Scope.DECIDE, lambda task: {"preset": "read-only", "root": task.cwd}),
    "POST /v1/webhooks": (Scope.DECIDE, lambda task: {"url": "http://127.0.0.1:9/hook"}),
    "GET /v1/webhooks": (Scope.READ, lambda task: {}),
    "DELETE /v1/webhooks/{webhook_id}": (Scope.DECIDE, lambda task: {"webhook_id": a_webhook()}),
    "POST /v1/webhooks/{webhook_id}/test": (Scope.DECIDE, lambda task: {"webhook_id": a_webhook()}),
    "GET /v1/webhooks/{webhook_id}/deliveries": (Scope.READ, lambda task: {"webhook_id": a_webhook()}),
}
# What an operation answers once the scope let it through, when that is not 200: merging or discarding the task here
# (which ran in its cwd, not a worktree of its own) is a conflict of the task's, not a refusal of the caller's.
LET_THROUGH = {"POST /v1/task/merge": (409, "not_isolated"), "POST /v1/task/discard": (409, "not_isolated")}


def let_through(operation: str, response) -> bool:
    """The answer says the caller was let through: a 200, or what LET_THROUGH names for the operation."""
    status, code = LET_THROUGH.get(operation, (200, None))
    return response.status_code == status and (code is None or response.json()["code"] == code)


def schema_operations() -> list[str]:
    """Every operation the API serves, as its OpenAPI schema lists them (tests/integration/test_api_schema.py)."""
    paths = api.get_openapi_schema()["paths"]
    return sorted(f"{method.upper()} {path}" for path, item in paths.items() for method in item)


def takes_a_task(operation: str) -> bool:
    """Whether the operation names one task (`task_id` in its query or its body)."""
    method, path = operation.split(" ")
    schema = api.get_openapi_schema()
    spec = schema["paths"][path][method.lower()]
    names = {parameter["name"] for parameter in spec.get("parameters", [])}
    body = spec.get("requestBody", {}).get("content", {}).get("application/json", {}).get("schema", {})
    if "$ref" in body:
        names |= set(schema["components"]["schemas"][body["$ref"].rsplit("/", 1)[1]]["properties"])
    return "task_id" in names


def a_webhook() -> int:
    return actions.create_webhook("http://127.0.0.1:9/hook")[0].pk


def call(token: str, operation: str, params: dict, client: Client | None = None):
    method, path = operation.split(" ")
    client = client or Client()
    headers = {"Authorization": f"Bearer {token}"}
    in_path = {name: params.pop(name) for name in list(params) if "{" + name + "}" in path}
    path = path.format(**in_path)
    if method == "GET":
        return client.get(path, params, headers=headers)
    if method == "DELETE":
        return client.delete(path, headers=headers)
    return client.post(path, json.dumps(params), content_type="application/json", headers=headers)


def asking_task(cwd: Path) -> Task:
    """A task that runs (on a supervisor this process registers) and waits for an answer to one question."""
    task = make_task("say hi", cwd=str(cwd))
    Task.objects.filter(pk=task.pk).update(status=Status.RUNNING, worker=actions.register_worker(1))
    actions.record_permission_request(task, request_id="r1", tool_name="Bash", tool_input={"command": "ls"})
    task.refresh_from_db()
    return task


def token_for(scope: Scope, *roots: Path) -> str:
    return actions.create_token(f"{scope}-{len(roots)}", scope, [str(root) for root in roots])[1]


# --- scopes, per REST operation ------------------------------------------------------------------------------------


def test_every_rest_operation_names_the_scope_it_needs():
    assert sorted(OPERATIONS) == schema_operations(), "name a new operation's scope in OPERATIONS (and in api.py)"


@pytest.mark.parametrize("scope", list(Scope))
@pytest.mark.parametrize("operation", schema_operations())
def test_each_operation_lets_in_exactly_the_scopes_that_hold_what_it_needs(work_root, operation, scope):
    needed, params = OPERATIONS[operation]
    task = asking_task(work_root)
    response = call(token_for(scope), operation, params(task))
    if scope.rank >= needed.rank:
        assert let_through(operation, response), response.content
        return
    body = response.json()
    assert (response.status_code, body["code"], body["scope"], body["needed"]) == (403, "scope_missing", scope, needed)
    assert manage_command("token", "create", "NAME", "--scope", needed) in body["error"]
    assert (
        task.permission_requests.get().status == PermissionStatus.PENDING
        and not Task.objects.get(pk=task.pk).cancel_requested_at
    )
    assert Task.objects.count() == 1, "nothing was created"


def test_the_refusal_says_which_scope_is_missing_and_how_to_make_a_token_that_has_it(work_root):
    response = call(token_for(Scope.READ), "POST /v1/task/create", {"prompt": "say hi"})
    assert response.json()["error"] == (
        "the token 'read-0' has scope 'read' (see tasks: status, lists, transcripts, streams); this needs scope 'run' "
        "(read, and create, resume and cancel tasks). Make a token that has it: "
        + manage_command("token", "create", "NAME", "--scope", "run")
    )
    limited = token_for(Scope.RUN, work_root)
    refused = call(
        limited, "POST /v1/task/permission", {"task_id": str(asking_task(work_root).public_id), "behavior": "allow"}
    )
    assert refused.json()["error"].endswith(
        manage_command("token", "create", "NAME", "--scope", "decide", "--root", str(work_root))
    )


def test_a_token_without_the_scope_is_refused_before_its_request_is_read(work_root):
    """A read token learns nothing from a create it may not make: 403, not the 422 its empty body would get."""
    response = call(token_for(Scope.READ), "POST /v1/task/create", {})
    assert (response.status_code, response.json()["code"]) == (403, "scope_missing")


def test_tokens_made_before_scopes_may_still_do_everything(tmp_path):
    """An install's existing tokens keep working: migration 0007 gives each row scope `decide` and no roots."""
    env = {name: value for name, value in os.environ.items() if name != "DATABASE_URL"}
    env["BRIDGE_DATA_DIR"] = str(tmp_path)  # its own SQLite database, bridge.sqlite3
    run_manage(["migrate", "jobs", "0006", "--no-input", "-v0"], env)
    with sqlite3.connect(tmp_path / "bridge.sqlite3") as db:
        db.execute(
            "INSERT INTO jobs_apitoken (name, prefix, hash, created_at) VALUES ('old', 'brg_old1', ?, '2026-01-01')",
            ["0" * 64],
        )
    run_manage(["migrate", "--no-input", "-v0"], env)
    listed = run_manage(["token", "list"], env).stdout
    assert listed.split("\t")[:3] == ["old", "brg_old1…", "scope decide, any root"], listed


def test_a_scope_or_root_a_token_cannot_take_is_refused_saying_what_it_takes(tmp_path):
    with pytest.raises(InvalidInput) as scope:
        actions.create_token("x", "admin")
    assert (
        scope.value.message.startswith("a token's scope is one of 'read' (see tasks")
        and "not 'admin'" in scope.value.message
    )
    with pytest.raises(InvalidInput, match="a token's root must be an absolute path, not 'work'"):
        actions.create_token("x", "read", ["work"])
    with pytest.raises(InvalidInput, match="a token takes at most 32 roots, not 33"):
        actions.create_token("x", "read", [str(tmp_path / str(n)) for n in range(33)])
    with pytest.raises(CommandError, match="absolute path"):
        call_command("token", "create", "x", "--root", "work")
    assert not ApiToken.objects.exists()
    row, _ = actions.create_token("x", "run", [str(tmp_path / "a" / ".." / "b"), str(tmp_path / "b")])
    assert row.roots == [str(tmp_path.resolve() / "b")], "resolved, each once"


# --- roots ---------------------------------------------------------------------------------------------------------


def test_a_token_limited_to_roots_lists_only_the_tasks_under_them(rooms):
    mine, theirs = rooms
    own, other = asking_task(mine), asking_task(theirs)
    token = token_for(Scope.DECIDE, mine)
    listed = call(token, "GET /v1/tasks", {}).json()
    assert [t["id"] for t in listed["tasks"]] == [str(own.public_id)] and listed["count"] == 1
    pending = call(token, "GET /v1/permissions", {}).json()["permissions"]
    assert [p["task_id"] for p in pending] == [str(own.public_id)]
    everyone = call(token_for(Scope.READ), "GET /v1/tasks", {}).json()["tasks"]
    assert {t["id"] for t in everyone} == {str(own.public_id), str(other.public_id)}


@pytest.mark.parametrize("operation", [op for op in schema_operations() if takes_a_task(op)])
def test_every_operation_on_a_task_outside_the_tokens_roots_is_refused(rooms, operation):
    mine, theirs = rooms
    token = token_for(Scope.DECIDE, mine)
    _, params = OPERATIONS[operation]
    other = asking_task(theirs)
    refused = call(token, operation, params(other))
    body = refused.json()
    assert (refused.status_code, body["code"], body["roots"]) == (403, "outside_token_roots", [str(mine)]), body
    assert str(theirs) not in body["error"], "the refusal does not say where another's task runs"
    assert other.permission_requests.get().status == PermissionStatus.PENDING
    assert let_through(operation, call(token, operation, params(asking_task(mine))))


def test_a_token_limited_to_roots_creates_tasks_only_under_them(rooms, work_root):
    mine, theirs = rooms
    (mine / "link").symlink_to(theirs)
    token = token_for(Scope.RUN, mine)
    assert call(token, "POST /v1/task/create", {"prompt": "hi", "cwd": str(mine)}).status_code == 200
    for cwd in (str(theirs), str(mine / "link"), None):  # elsewhere; a symlink out of the root; the default cwd
        body = call(token, "POST /v1/task/create", {"prompt": "hi", **({"cwd": cwd} if cwd else {})}).json()
        assert body["code"] == "outside_token_roots", (cwd, body)
    assert [t.cwd for t in Task.objects.all()] == [str(mine)]


def test_the_stream_follows_the_tasks_a_token_may_see(rooms):
    mine, theirs = rooms
    token = token_for(Scope.READ, mine)
    own, other = make_task("say hi", cwd=str(mine)), make_task("say hi", cwd=str(theirs))
    headers = {"Authorization": f"Bearer {token}"}
    stream = Client().get("/v1/task/output/stream", {"task_id": str(own.public_id)}, headers=headers)
    assert (stream.status_code, stream["Content-Type"]) == (200, "text/event-stream")
    refused = Client().get("/v1/task/output/stream", {"task_id": str(other.public_id)}, headers=headers)
    assert (refused.status_code, refused.json()["code"]) == (403, "outside_token_roots")


# --- websockets ----------------------------------------------------------------------------------------------------


def communicator(path: str, token: str) -> WebsocketCommunicator:
    return WebsocketCommunicator(application, path, headers=[HOST, (b"authorization", f"Bearer {token}".encode())])


def test_a_read_tokens_socket_can_neither_decide_nor_cancel(work_root):
    task = asking_task(work_root)
    token = token_for(Scope.READ)

    async def body():
        ws = communicator(f"/ws/tasks/{task.public_id}/", token)
        assert (await ws.connect(timeout=10))[0]
        while not await ws.receive_nothing(timeout=0.5):
            await ws.receive_json_from(timeout=10)
        for frame in (
            {"type": "decision", "request_id": "r1", "behavior": "allow"},
            {"type": "permission", "task_id": str(task.public_id), "behavior": "allow"},
            {"type": "cancel", "task_id": str(task.public_id)},
        ):
            await ws.send_json_to(frame)
            answer = await ws.receive_json_from(timeout=5)
            assert (answer["type"], answer["code"]) == ("error", "read_only"), answer
        await ws.disconnect()

    async_to_sync(body)()
    assert task.permission_requests.get().status == PermissionStatus.PENDING
    assert Task.objects.get(pk=task.pk).cancel_requested_at is None


def test_a_token_limited_to_roots_follows_only_the_tasks_under_them(rooms):
    mine, theirs = rooms
    own, other = make_task("say hi", cwd=str(mine)), make_task("say hi", cwd=str(theirs))
    token = token_for(Scope.READ, mine)

    async def body():
        refused = communicator(f"/ws/tasks/{other.public_id}/", token)
        assert (await refused.connect())[0]
        message = await refused.receive_json_from(timeout=10)
        assert (message["type"], message["code"]) == ("error", "outside_token_roots")
        assert (await refused.receive_output(timeout=10))["code"] == 4403
        listing = communicator("/ws/tasks/?since=0", token)
        assert (await listing.connect())[0]
        changes = await listing.receive_json_from(timeout=10)
        assert [row["id"] for row in changes["tasks"]] == [str(own.public_id)], changes
        await listing.disconnect()

    async_to_sync(body)()
    assert other.events.exists(), "the other task had news the list did not show"


# --- the pages -----------------------------------------------------------------------------------------------------


def test_a_page_button_pressed_with_a_read_token_is_refused(work_root, django_user_model):
    """The pages' buttons ask the same rule: a request that carries a token is that token's, even in a logged-in
    browser."""
    task = asking_task(work_root)
    client = Client()
    client.force_login(django_user_model.objects.create_user("ann"))
    headers = {"Authorization": f"Bearer {token_for(Scope.RUN)}"}
    refused = client.post(f"/tasks/{task.public_id}/permissions/r1", {"behavior": "allow"}, headers=headers)
    assert (refused.status_code, refused.json()["code"], refused.json()["needed"]) == (403, "scope_missing", "decide")
    assert task.permission_requests.get().status == PermissionStatus.PENDING
    allowed = client.post(f"/tasks/{task.public_id}/permissions/r1", {"behavior": "allow"})
    assert allowed.status_code == 200 and allowed.json()["decided_by"] == "user:ann"


# --- MCP over HTTP -------------------------------------------------------------------------------------------------


def test_every_mcp_tool_names_the_scope_it_needs():
    from jobs.mcp.registry import TOOLS
    from jobs.mcp.server import get_server

    get_server()  # imports the tools, which register themselves
    assert sorted(tool.name for tool in TOOLS) == sorted(mcp_http.TOOL_SCOPES)


@pytest.mark.parametrize(
    ("message", "needed"),
    [
        ({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}, Scope.READ),
        ({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "hermes_status"}}, Scope.READ),
        ({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "task_cancel"}}, Scope.RUN),
        ({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "a_tool_added_later"}}, Scope.DECIDE),
        ({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": ["task_cancel"]}}, Scope.DECIDE),
        (
            [
                {"method": "tools/call", "params": {"name": "hermes_jobs"}},
                {"method": "tools/call", "params": {"name": "permission_decide"}},
            ],
            Scope.DECIDE,
        ),
    ],
)
def test_an_mcp_request_needs_the_most_any_tool_it_calls_needs(message, needed):
    assert mcp_http.needed_scope(json.dumps(message).encode()) == needed


def made_token(bridge: BridgeServer, name: str, *options: str) -> str:
    return run_manage(["token", "create", name, *options], bridge.env).stdout.strip().splitlines()[-1]


def post_tool(bridge: BridgeServer, token: str, tool: str, **arguments) -> httpx.Response:
    return httpx.post(
        bridge.url + "/mcp",
        json={"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": tool, "arguments": arguments}},
        headers={"Accept": "application/json, text/event-stream", "Authorization": f"Bearer {token}"},
        trust_env=False,
        timeout=60,
    )


def call_tool(bridge: BridgeServer, token: str, tool: str, **arguments) -> str:
    async def main() -> str:
        headers = {"Authorization": f"Bearer {token}"}
        async with (
            httpx2.AsyncClient(headers=headers, timeout=60, trust_env=False) as http,
            McpClient(streamable_http_client(bridge.url + "/mcp", http_client=http)) as client,
        ):
            result = await client.call_tool(tool, arguments)
            return "\n".join(c.text for c in result.content if c.type == "text")

    return asyncio.run(main())


def test_over_mcp_a_read_token_follows_jobs_but_cannot_cancel_or_decide(bridge):
    reader, runner = made_token(bridge, "reader", "--scope", "read"), made_token(bridge, "runner", "--scope", "run")
    started = call_tool(bridge, bridge.token, "claude_run", task="sleep 60\nsay late", cwd=str(bridge.work), wait_s=0)
    job_id = next(line for line in started.splitlines() if line.startswith("JOB_ID: ")).split(" ", 1)[1]
    assert f"JOB_ID: {job_id}" in call_tool(bridge, reader, "hermes_status", job_id=job_id, wait_s=0)
    for token, tool, arguments, needed in (
        (reader, "task_cancel", {"job_id": job_id}, "run"),
        (reader, "permission_decide", {"job_id": job_id, "behavior": "allow"}, "decide"),
        (reader, "claude_run", {"task": "say hi"}, "run"),
        (runner, "permission_decide", {"job_id": job_id, "behavior": "allow"}, "decide"),
    ):
        refused = post_tool(bridge, token, tool, **arguments)
        assert refused.status_code == 403, (tool, refused.text)
        body = refused.json()
        assert (refused.status_code, body["code"], body["needed"]) == (403, "scope_missing", needed), (tool, body)
        assert f"--scope {needed}" in body["error"]
    call_tool(bridge, runner, "task_cancel", job_id=job_id)
    assert "STATUS: cancelled" in call_tool(bridge, reader, "hermes_status", job_id=job_id, wait_s=60)


def test_over_mcp_a_token_limited_to_roots_is_refused_saying_where_it_works(bridge):
    limited = made_token(bridge, "limited", "--scope", "read", "--root", str(bridge.work))
    refused = post_tool(bridge, limited, "hermes_jobs")
    body = refused.json()
    assert (refused.status_code, body["code"], body["roots"]) == (403, "outside_token_roots", [str(bridge.work)])
    assert "REST API" in body["error"]
