"""What wakes an open stream (the SSE stream, a task's websocket): its task's doorbell, or this process's sweep.

A stream reads the database when its task's doorbell rings. A ring can be lost (a datagram dropped, a channel layer
reconnecting), so each stream also looked again every BRIDGE_POLL_S by itself, and settled its task if its
supervisor had died, since a dead one rings no more: an SSE stream on each of 200 quiet tasks made 400 reads a
second and kept 0.66 cores busy (tests/bench/idle.py). Instead, one sweep per event loop reads every BRIDGE_POLL_S,
in one query, what marks news on each watched task (its last seq, status and wait reason), settles those whose
supervisor died, and wakes only the streams whose task has moved past what they last read: 0.02 cores for the same
streams. A quiet stream costs nothing between rings; a lost ring still costs at most BRIDGE_POLL_S
(docs/architecture.md, "Principles" 1).

The streams' reads, and the sweep's, run on STREAM_READERS (`on_stream_readers`). `follow_transcript` is the stream
of a task's raw transcript (GET /v1/task/transcript), waking the same way.
"""

import asyncio
import json
import logging
import weakref
from collections.abc import AsyncIterator, Callable, Coroutine, Iterable
from concurrent.futures import ThreadPoolExecutor

from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import connection

from jobs import actions
from jobs.core import doorbell
from jobs.core.resilience import Outage, is_transient
from jobs.core.vocabulary import TERMINAL_STATUSES, Status
from jobs.models import Task

log = logging.getLogger(__name__)

# The streams' reads run on these threads, each keeping its database connection (SQLite) or handing it back after
# every read (PostgreSQL's pool), however many streams are open.
STREAM_READ_THREADS = 4
STREAM_READERS = ThreadPoolExecutor(max_workers=STREAM_READ_THREADS, thread_name_prefix="stream-read")

Mark = tuple[int, str, str]  # what marks news on a task: (last seq, status, wait reason)
# Rows of a transcript one read sends (each up to 256 KiB of lines, or one cut line): what a stuck client costs
# besides its socket's buffer.
TRANSCRIPT_ROWS = 8


def on_stream_readers(function: Callable[..., object]) -> Callable[..., Coroutine]:
    """`function` as a coroutine run on STREAM_READERS, its database connection handed back after it when the
    settings say so: every open stream's reads share those threads and their connections. On a thread per stream, as
    under Django's ASGI handler (a thread per request for its thread-sensitive calls), 60 open streams held 61 SQLite
    connections and 23 MB more in the web processes."""

    def call(*args, **kwargs):
        try:
            return function(*args, **kwargs)
        finally:
            connection.close_if_unusable_or_obsolete()

    return sync_to_async(call, thread_sensitive=False, executor=STREAM_READERS)


class TaskWatch:
    """One open stream's wake-ups: its task's rings, and the sweep's when the task has news the stream has not read.
    Made, waited on and closed in the stream's event loop."""

    def __init__(self, task: Task) -> None:
        self.task_pk = task.pk
        self.waiter = doorbell.AsyncWaiter(str(task.public_id))
        self.seen: Mark | None = None  # None until the stream's first read: the sweep leaves it alone until then
        self.sweep = Sweep.of_running_loop()
        self.sweep.watches.add(self)

    def read(self, last_seq: int, task: Task) -> None:
        """The stream has read `task` and its events up to `last_seq`: wake it only for news after that."""
        self.seen = (last_seq, task.status, task.wait_reason)

    async def joined(self) -> None:
        await self.waiter.joined()

    async def wait(self, timeout: float | None = None) -> bool:
        """True once the task rang or the sweep found news; False after `timeout` seconds without (None: no limit)."""
        return await self.waiter.wait(timeout)

    def close(self) -> None:
        self.sweep.watches.discard(self)
        self.waiter.close()


