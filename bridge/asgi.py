"""ASGI entry point: Django over HTTP (REST, SSE, admin, pages); websockets (Origin-checked, session or token).

HTTP requests run Django's sync handler on a fixed pool of BRIDGE_WEB_THREADS threads, each keeping its database
connection, so a request costs one hand-off to a waiting thread; the SSE stream's view returns at once and its
coroutine streams from the event loop (jobs/web/webserver.py `PooledDjango`). Django's ASGI handler would make a new
thread, and open a new database connection, for every request, hop between threads once per middleware, and keep a
thread for as long as a stream is open.
"""

import os

from channels.routing import ProtocolTypeRouter
from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bridge.settings")
django_http = get_wsgi_application()  # sets Django up before the websocket routes import models

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import URLRouter  # noqa: E402
from django.conf import settings  # noqa: E402

from jobs.web.consumers import SameOriginOnly  # noqa: E402
from jobs.web.mcp_http import McpHttpApp  # noqa: E402
from jobs.web.routing import websocket_urlpatterns  # noqa: E402
from jobs.web.webserver import PooledDjango  # noqa: E402

django_pooled = PooledDjango(django_http, workers=settings.BRIDGE_WEB_THREADS)

application = ProtocolTypeRouter(
    {
        "http": McpHttpApp(django_pooled),  # /mcp: MCP over Streamable HTTP, token-protected
        "websocket": SameOriginOnly(AuthMiddlewareStack(URLRouter(websocket_urlpatterns))),
    }
)
