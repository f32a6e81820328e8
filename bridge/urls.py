"""URL map: /health is open; /v1/ is the REST API (OpenAPI at /v1/docs); the pages (a decision link's, /decide/<token>,
needs no login); /admin/ for history."""

from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import path, re_path

from jobs.web import decisions, views
from jobs.web.api import api

urlpatterns = [
    path("health", views.health, name="health"),
    path("favicon.ico", views.favicon, name="favicon"),
    path("v1/task/output/stream", views.task_stream, name="task-stream"),
    path("v1/", api.urls),
    path("admin/", admin.site.urls),
    path("", views.dashboard, name="dashboard"),
    path("tasks/new", views.new_task, name="task-new"),
    path("tasks/<str:task_id>/", views.task_page, name="task-page"),
    path("tasks/<str:task_id>/cancel", views.cancel_task, name="task-cancel"),
    path("tasks/<str:task_id>/follow-up", views.follow_up, name="task-follow-up"),
    path("tasks/<str:task_id>/merge", views.merge_task, name="task-merge"),
    path("tasks/<str:task_id>/discard", views.discard_task, name="task-discard"),
    path("tasks/<str:task_id>/permissions/<str:request_id>", views.decide, name="task-decide"),
    path("rules/", views.rules_page, name="rules"),
    path("rules/<int:rule_id>/remove", views.remove_rule, name="rule-remove"),
    path("rules/presets", views.switch_preset, name="rule-presets"),
    path("usage/", views.usage, name="usage"),
    path("webhooks/", views.webhooks_page, name="webhooks"),
    path("decide/", decisions.pending_decisions, name="decide-pending"),
    # Whatever follows (line breaks and slashes too): a damaged link gets the page that says so, not a 404.
    re_path(r"^decide/(?P<token>(?s:.+))\Z", decisions.decide_link, name="decide-link"),
    path("login/", views.LoginView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("login/link/<str:uidb64>/<str:token>/", views.login_with_link, name="login-link"),
]

# Errors Django answers itself are JSON in the API's shape for /v1/ and programs, HTML only for a browser's pages.
handler400 = "jobs.web.middleware.bad_request"
handler404 = "jobs.web.middleware.page_not_found"
handler500 = "jobs.web.middleware.server_error"
