"""The MCP server over Streamable HTTP at /mcp, behind the REST API's tokens, in front of Django's ASGI app."""

import asyncio
import logging
from collections.abc import Callable

from django.conf import settings
from django.http import HttpResponse

from jobs.core.errors import Unauthenticated
from jobs.mcp.reads import in_db
from jobs.web import auth
from jobs.web.middleware import database_busy_response, internal_error

logger = logging.getLogger(__name__)


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


def _refusal(headers: list[tuple[bytes, bytes]]) -> Unauthenticated | None:
    """None for a valid token, exactly as the REST API takes it (no browser sessions: MCP clients are programs); else
    why not, in the words every HTTP interface uses."""
    header = dict((name.lower(), value) for name, value in headers).get(b"authorization", b"").decode("latin-1")
    return None if (auth.identify(header) or "").startswith("token:") else auth.refusal(header)


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
            refused = await in_db(_refusal)(scope.get("headers", []))
            if refused is None:
                await self._start_session_manager()
        except Exception as exc:
            return await self._send(send, self._error_response(exc))
        if refused is not None:
            return await self._send(send, auth.unauthorized(refused))
        await self.loaded_mcp_app(scope, receive, send)

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
