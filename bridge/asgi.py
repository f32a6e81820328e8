"""ASGI entry point: Django over HTTP (REST, SSE, admin, pages); websockets (Origin-checked, session or token).

Plain HTTP requests run Django's sync handler on a fixed pool of BRIDGE_WEB_THREADS threads, each keeping its
database connection, so a request costs one hand-off to a waiting thread (jobs/webserver.py `PooledDjango`). Django's
ASGI handler would make a new thread, and open a new database connection, for every request, and hop between threads
once per middleware; it serves only the SSE stream, an async view that waits on the doorbell without holding a
thread.
"""

import os

from channels.routing import ProtocolTypeRouter
from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bridge.settings")
django_streams = get_asgi_application()  # sets Django up before the websocket routes import models

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import URLRouter  # noqa: E402
from django.conf import settings  # noqa: E402
from django.core.wsgi import get_wsgi_application  # noqa: E402
from django.urls import reverse  # noqa: E402

from jobs.consumers import SameOriginOnly  # noqa: E402
from jobs.mcp.http_app import McpHttpApp  # noqa: E402
from jobs.routing import websocket_urlpatterns  # noqa: E402
from jobs.webserver import PooledDjango  # noqa: E402


class DjangoHttp:
    """Django for HTTP: the SSE stream through its ASGI handler, every other request through its pooled sync one."""

    def __init__(self) -> None:
        self.plain = PooledDjango(get_wsgi_application(), workers=settings.BRIDGE_WEB_THREADS)
        self.stream_paths = {reverse("task-stream")}

    async def __call__(self, scope: dict, receive, send) -> None:
        app = django_streams if scope["path"] in self.stream_paths else self.plain
        await app(scope, receive, send)


application = ProtocolTypeRouter(
    {
        "http": McpHttpApp(DjangoHttp()),  # /mcp: MCP over Streamable HTTP, token-protected
        "websocket": SameOriginOnly(AuthMiddlewareStack(URLRouter(websocket_urlpatterns))),
    }
)
