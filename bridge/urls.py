"""URL map: /health is open; /v1/ is the REST API (OpenAPI at /v1/docs); /admin/ for history."""

from django.contrib import admin
from django.urls import path

from jobs import views
from jobs.api import api

urlpatterns = [
    path("health", views.health, name="health"),
    path("v1/task/output/stream", views.task_stream, name="task-stream"),
    path("v1/", api.urls),
    path("admin/", admin.site.urls),
]
