"""History in the Django admin: search, filter and read every task, its transcript and its permission decisions.

Rows change only through jobs.actions (docs/architecture.md, "Principles" 2), so the admin is read-only except for
actions that call it: cancelling a task, creating (shown once) and revoking API tokens, removing and testing
webhooks.
"""

import json
from typing import TYPE_CHECKING, TypedDict

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.utils import flatten_fieldsets
from django.db.models import Count, QuerySet
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html, format_html_join

from jobs import actions
from jobs.core.errors import BridgeError
from jobs.core.vocabulary import TOKEN_FIELDS, ChangesState
from jobs.models import (
    AgentSession,
    ApiToken,
    PermissionRequest,
    PermissionRule,
    Task,
    TaskChanges,
    TaskEvent,
    Webhook,
    WebhookDelivery,
    Worker,
)

if TYPE_CHECKING:
    from django_stubs_ext import WithAnnotations


class _TaskCount(TypedDict):
    task_count: int  # AgentSessionAdmin.get_queryset's annotation


admin.site.site_header = "Bridge administration"
admin.site.site_title = "Bridge"
admin.site.index_title = "History: tasks, transcripts, permission decisions, tokens, webhook deliveries"
admin.site.site_url = "/"


def money(value: float | None) -> str:
    """A cost as people read it: no float noise (0.30000000000000004), no trailing zeros past the cents."""
    if value is None:
        return "–"
    text = f"{value:.6f}".rstrip("0")
    whole, _, fraction = text.partition(".")
    return f"${whole}.{fraction.ljust(2, '0')}"


def clipped(value: object, limit: int = 160) -> str:
    """Event data in one line for a list: text as it is, anything else as JSON (not a Python repr)."""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= limit else text[: limit - 1] + "…"


class ReadOnlyAdmin(admin.ModelAdmin):
    """History is never edited by hand: Bridge's own records stay what the service layer wrote."""

    def has_add_permission(self, request: HttpRequest, obj=None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj=None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj=None) -> bool:
        return False


class PermissionInline(admin.TabularInline):
    model = PermissionRequest
    fields = (
        "request_id",
        "tool_name",
        "input",
        "status",
        "updated_input",
        "message",
        "decided_by",
        "decided_via",
        "rule",
    )
    readonly_fields = fields
    extra = 0
    can_delete = False
    show_change_link = True

    def has_add_permission(self, request: HttpRequest, obj=None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj=None) -> bool:
        return False


def changed_files_html(files: list[dict]) -> str:
    """The changed files as a list, each path as text (an agent names them): status, path, lines."""
    rows = format_html_join("", "<li>{} <code>{}</code> {}</li>", (_file_row(file) for file in files))
    return format_html('<ul class="changed-files">{}</ul>', rows)


def _file_row(file: dict) -> tuple[str, str, str]:
    path = f"{file['old_path']} → {file['path']}" if file.get("old_path") else file["path"]
    lines = "binary" if file.get("binary") else f"+{file.get('added', 0)} −{file.get('removed', 0)}"
    return file["status"], path, lines


def _changes_of(task: Task) -> TaskChanges | None:
    """The task's record of what it changed, if any (the task keeps it, or its absence, for the next field)."""
    try:
        return task.changes
    except TaskChanges.DoesNotExist:
        return None


@admin.action(description="Cancel selected tasks (through actions.request_cancel)")
def cancel_tasks(modeladmin: admin.ModelAdmin, request: HttpRequest, queryset: QuerySet) -> None:
    who = f"user:{request.user.get_username()}"
    for task in queryset:
        try:
            actions.request_cancel(task, reason=f"cancelled in the admin by {who}", by=who)
        except BridgeError as exc:
            modeladmin.message_user(request, exc.message, messages.WARNING)
        else:
            modeladmin.message_user(request, f"task {task.public_id}: cancel requested", messages.SUCCESS)


