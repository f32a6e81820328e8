"""ASGI entry point: Django over HTTP (REST, SSE, admin, pages); websockets (Origin-checked, session or token)."""

import os

from channels.routing import ProtocolTypeRouter
from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bridge.settings")
django_http = get_asgi_application()  # sets Django up before the websocket routes import models

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import URLRouter  # noqa: E402

from jobs.consumers import SameOriginOnly  # noqa: E402
from jobs.mcp import McpHttpApp  # noqa: E402
from jobs.routing import websocket_urlpatterns  # noqa: E402

application = ProtocolTypeRouter(
    {
        "http": McpHttpApp(django_http),  # /mcp: MCP over Streamable HTTP, token-protected
        "websocket": SameOriginOnly(AuthMiddlewareStack(URLRouter(websocket_urlpatterns))),
    }
)
