"""The transcript: events appended with gap-free seqs, and read back in order."""

from collections.abc import Iterable
from typing import Any

from django.db import transaction
from django.db.models import F

from jobs import doorbell
from jobs.errors import InvalidInput
from jobs.models import Task, TaskEvent


def append_events(task: Task, events: Iterable[tuple[str, dict]]) -> int:
    """Append events with gap-free seqs in one transaction; returns the task's last seq."""
    events = list(events)
    if not events:
        return task.last_seq
    with transaction.atomic():
        Task.objects.filter(pk=task.pk).update(last_seq=F("last_seq") + len(events))
        last = Task.objects.values_list("last_seq", flat=True).get(pk=task.pk)
        first = last - len(events) + 1
        TaskEvent.objects.bulk_create(
            TaskEvent(task_id=task.pk, seq=first + i, kind=kind, data=data) for i, (kind, data) in enumerate(events)
        )
        doorbell.ring(str(task.public_id))
    task.last_seq = last
    return last


def status_event(task: Task, **extra: Any) -> tuple[str, dict]:
    """The event that records a task's (new) status."""
    return ("status", {"status": task.status, **extra})


def events_since(task: Task, since: int = 0, limit: int = 1000) -> list[TaskEvent]:
    """Up to `limit` events of a task after seq `since`, in order."""
    return list(TaskEvent.objects.filter(task=task).after(since)[:limit])


def event_data(event: TaskEvent) -> dict:
    """One transcript event as REST, SSE and websockets all show it."""
    return {"seq": event.seq, "kind": event.kind, "data": event.data, "time": event.created_at.isoformat()}


def read_transcript(task: Task, since: int, limit: int) -> list[TaskEvent]:
    """Re-read the task first, then its events after `since`. Streams rely on the order: when the task they hold
    has ended, every event up to its end was committed before, so a short batch means they have seen it all."""
    task.refresh_from_db()
    return events_since(task, since, limit)


def parse_seq(raw: str | None, name: str = "since", meaning: str = "the last seq you saw") -> int:
    """A client's last-seen seq (or list cursor): a whole number >= 0 (0 when absent)."""
    try:
        value = int(raw or 0)
    except ValueError:
        value = -1
    if value < 0:
        raise InvalidInput(f"{name} must be a whole number >= 0 ({meaning}), not {raw!r}")
    return value