@admin.register(Task)
class TaskAdmin(ReadOnlyAdmin):
    list_display = ("public_id", "status", "agent", "short_prompt", "cwd", "created_at", "own_cost", "source")
    list_filter = ("status", "agent", "source", "created_at")
    search_fields = ("prompt", "cwd", "=public_id", "=legacy_id")
    date_hierarchy = "created_at"
    actions = [cancel_tasks]
    inlines = [PermissionInline]
    readonly_fields = (
        "live_page",
        "transcript",
        "session_total",
        "how_cost_was_counted",
        "changes_state",
        "changes_counts",
        "changed_files",
        "changes_patch",
    )
    fieldsets = (
        (None, {"fields": ("live_page", "public_id", "status", "agent", "prompt", "cwd", "permission_mode")}),
        ("Run", {"fields": ("created_at", "started_at", "finished_at", "worker", "pid", "exit_code", "timeout_s")}),
        ("Outcome", {"fields": ("result", "error", "stderr_tail", "cancel_reason", "transcript")}),
        (
            "Changes in its directory",
            {"fields": ("changes_state", "changes_counts", "changed_files", "changes_patch")},
        ),
        (
            "Usage",
            {
                "fields": (
                    "own_cost",
                    "session_total",
                    "how_cost_was_counted",
                    *TOKEN_FIELDS,
                    "num_turns",
                )
            },
        ),
        ("Origin", {"fields": ("options", "source", "created_by", "legacy_id", "session", "resume_session_id")}),
    )

    def get_readonly_fields(self, request: HttpRequest, obj=None) -> list[str]:
        return flatten_fieldsets(self.fieldsets)

    @admin.display(description="prompt")
    def short_prompt(self, task: Task) -> str:
        return task.prompt[:80]

    @admin.display(description="live page")
    def live_page(self, task: Task) -> str:
        return format_html('<a href="{}">open the live task page</a>', reverse("task-page", args=[task.public_id]))

    @admin.display(description="transcript")
    def transcript(self, task: Task) -> str:
        url = reverse("admin:jobs_taskevent_changelist") + f"?task__id__exact={task.pk}"
        return format_html('<a href="{}">{} events, paged</a>', url, task.last_seq)

    @admin.display(description="changes")
    def changes_state(self, task: Task) -> str:
        """How far the record of what it changed got (jobs/actions/changes.py), and why, where nothing is recorded."""
        changes = _changes_of(task)
        if changes is None:
            return "none recorded: no snapshot was taken of its directory"
        return f"{changes.state}: {changes.reason}" if changes.reason else changes.state

    @admin.display(description="files and lines")
    def changes_counts(self, task: Task) -> str:
        changes = _changes_of(task)
        if changes is None or changes.state != ChangesState.RECORDED:
            return "–"
        counts = f"{changes.files_changed} file(s) changed, +{changes.lines_added} −{changes.lines_removed}"
        return f"{counts}; not everything is shown: {changes.left_out}" if changes.truncated else counts

    @admin.display(description="files")
    def changed_files(self, task: Task) -> str:
        changes = _changes_of(task)
        return changed_files_html(changes.files) if changes is not None and changes.files else "–"

    @admin.display(description="patch")
    def changes_patch(self, task: Task) -> str:
        changes = _changes_of(task)
        if changes is None or not changes.patch:
            return "–"
        style = "max-height: 40em; overflow: auto; white-space: pre; margin: 0"
        return format_html('<pre class="changes-patch" style="{}">{}</pre>', style, changes.patch)

    @admin.display(description="cost (this task)", ordering="cost_usd")
    def own_cost(self, task: Task) -> str:
        return money(task.cost_usd)

    @admin.display(description="session total")
    def session_total(self, task: Task) -> str:
        if task.session is None:
            return "–"
        url = reverse("admin:jobs_agentsession_change", args=[task.session.pk])
        count = task.session.tasks.count()
        return format_html(
            '{} over <a href="{}">{} task(s) of its session</a>', money(task.session.total_cost_usd), url, count
        )

    @admin.display(description="how the cost was counted")
    def how_cost_was_counted(self, task: Task) -> str:
        """From the final status event: the agent's running total, and the total this run carried on from."""
        data = task.events.filter(kind="status").newest_first().values_list("data", flat=True).first() or {}
        reported = (data.get("reported_usage") or {}).get("cost_usd")
        if reported is None:
            return "as the agent reported it" if task.cost_usd is not None else "–"
        base = (data.get("usage_base") or {}).get("cost_usd")
        text = f"the agent reported the session's running total {money(reported)}"
        if base is not None:
            text += f"; minus {money(base)}, the running total this run carried on from ({data.get('usage_base_from')})"
        if data.get("usage_note"):
            text += f". {data['usage_note']}"
        return text


