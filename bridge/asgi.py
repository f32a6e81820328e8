"""ASGI entry point: Django over HTTP (REST, SSE, admin); websockets are routed here as they are added."""

import os

from channels.routing import ProtocolTypeRouter
from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bridge.settings")

application = ProtocolTypeRouter({"http": get_asgi_application()})
