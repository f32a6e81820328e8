"""The database reads behind the MCP replies that jobs.actions does not offer: all of them in one place (Hermes' own
session store included), and `in_db`, which runs them (and every other ORM call of the tools) off the event loop."""

import dataclasses
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any

from asgiref.sync import sync_to_async
from django.db import close_old_connections

from jobs import actions
from jobs.core.vocabulary import Agent, Status
from jobs.models import PermissionRequest, Task, TaskEvent

# What counts as the agent's output: Claude's whole text blocks; Hermes' one-shot lines; any ACP agent's message
# fragments (ACP_OUTPUT_KINDS).
OUTPUT_KINDS: dict[str, tuple[str, ...]] = {
    Agent.CLAUDE: ("text", "stdout"),
    Agent.HERMES: ("output", "text_delta", "stdout"),
}
ACP_OUTPUT_KINDS = ("text_delta", "stdout")
LAST_LINE_CHARS = 500  # of the output tail read for its newest line


def output_tail(task: Task, chars: int) -> str:
    """The last `chars` characters the agent said, newest events read first; fragments join without a break."""
    pieces, size = [], 0
    events = TaskEvent.objects.filter(task=task, kind__in=OUTPUT_KINDS.get(task.agent, ACP_OUTPUT_KINDS)).newest_first()
    for kind, data in events.values_list("kind", "data"):
        text = str(data.get("text", ""))
        pieces.append(text if kind == "text_delta" else text + "\n")
        size += len(pieces[-1])
        if size >= chars:
            break
    return "".join(reversed(pieces)).rstrip("\n")[-chars:]


def queued_ahead(task: Task) -> int:
    """How many queued tasks a free worker takes before this one."""
    return Task.objects.queued_in_order().filter(created_at__lt=task.created_at).count()


@dataclasses.dataclass(frozen=True)
class Watched:
    """A waited-on task as one look saw it."""

    needs_attention: bool
    status: str
    since: datetime  # when it started (or was queued)
    pending: list[PermissionRequest]  # oldest first
    last_line: str  # its newest output line; '' unless asked for

    @property
    def state(self) -> tuple[str, tuple[int, ...], str]:
        """What a change of is news to a client following the wait: the status, the questions, the newest line."""
        return self.status, tuple(perm.pk for perm in self.pending), self.last_line


def watched(task_pk: int, with_last_line: bool = False) -> Watched:
    """One look at a waited-on task. It needs attention, and a waiting tool returns early, when it ends (its
    supervisor dying included), asks a question, or waits for a supervisor that can run it (the reply's WAITING line
    says why and the fix)."""
    task = actions.settle_if_orphaned(Task.objects.get(pk=task_pk))
    pending = [] if task.is_terminal else actions.pending_permissions(task)
    needs_attention = task.is_terminal or bool(pending)
    if not needs_attention and task.status == Status.QUEUED and actions.none_can_run(task):
        actions.tell_why_queued(Task.objects.filter(pk=task_pk))  # its WAITING line says so now, not at the next look
        needs_attention = True
    line = last_output_line(task) if with_last_line else ""
    return Watched(needs_attention, task.status, task.started_at or task.created_at, pending, line)


def needs_attention(task_pk: int) -> bool:
    """Whether a waiting tool would return now (`watched`)."""
    return watched(task_pk).needs_attention


def last_output_line(task: Task) -> str:
    """The newest line the agent said, for a progress message."""
    lines = output_tail(task, LAST_LINE_CHARS).splitlines()
    return next((line for line in reversed(lines) if line.strip()), "")


def permission(perm_pk: int) -> PermissionRequest:
    return PermissionRequest.objects.get(pk=perm_pk)


def is_pending(perm_pk: int) -> bool:
    return PermissionRequest.objects.pending().filter(pk=perm_pk).exists()


def newest_tasks(limit: int) -> list[Task]:
    return list(Task.objects.newest_first()[:limit])


def in_db(fn: Callable[..., Any]) -> Callable[..., Awaitable[Any]]:
    """Run a sync function that uses the ORM off the event loop, on a fresh-enough connection."""

    def wrapped(*args: Any, **kwargs: Any) -> Any:
        close_old_connections()
        return fn(*args, **kwargs)

    return sync_to_async(wrapped, thread_sensitive=True)