@admin.register(TaskEvent)
class TaskEventAdmin(ReadOnlyAdmin):
    list_display = ("task", "seq", "kind", "summary", "created_at")
    list_filter = ("kind",)
    search_fields = ("=task__public_id",)
    list_per_page = 100
    list_select_related = ("task",)

    @admin.display(description="data")
    def summary(self, event: TaskEvent) -> str:
        data = event.data if isinstance(event.data, dict) else {"data": event.data}
        return clipped(data.get("text") or data.get("content") or data.get("status") or data.get("name") or data)


@admin.register(PermissionRequest)
class PermissionRequestAdmin(ReadOnlyAdmin):
    list_display = ("task", "tool_name", "status", "decided_by", "decided_via", "rule", "created_at", "decided_at")
    list_filter = ("status", "decided_via", "tool_name")
    search_fields = ("=task__public_id", "tool_name", "decided_by")
    list_select_related = ("task", "rule")


@admin.register(PermissionRule)
class PermissionRuleAdmin(ReadOnlyAdmin):
    """The user's permission rules, removed and expired ones too; they change only through actions (REST, MCP)."""

    list_display = ("id", "pattern", "decision", "root", "agent", "created_by", "expires_at", "removed_at")
    list_filter = ("decision", "agent")
    search_fields = ("pattern", "root", "created_by")


@admin.register(AgentSession)
class AgentSessionAdmin(ReadOnlyAdmin):
    list_display = ("session_id", "agent", "title", "cwd", "task_count", "total_cost", "updated_at")
    list_filter = ("agent",)
    search_fields = ("session_id", "title", "cwd")
    fields = ("agent", "session_id", "title", "cwd", "created_at", "updated_at", "total_cost", "task_costs")
    readonly_fields = fields

    def get_queryset(self, request: HttpRequest) -> QuerySet:
        return super().get_queryset(request).annotate(task_count=Count("tasks"))

    @admin.display(description="tasks", ordering="task_count")
    def task_count(self, session: "WithAnnotations[AgentSession, _TaskCount]") -> int:
        return session.task_count

    @admin.display(description="total cost (its tasks)", ordering="total_cost_usd")
    def total_cost(self, session: AgentSession) -> str:
        return money(session.total_cost_usd)

    @admin.display(description="cost of each task")
    def task_costs(self, session: AgentSession) -> str:
        rows = format_html_join(
            "",
            '<li><a href="{}">{}</a> {}: {}</li>',
            (
                (
                    reverse("admin:jobs_task_change", args=[task.pk]),
                    task.prompt[:60],
                    task.status,
                    money(task.cost_usd),
                )
                for task in session.tasks.order_by("created_at", "pk")[:200]
            ),
        )
        return format_html("<ul>{}</ul>", rows)


@admin.register(Worker)
class WorkerAdmin(ReadOnlyAdmin):
    list_display = ("name", "host", "pid", "capacity", "heartbeat_at", "stopped_at")


@admin.action(description="Revoke selected tokens")
def revoke_tokens(modeladmin: admin.ModelAdmin, request: HttpRequest, queryset: QuerySet) -> None:
    revoked = actions.revoke_tokens(queryset)
    modeladmin.message_user(request, f"revoked {revoked} token(s)", messages.SUCCESS)


