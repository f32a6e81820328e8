"""The MCP server over Streamable HTTP at /mcp, behind the REST API's tokens and their scopes, in front of Django's
ASGI app. (`manage.py mcp` on stdio has no token: whoever starts it may do everything.)"""

import asyncio
import json
import logging
from collections.abc import Callable

from django.conf import settings
from django.http import HttpResponse, JsonResponse

from jobs.actions import tokens
from jobs.core.access import Caller, Scope
from jobs.core.errors import BridgeError, ErrorCode, Refused, Unauthenticated
from jobs.mcp.reads import in_db
from jobs.web import auth
from jobs.web.middleware import database_busy_response, internal_error

logger = logging.getLogger(__name__)

# What each MCP tool needs of a token (jobs/core/access.py), as the REST operation that does the same: reading,
# running (create, resume, cancel) or deciding. A tool not named here needs the most, `decide`.
TOOL_SCOPES: dict[str, Scope] = {
    "hermes_status": Scope.READ,
    "hermes_jobs": Scope.READ,
    "permissions_pending": Scope.READ,
    "hermes_read": Scope.READ,
    "hermes_capabilities": Scope.READ,
    "hermes_health": Scope.READ,
    "hermes_run": Scope.RUN,
    "hermes_resume": Scope.RUN,
    "claude_run": Scope.RUN,
    "claude_resume": Scope.RUN,
    "agent_run": Scope.RUN,
    "agent_resume": Scope.RUN,
    "task_cancel": Scope.RUN,
    "task_changes": Scope.READ,
    "task_merge": Scope.RUN,
    "task_discard": Scope.RUN,
    "permission_decide": Scope.DECIDE,
    "rules_list": Scope.READ,
    "rule_add": Scope.DECIDE,
    "rule_remove": Scope.DECIDE,
    "rule_preset": Scope.DECIDE,
}


def _transport_security() -> dict:
    """DNS-rebinding protection with Django's ALLOWED_HOSTS: /mcp bypasses Django's own Host check."""
    hosts = list(settings.ALLOWED_HOSTS)
    if "*" in hosts:
        return {"enable_dns_rebinding_protection": False}
    return {
        "allowed_hosts": hosts + [f"{host}:*" for host in hosts],
        "allowed_origins": [
            f"{scheme}://{host}{port}" for scheme in ("http", "https") for host in hosts for port in ("", ":*")
        ]
        + list(settings.CSRF_TRUSTED_ORIGINS),
    }


def _load_mcp_app() -> tuple[Callable, Callable]:
    """The SDK's ASGI app for /mcp and its session manager's `run`. Imported here, on first use: the SDK costs about
    20 MB in every web process, and most never serve /mcp."""
    from mcp.server.transport_security import TransportSecuritySettings

    from jobs.mcp.server import get_server

    server = get_server()
    app = server.streamable_http_app(
        streamable_http_path=McpHttpApp.path,
        transport_security=TransportSecuritySettings(**_transport_security()),
        stateless_http=True,  # any web process (or host) may take a client's next request: none keeps a session
    )
    return app, server.session_manager.run


def _caller(scope: dict) -> Caller:
    """The token's caller, exactly as the REST API takes it (no browser sessions: MCP clients are programs); else the
    refusal in the words every HTTP interface uses, naming a token sent where Bridge does not read one. A token limited
    to roots is refused: the tools list and read every task, so only REST, the stream and the websockets can keep such
    a token to its roots."""
    header = auth.scope_headers(scope).get("authorization", "")
    caller = auth.identify(header)
    if caller is None or caller.token_name is None:
        raise auth.refusal(header, auth.misplaced_in(scope))
    if caller.roots:
        raise Refused(
            f"the token '{caller.token_name}' is limited to roots ({', '.join(caller.roots)}), and MCP over HTTP "
            "cannot keep a token to them (its tools list and read every task): use a token made without --root "
            "here, or this one with the REST API, which keeps it to its roots",
            code=ErrorCode.OUTSIDE_TOKEN_ROOTS,
            roots=list(caller.roots),
        )
    return caller


def needed_scope(body: bytes) -> Scope:
    """What a JSON-RPC message (or batch) to /mcp needs: the most any tool it calls needs (TOOL_SCOPES), else `read`
    (initialising, listing tools); `decide` for a call that brings the user's answers to permission requests put to
    them (2026-07-28's `inputResponses`: jobs/mcp/calls.py). A body that is not JSON is refused here: what it would
    call cannot be known."""
    try:
        decoded = json.loads(body)
    except (ValueError, RecursionError):
        raise BridgeError("the request body is not valid JSON", code=ErrorCode.INVALID_JSON) from None
    messages = decoded if isinstance(decoded, list) else [decoded]
    needs = [Scope.READ]
    for message in messages:
        if isinstance(message, dict) and message.get("method") == "tools/call":
            params = message.get("params")
            name = params.get("name") if isinstance(params, dict) else None
            needs.append(TOOL_SCOPES.get(name, Scope.DECIDE) if isinstance(name, str) else Scope.DECIDE)
            if isinstance(params, dict) and "inputResponses" in params:  # answers to questions: decisions
                needs.append(Scope.DECIDE)
    return max(needs, key=lambda scope: scope.rank)


