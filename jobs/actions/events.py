"""The transcript: events appended with gap-free seqs, and read back in order."""

from collections.abc import Iterable
from typing import Any, cast

from django.db import connection, transaction
from django.db.models import Field
from django.utils import timezone

from jobs.actions import rows
from jobs.actions.webhooks import EVENT_KINDS, enqueue_deliveries
from jobs.core import doorbell
from jobs.core.errors import Conflict, ErrorCode, InvalidInput
from jobs.core.inputs import MAX_INT
from jobs.core.vocabulary import TERMINAL_STATUSES
from jobs.models import Task, TaskEvent


class WriteRefused(Conflict):
    """A write the task takes no more, and nothing of it was written: the task has ended (its terminal status event
    is its last), or a run wrote to a task no longer running under that run's claim (docs/architecture.md,
    "Fencing")."""

    code = ErrorCode.TASK_ENDED


def append_events(task: Task, events: Iterable[tuple[str, dict]]) -> int:
    """Append events with gap-free seqs in one transaction; returns the task's last seq.

    The seqs are taken by one increment of the task's `last_seq` (whoever else appends waits for this transaction),
    and the rows go in as one plain batched INSERT: building them through the ORM cost several times the write.
    A task's terminal status event is its last: the batch that holds it closes the task in the statement that takes
    its seqs (`Task.claim` becomes NULL), and every append after it is refused (WriteRefused) with the transaction it
    is part of, whoever makes it.

    A batch holding a status or permission event also writes its webhook deliveries, in the same transaction
    (jobs/actions/webhooks.py): every other batch, a run's output, pays only for that look at its kinds."""
    events = list(events)
    if not events:
        return task.last_seq
    with transaction.atomic(savepoint=False):  # a refusal rolls back the whole of the caller's write
        last = _take_seqs(task.pk, len(events), closes=_closing_status(events))
        if last is None:
            raise refusal_after_end(task)
        _insert_events(task.pk, last - len(events) + 1, events)
        if not EVENT_KINDS.isdisjoint(kind for kind, _ in events):
            enqueue_deliveries(task, events)
        doorbell.ring(str(task.public_id))
    task.last_seq = last
    return last


def _closing_status(events: list[tuple[str, dict]]) -> str | None:
    """The terminal status the batch records, if it holds the task's terminal status event (which must be its last
    event: nothing comes after it), else None."""
    ending = [
        i for i, (kind, data) in enumerate(events) if kind == "status" and data.get("status") in TERMINAL_STATUSES
    ]
    if not ending:
        return None
    if ending != [len(events) - 1]:
        raise ValueError(
            f"a terminal status event must be the last event of its batch, not at {ending} of {len(events)}"
        )
    return events[-1][1]["status"]


def _take_seqs(task_pk: int, count: int, closes: str | None) -> int | None:
    """Move the task's last seq on by `count`; returns the new last seq (the batch is the `count` before it), or None
    when the task is closed. A batch that `closes` the task (with that terminal status, already set) closes it."""
    quote = connection.ops.quote_name
    last_seq, claim, status = (
        quote(cast(Field, Task._meta.get_field(name)).column) for name in ("last_seq", "claim", "status")
    )
    table, pk = quote(Task._meta.db_table), quote(Task._meta.pk.column)
    sql = f"UPDATE {table} SET {last_seq} = {last_seq} + %s"
    params: list[Any] = [count]
    if closes is not None:
        sql += f", {claim} = NULL"
    sql += f" WHERE {pk} = %s AND {claim} IS NOT NULL"
    params.append(task_pk)
    if closes is not None:
        sql += f" AND {status} = %s"
        params.append(closes)
    returning = connection.features.can_return_columns_from_insert  # SQLite before 3.35 has no RETURNING either
    with connection.cursor() as cursor:
        cursor.execute(sql + (f" RETURNING {last_seq}" if returning else ""), params)
        if returning:
            row = cursor.fetchone()
            return None if row is None else row[0]
        if cursor.rowcount == 0:
            return None
    return Task.objects.values_list("last_seq", flat=True).get(pk=task_pk)


def refusal_after_end(task: Task) -> WriteRefused:
    """The refusal of a write to a closed task (its events, its transcript's lines), saying how it ended."""
    status = Task.objects.filter(pk=task.pk).values_list("status", flat=True).first() or "gone"
    return WriteRefused(
        f"task {task.public_id} has ended ({status}): its terminal status event is its last, so nothing more is "
        "written to it; nothing of this write was",
        status=status,
    )


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
