"""Websocket routes; bridge/asgi.py wraps them in the Origin check and session auth."""

from django.urls import path, re_path

from jobs.web import consumers

websocket_urlpatterns = [
    path("ws/tasks/", consumers.TaskListConsumer.as_asgi()),
    path("ws/tasks/<str:task_id>/", consumers.TaskEventsConsumer.as_asgi()),
    re_path(r"", consumers.NoSuchSocket.as_asgi()),  # last: every other path is refused in words, not a 500
]
