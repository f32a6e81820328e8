"""A task's raw transcript: each line its agent wrote on stdout, as it wrote it, numbered gap-free from 1 (what hbridge
kept in ~/.hbridge_transcript.jsonl); and read back in order (GET /v1/task/transcript).

A run appends its lines in the transaction that appends the events they became (jobs/supervision/recording.py), so
they are written in the agent's order, held while the database is away, fenced like events and never written twice.
Lines kept whole are stored a run of them to a row, as the bytes the agent wrote (its stdout itself, newlines and
all), compressed (zlib's fastest level: agents' JSON lines shrink several times over, for a fraction of what writing
them whole cost): a row per line cost a third of the ingest rate (tests/bench/ingest.py).
"""

import base64
import codecs
import zlib
from dataclasses import dataclass
from typing import Any, cast

from django.db import connection, transaction
from django.db.models import Field, Max

from jobs.actions import rows
from jobs.actions.events import refusal_after_end
from jobs.core import doorbell
from jobs.models import Task, TaskLine

RUN_BYTES = 256 * 1024  # a row holds whole lines up to this many bytes (or one longer line)


@dataclass(frozen=True, slots=True)
class CutLine:
    """A line over BRIDGE_MAX_LINE_BYTES as a run keeps it: its start, the bytes the agent wrote for it (its newline
    included), and why it was cut."""

    text: bytes
    size: int
    note: str


@dataclass(slots=True)
class Omitted:
    """The agent's lines a run did not keep, in their place: how many, their bytes, and why. It grows until written."""

    lines: int = 0
    size: int = 0
    note: str = ""


# One entry of a transcript, as a run holds it: a line kept whole (its bytes as read, its newline included), a cut
# line, or a note standing for lines not kept. Each takes one number.
Entry = bytes | CutLine | Omitted
Row = tuple[int, int, bytes, int, int, str]  # (first, last, data, size, omitted, note)


def append_lines(task: Task, first: int, entries: list[Entry]) -> None:
    """Append `entries` as numbers `first`, `first` + 1, … in one transaction (the caller's, when it has one). A task's
    terminal status event is its last: once it is written this is refused (WriteRefused) with the transaction it is
    part of, like every append (jobs/actions/events.py)."""
    if not entries:
        return
    with transaction.atomic(savepoint=False):
        if not _takes_writes(task.pk):
            raise refusal_after_end(task)
        _insert(task.pk, stored_rows(first, entries))
        doorbell.ring(str(task.public_id))


def stored_rows(first: int, entries: list[Entry]) -> list[Row]:
    """The rows that hold `entries`: each run of whole lines as one (up to RUN_BYTES), a cut line or a note alone."""
    out: list[Row] = []
    run: list[bytes] = []
    run_bytes = 0
    for n, entry in enumerate(entries, start=first):
        if isinstance(entry, bytes) and (not run or run_bytes + len(entry) <= RUN_BYTES):
            run.append(entry)
            run_bytes += len(entry)
            continue
        if run:
            out.append(_run_row(n - len(run), run))
            run, run_bytes = [], 0
        if isinstance(entry, bytes):
            run, run_bytes = [entry], len(entry)
        elif isinstance(entry, CutLine):
            out.append((n, n, zlib.compress(entry.text, 1), entry.size, 0, entry.note))
        else:
            out.append((n, n, b"", entry.size, entry.lines, entry.note))
    if run:
        out.append(_run_row(first + len(entries) - len(run), run))
    return out


def _run_row(first: int, run: list[bytes]) -> Row:
    data = b"".join(run)
    return (first, first + len(run) - 1, zlib.compress(data, 1), len(data), 0, "")


def row_bytes(row: TaskLine) -> bytes:
    """What the row holds: its lines as the agent wrote them, or a cut line's start (empty for a note)."""
    return zlib.decompress(row.data) if row.data else b""