def read_marks(task_pks: list[int]) -> dict[int, Mark]:
    """The news marks of these tasks, after settling those whose supervisor died and explaining why queued ones wait
    (each records and rings what it changes): one light query, and one for their supervisors when any task runs."""
    rows = Task.objects.filter(pk__in=task_pks).values_list("pk", "last_seq", "status", "wait_reason", "worker_id")
    marks, worker_of = {}, {}
    for pk, last_seq, status, wait_reason, worker in rows:
        marks[pk] = (last_seq, status, wait_reason)
        if status == Status.RUNNING:
            worker_of[pk] = worker
    for task in actions.settle_running(worker_of) if worker_of else ():
        marks[task.pk] = (task.last_seq, task.status, task.wait_reason)
    if any(status == Status.QUEUED for _, status, _ in marks.values()):
        actions.explain_waits()  # at most every few seconds per process
    return marks


class Sweep:
    """Every BRIDGE_POLL_S while any stream of its event loop is open: wake the streams whose task has news for
    them. Each loop has its own (a web process has one)."""

    _of_loop: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Sweep]" = weakref.WeakKeyDictionary()

    def __init__(self) -> None:
        self.watches: set[TaskWatch] = set()
        self.outage = Outage("stream sweep")
        self.running: asyncio.Task | None = None

    @classmethod
    def of_running_loop(cls) -> "Sweep":
        loop = asyncio.get_running_loop()
        sweep = cls._of_loop.get(loop)
        if sweep is None:
            sweep = cls._of_loop[loop] = cls()
        if sweep.running is None or sweep.running.done():
            sweep.running = loop.create_task(sweep.run())
        return sweep

    async def run(self) -> None:
        while self.watches:
            await asyncio.sleep(max(settings.BRIDGE_POLL_S, self.outage.wait()))
            await self.once()

    async def once(self) -> None:
        watches = [watch for watch in self.watches if watch.seen is not None]
        if not watches:
            return
        try:
            marks = await on_stream_readers(read_marks)(sorted({watch.task_pk for watch in watches}))
        except Exception as exc:
            if is_transient(exc):  # the database is away: the streams wait on, and read when it answers again
                self.outage.failed(exc)
            else:
                log.exception("the stream sweep failed; it tries again in %s s", settings.BRIDGE_POLL_S)
            return
        self.outage.recovered()
        for watch in watches:
            mark, seen = marks.get(watch.task_pk), watch.seen
            if seen is None:
                continue  # cannot happen: `seen` is only ever set, and these watches had it set before the read
            if mark is None or mark[0] > seen[0] or mark[1:] != seen[1:]:
                watch.waiter.wake()


def ndjson(entries: Iterable[dict]) -> bytes:
    """One JSON object a line, in ASCII: no agent text can end or split a line, whichever line breaks a reader splits
    on (U+2028 and U+2029 too)."""
    return b"".join(json.dumps(entry).encode() + b"\n" for entry in entries)


def _transcript_after(task: Task, after: int, settle: bool) -> tuple[bytes, int, int]:
    """The task's transcript entries after `after` as NDJSON, how many rows held them, and the last one's number
    (`after` if none); the task re-read first, and settled first on the stream's first read (a dead supervisor rings
    no more; after that the sweep sees to it)."""
    if settle:
        actions.settle_if_orphaned(task)
    rows = actions.read_lines(task, after, TRANSCRIPT_ROWS)
    body = ndjson(entry for row in rows for entry in actions.line_data(row, after))
    return body, len(rows), rows[-1].last if rows else after


async def follow_transcript(task: Task, after: int) -> AsyncIterator[bytes]:
    """The task's raw transcript after entry `after`, one JSON object a line, then each entry it gets until it has
    ended and all are sent. It reads when its task rings or the sweep finds news for it (a run writes its lines with the
    events they became: a lost ring of lines that became none is made up for by the next event, or the end)."""
    watch = TaskWatch(task)
    try:
        first = True
        while True:
            body, count, after = await on_stream_readers(_transcript_after)(task, after, settle=first)
            first = False
            if body:
                yield body
            if count == TRANSCRIPT_ROWS:  # more may be there already
                continue
            if task.status in TERMINAL_STATUSES:  # re-read before the rows: every row was committed before its end
                return
            watch.read(task.last_seq, task)
            await watch.wait()
    finally:
        watch.close()