async def _read_body(receive: Callable) -> bytes:
    chunks = []
    while True:
        message = await receive()
        chunks.append(message.get("body", b""))
        if message["type"] != "http.request" or not message.get("more_body"):
            return b"".join(chunks)


def _replay(body: bytes, receive: Callable) -> Callable:
    """A `receive` that gives the body already read, then whatever the client sends next (its disconnect)."""
    pending = [{"type": "http.request", "body": body, "more_body": False}]

    async def replayed() -> dict:
        return pending.pop() if pending else await receive()

    return replayed


async def checked_receive(caller: Caller, scope: dict, receive: Callable) -> Callable:
    """`receive` for the SDK: as it is for a token that may call every tool; else the body is read first, a tool call
    the token's scope does not hold refused (403 scope_missing), and the body given to the SDK as sent."""
    if caller.has(Scope.DECIDE) or scope.get("method") != "POST":
        return receive
    body = await _read_body(receive)
    tokens.require_scope(caller, needed_scope(body))
    return _replay(body, receive)


def _refused(refused: BridgeError) -> HttpResponse:
    if isinstance(refused, Unauthenticated):
        return auth.unauthorized(refused)
    return JsonResponse(refused.as_dict(), status=refused.http_status)


class McpHttpApp:
    """ASGI: /mcp goes to the MCP server (Bearer token required), everything else to `fallback` (Django).

    The first request with a valid token loads the SDK (off the event loop) and starts its session manager, which
    then runs in a task of its own: Daphne runs no ASGI lifespan.
    """

    path = "/mcp"

    def __init__(self, fallback: Callable) -> None:
        self.fallback = fallback
        self.mcp_app: Callable | None = None
        self._runner: asyncio.Task | None = None
        self._lock = asyncio.Lock()

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        path = scope.get("path", "")
        if scope["type"] != "http" or not (path == self.path or path.startswith(self.path + "/")):
            return await self.fallback(scope, receive, send)
        try:
            caller = await in_db(_caller)(scope)
            receive = await checked_receive(caller, scope, receive)
            await self._start_session_manager()
        except BridgeError as refused:
            return await self._send(send, _refused(refused))
        except Exception as exc:
            return await self._send(send, self._error_response(exc))
        # the tools find the caller where Starlette keeps who is calling (the scope's `user`): only a caller who may
        # decide has a job's permission requests put to its user (jobs/mcp/calls.py)
        await self.loaded_mcp_app({**scope, "user": caller}, receive, send)

    @property
    def loaded_mcp_app(self) -> Callable:
        """The SDK's app, which `_start_session_manager` loads before any request with a valid token gets here."""
        if self.mcp_app is None:
            raise RuntimeError("the MCP app is not loaded: _start_session_manager loads it first")
        return self.mcp_app

    @staticmethod
    def _error_response(exc: Exception) -> HttpResponse:
        """The same JSON answers as every other HTTP interface: a 503 for a busy database, else a logged 500."""
        busy = database_busy_response(exc)
        if busy is not None:
            return busy
        logger.error("MCP over HTTP failed before the MCP server took the request", exc_info=exc)
        return internal_error()

    async def _start_session_manager(self) -> None:
        async with self._lock:
            if self._runner is not None:
                if self._runner.done():
                    self._runner.result()  # raises why it stopped: the SDK cannot start it twice
                return
            self.mcp_app, run_session_manager = await asyncio.to_thread(_load_mcp_app)
            started = asyncio.Event()

            async def run() -> None:
                async with run_session_manager():
                    started.set()
                    await asyncio.Event().wait()  # until the process ends

            self._runner = asyncio.get_running_loop().create_task(run())
            waiting = asyncio.ensure_future(started.wait())
            await asyncio.wait({self._runner, waiting}, return_when=asyncio.FIRST_COMPLETED)
            if self._runner.done():
                waiting.cancel()
                self._runner.result()  # raises why it could not start

    @staticmethod
    async def _send(send: Callable, response: HttpResponse) -> None:
        """A Django response, sent over ASGI ourselves: /mcp is answered before Django sees the request."""
        headers = [(k.lower().encode(), v.encode()) for k, v in response.items()]
        await send({"type": "http.response.start", "status": response.status_code, "headers": headers})
        await send({"type": "http.response.body", "body": response.content})
