"""History in the Django admin (read-mostly; state changes still go through jobs.actions)."""

from django.contrib import admin

from jobs.models import AgentSession, ApiToken, PermissionRequest, Task, TaskEvent, Worker


@admin.register(Task)
class TaskAdmin(admin.ModelAdmin):
    list_display = ("public_id", "agent", "status", "cwd", "created_at", "cost_usd")
    list_filter = ("status", "agent", "source")
    search_fields = ("prompt", "cwd", "public_id")
    date_hierarchy = "created_at"


@admin.register(PermissionRequest)
class PermissionRequestAdmin(admin.ModelAdmin):
    list_display = ("task", "request_id", "tool_name", "status", "decided_via", "decided_by", "created_at")
    list_filter = ("status", "decided_via")


admin.site.register(TaskEvent)
admin.site.register(AgentSession)
admin.site.register(Worker)


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    list_display = ("name", "prefix", "created_at", "last_used_at", "revoked_at")
    readonly_fields = ("prefix", "hash", "created_at", "last_used_at")