class NewTokenForm(forms.ModelForm):
    """A revoked token's name may be taken again (jobs/actions/tokens.py), which the model's unique check would
    refuse; an active token's name is refused here, before anything is saved."""

    class Meta:
        model = ApiToken
        fields = ("name",)

    def validate_unique(self) -> None:
        name = self.cleaned_data.get("name")
        if name and ApiToken.objects.filter(name=name, revoked_at__isnull=True).exists():
            self.add_error("name", f"a token named {name!r} is active: revoke it first, or pick another name")


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    form = NewTokenForm
    list_display = ("name", "prefix", "created_at", "last_used_at", "revoked_at")
    actions = [revoke_tokens]

    def get_fields(self, request: HttpRequest, obj=None) -> tuple[str, ...]:
        return ("name",) if obj is None else ("name", "prefix", "created_at", "last_used_at", "revoked_at")

    def get_readonly_fields(self, request: HttpRequest, obj=None) -> tuple[str, ...]:
        return () if obj is None else self.get_fields(request, obj)

    def has_delete_permission(self, request: HttpRequest, obj=None) -> bool:
        return False

    def save_model(self, request: HttpRequest, obj: ApiToken, form, change: bool) -> None:
        """A new token is made by jobs.web.auth (hashed) and its plain text is shown here, once."""
        if change:
            return
        row, token = actions.create_token(obj.name)
        obj.pk, obj.prefix, obj.hash, obj.created_at = row.pk, row.prefix, row.hash, row.created_at
        self.message_user(request, f"Token {row.name!r} created. Copy it now, it is not shown again: {token}")


@admin.action(description="Remove selected webhooks (through actions.remove_webhook)")
def remove_webhooks(modeladmin: admin.ModelAdmin, request: HttpRequest, queryset: QuerySet) -> None:
    who = f"user:{request.user.get_username()}"
    for webhook in queryset:
        actions.remove_webhook(webhook.pk, by=who)
    modeladmin.message_user(request, f"removed {queryset.count()} webhook(s)", messages.SUCCESS)


@admin.action(description="Send selected webhooks a test delivery")
def test_webhooks(modeladmin: admin.ModelAdmin, request: HttpRequest, queryset: QuerySet) -> None:
    for webhook in queryset:
        try:
            delivery = actions.send_test(webhook.pk)
        except BridgeError as exc:
            modeladmin.message_user(request, exc.message, messages.WARNING)
        else:
            modeladmin.message_user(request, f"webhook {webhook.pk}: test delivery {delivery.delivery_id} queued")


@admin.register(Webhook)
class WebhookAdmin(ReadOnlyAdmin):
    """Webhooks, removed ones too; made over REST (where the secret is shown once), never shown here."""

    list_display = ("id", "url", "format", "events", "root", "agent", "created_by", "created_at", "removed_at")
    list_filter = ("format",)
    search_fields = ("url", "root", "created_by")
    exclude = ("secret",)
    actions = [remove_webhooks, test_webhooks]
    readonly_fields = ("delivery_log",)

    @admin.display(description="delivery log")
    def delivery_log(self, webhook: Webhook) -> str:
        url = reverse("admin:jobs_webhookdelivery_changelist") + f"?webhook__id__exact={webhook.pk}"
        return format_html('<a href="{}">{} deliveries</a>', url, webhook.deliveries.count())


@admin.register(WebhookDelivery)
class WebhookDeliveryAdmin(ReadOnlyAdmin):
    """The delivery log: each event sent (or still to send) to each webhook, its tries and the last error."""

    list_display = (
        "delivery_id",
        "webhook",
        "event",
        "task",
        "status",
        "attempts",
        "last_status_code",
        "short_error",
        "created_at",
        "delivered_at",
    )
    list_filter = ("status", "event")
    search_fields = ("=delivery_id", "=task__public_id", "last_error")
    list_select_related = ("webhook", "task")
    exclude = ("lease",)

    @admin.display(description="last error")
    def short_error(self, delivery: WebhookDelivery) -> str:
        return clipped(delivery.last_error, 120)
