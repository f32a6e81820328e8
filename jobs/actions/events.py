"""The transcript: events appended with gap-free seqs, and read back in order."""

from collections.abc import Iterable
from typing import Any, cast

from django.db import connection, transaction
from django.db.models import F, Field
from django.utils import timezone

from jobs.actions import rows
from jobs.core import doorbell
from jobs.core.errors import InvalidInput
from jobs.core.inputs import MAX_INT
from jobs.models import Task, TaskEvent


def append_events(task: Task, events: Iterable[tuple[str, dict]]) -> int:
    """Append events with gap-free seqs in one transaction; returns the task's last seq.

    The seqs are taken by one increment of the task's `last_seq` (whoever else appends waits for this transaction),
    and the rows go in as one plain batched INSERT: building them through the ORM cost several times the write."""
    events = list(events)
    if not events:
        return task.last_seq
    with transaction.atomic():
        last = _take_seqs(task.pk, len(events))
        _insert_events(task.pk, last - len(events) + 1, events)
        doorbell.ring(str(task.public_id))
    task.last_seq = last
    return last


def _take_seqs(task_pk: int, count: int) -> int:
    """Move the task's last seq on by `count`; returns the new last seq (the batch is the `count` before it)."""
    if not connection.features.can_return_columns_from_insert:  # SQLite before 3.35 has no RETURNING either
        Task.objects.filter(pk=task_pk).update(last_seq=F("last_seq") + count)
        return Task.objects.values_list("last_seq", flat=True).get(pk=task_pk)
    quote = connection.ops.quote_name
    column = quote(Task._meta.get_field("last_seq").column)
    sql = (
        f"UPDATE {quote(Task._meta.db_table)} SET {column} = {column} + %s "
        f"WHERE {quote(Task._meta.pk.column)} = %s RETURNING {column}"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [count, task_pk])
        return cursor.fetchone()[0]


def _insert_events(task_pk: int, first: int, events: list[tuple[str, dict]]) -> None:
    meta, ops = TaskEvent._meta, connection.ops
    names = ("task", "seq", "kind", "data", "created_at")
    columns = ", ".join(ops.quote_name(cast(Field, meta.get_field(name)).column) for name in names)  # concrete fields
    sql = f"INSERT INTO {ops.quote_name(meta.db_table)} ({columns}) VALUES ({', '.join(['%s'] * len(names))})"
    encoder, now = meta.get_field("data").encoder, ops.adapt_datetimefield_value(timezone.now())
    rows = [
        (task_pk, first + i, kind, ops.adapt_json_value(data, encoder), now) for i, (kind, data) in enumerate(events)
    ]
    with connection.cursor() as cursor:
        cursor.executemany(sql, rows)


def status_event(task: Task, **extra: Any) -> tuple[str, dict]:
    """The event that records a task's (new) status."""
    return ("status", {"status": task.status, **extra})


def events_since(task: Task, since: int = 0, limit: int = 1000) -> list[TaskEvent]:
    """Up to `limit` events of a task after seq `since`, in order (every stream reads these after every ring)."""
    return rows.select(TaskEvent, task_id=task.pk, above={"seq": since}, order_by=("seq",), limit=limit)


def event_data(event: TaskEvent) -> dict:
    """One transcript event as REST, SSE and websockets all show it."""
    return {"seq": event.seq, "kind": event.kind, "data": event.data, "time": event.created_at.isoformat()}


def read_transcript(task: Task, since: int, limit: int) -> list[TaskEvent]:
    """Re-read the task first, then its events after `since`. Streams rely on the order: when the task they hold
    has ended, every event up to its end was committed before, so a short batch means they have seen it all."""
    rows.refresh(task)
    return events_since(task, since, limit)


def parse_seq(raw: str | None, name: str = "since", meaning: str = "the last seq you saw") -> int:
    """A client's last-seen seq (or list cursor): a whole number from 0 to MAX_INT (0 when absent); a larger one would
    reach the database's integer column as an error."""
    try:
        value = int(raw or 0)
    except ValueError:
        value = -1
    if not 0 <= value <= MAX_INT:
        raise InvalidInput(f"{name} must be a whole number from 0 to {MAX_INT} ({meaning}), not {str(raw)[:40]!r}")
    return value