def _takes_writes(task_pk: int) -> bool:
    """Whether the task is still open (its claim not yet NULL), its row locked until the transaction ends so that it
    cannot be ended meanwhile (SQLite's write lock is held from BEGIN)."""
    quote = connection.ops.quote_name
    claim = quote(cast(Field, Task._meta.get_field("claim")).column)
    sql = f"SELECT 1 FROM {quote(Task._meta.db_table)} WHERE {quote(Task._meta.pk.column)} = %s AND {claim} IS NOT NULL"
    if connection.features.has_select_for_update:
        sql += " FOR UPDATE"
    with connection.cursor() as cursor:
        cursor.execute(sql, [task_pk])
        return cursor.fetchone() is not None


def _insert(task_pk: int, stored: list[Row]) -> None:
    """One plain batched INSERT, as events are written (the ORM cost several times the write)."""
    meta, ops = TaskLine._meta, connection.ops
    names = ("task", "n", "last", "data", "size", "omitted", "note")
    columns = ", ".join(ops.quote_name(cast(Field, meta.get_field(name)).column) for name in names)
    sql = f"INSERT INTO {ops.quote_name(meta.db_table)} ({columns}) VALUES ({', '.join(['%s'] * len(names))})"
    with connection.cursor() as cursor:
        cursor.executemany(sql, [(task_pk, *row) for row in stored])


def last_line(task: Task) -> int:
    """The number of the task's last transcript entry (0: none yet)."""
    return TaskLine.objects.filter(task_id=task.pk).aggregate(last=Max("last"))["last"] or 0


def line_recorded(task: Task, n: int) -> bool:
    """Whether entry `n` of the task's transcript is written (a write whose try failed may have been committed)."""
    return TaskLine.objects.filter(task_id=task.pk, last__gte=n).exists()


def rows_after(task: Task, after: int, limit: int) -> list[TaskLine]:
    """Up to `limit` rows of the task's transcript holding entries after `after`, in order."""
    return rows.select(TaskLine, task_id=task.pk, above={"last": after}, order_by=("last",), limit=limit)


def read_lines(task: Task, after: int, limit: int) -> list[TaskLine]:
    """Re-read the task first, then its rows after entry `after`: when the task it holds has ended, every row was
    committed before its end, so a stream that gets fewer than `limit` has seen them all."""
    rows.refresh(task)
    return rows_after(task, after, limit)


def line_data(row: TaskLine, after: int = 0) -> list[dict[str, Any]]:
    """The row's entries after `after` as the API shows them: {"n", "line"}, the line as text without its newline;
    with "base64" (its exact bytes) when it is not UTF-8, and "cut" (why) and "bytes" (its whole size) when it was
    cut. Lines not kept are one entry {"n", "omitted": why, "lines", "bytes"} in their place."""
    if row.omitted:
        return [{"n": row.n, "omitted": row.note, "lines": row.omitted, "bytes": row.size}] if row.n > after else []
    data = row_bytes(row)
    if row.note:
        return [_line(row.n, data, cut=True) | {"cut": row.note, "bytes": row.size}] if row.n > after else []
    lines = data.split(b"\n")
    if data.endswith(b"\n"):
        lines.pop()
    return [_line(n, line) for n, line in enumerate(lines, start=row.n) if n > after]


def _line(n: int, raw: bytes, cut: bool = False) -> dict[str, Any]:
    text, exact = as_text(raw, cut)
    return {"n": n, "line": text} if exact else {"n": n, "line": text, "base64": base64.b64encode(raw).decode("ascii")}


def as_text(raw: bytes, cut: bool = False) -> tuple[str, bool]:
    """A line's bytes as text, and whether that text is exactly those bytes in UTF-8 (invalid bytes become U+FFFD).
    A cut line may end inside a character: that part is left out rather than replaced."""
    try:
        return codecs.getincrementaldecoder("utf-8")().decode(raw, final=not cut), True
    except UnicodeDecodeError:
        return raw.decode("utf-8", errors="replace"), False
