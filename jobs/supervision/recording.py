"""What a run writes to the database, and how it reads its child's output.

`Recorder` keeps a TaskRun's writes in the agent's order and survives database outages (held in memory, bounded,
written when the database answers again, never twice); `LineReader` and `TailReader` read the child's stdout as lines
and keep the tail of its stderr. The supervisor (jobs/supervision/supervisor.py) drives them.
"""

import json
import queue
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.conf import settings

from jobs import actions
from jobs.actions.runs import under_claim
from jobs.core.resilience import Outage, drop_connection, is_transient
from jobs.core.vocabulary import PermissionStatus
from jobs.models import PermissionRequest, Task, TaskEvent
from jobs.supervision.runners.base import PermissionAsk

ESSENTIAL_KINDS = frozenset({"init", "result"})
# Besides the essential ones, what a run keeps past BRIDGE_DB_BUFFER_BYTES while the database is away: its own notes.
KEPT_WHILE_AWAY = ESSENTIAL_KINDS | {"stopping", "signal", "truncated"}
HELD_EVENTS_MAX = 20_000  # events one run holds in memory while the database is away, however small they are
NOTE_BYTES = 256  # what an event Bridge makes itself counts against BRIDGE_DB_BUFFER_BYTES
LINE_HEAD_BYTES = 2000
# A pipe read asks for up to READ_CHUNK_BYTES while the agent writes faster than Bridge reads (one hand-off per
# chunk), and for QUIET_READ_BYTES once a read finds less: a read that waits holds its whole buffer, and 64 KiB for
# each of 200 quiet agents' stdout and stderr was 25 MB of the supervisor's memory.
READ_CHUNK_BYTES = 64 * 1024
QUIET_READ_BYTES = 4 * 1024


@dataclass(frozen=True, slots=True)
class Oversized:
    """A line over the cap, counted as it passed, never held whole: its first LINE_HEAD_BYTES and its size."""

    head: bytes
    size: int


@dataclass(frozen=True, slots=True)
class Output:
    """The lines one read of the child's stdout ended: each whole (bytes, its newline included) or Oversized."""

    lines: list[bytes | Oversized]


@dataclass(frozen=True, slots=True)
class OutputEnded:
    """The child's stdout is read to its end."""


OUTPUT_ENDED = OutputEnded()


class LineReader(threading.Thread):
    """Reads a child's stdout as lines, handed on as one `Output` inbox item per chunk read (a flood of small lines
    costs one queue hand-off per 64 KiB, not one per line), then `OUTPUT_ENDED`."""

    def __init__(self, stream, inbox: queue.Queue, max_bytes: int) -> None:
        super().__init__(daemon=True, name="stdout-reader")
        self.stream, self.inbox, self.max_bytes = stream, inbox, max_bytes
        self.line = bytearray()  # the line read so far, while it is within the cap
        self.over: tuple[bytes, int] | None = None  # (head, bytes so far) of a line past the cap

    def run(self) -> None:
        size = QUIET_READ_BYTES
        try:
            while chunk := self.stream.read1(size):
                size = READ_CHUNK_BYTES if len(chunk) >= QUIET_READ_BYTES else QUIET_READ_BYTES
                *ended, rest = chunk.split(b"\n")
                lines = [self._ended(piece) for piece in ended]
                self._extend(rest)
                if lines:
                    self.inbox.put(Output(lines))
        except (OSError, ValueError):
            pass
        finally:
            if self.over is not None or self.line:  # the last line had no newline
                self.inbox.put(Output([self._last()]))
            self.inbox.put(OUTPUT_ENDED)

    def _extend(self, piece: bytes) -> None:
        if self.over is not None:
            head, size = self.over
            self.over = (head + piece[: max(0, LINE_HEAD_BYTES - len(head))], size + len(piece))
            return
        self.line += piece
        if len(self.line) > self.max_bytes:
            self.over = (bytes(self.line[:LINE_HEAD_BYTES]), len(self.line))
            self.line.clear()

    def _ended(self, piece: bytes) -> bytes | Oversized:
        """The line that `piece` and a newline end."""
        if self.over is None and not self.line:  # the common case: a whole line inside one chunk
            if len(piece) > self.max_bytes:
                return Oversized(piece[:LINE_HEAD_BYTES], len(piece) + 1)
            return piece + b"\n"
        self._extend(piece)
        if self.over is not None:
            return self._last(newline=1)
        line = bytes(self.line) + b"\n"
        self.line.clear()
        return line

    def _last(self, newline: int = 0) -> bytes | Oversized:
        """The line read so far, ended (by a newline, or by the end of the output)."""
        if self.over is not None:
            (head, size), self.over = self.over, None
            return Oversized(head, size + newline)
        line = bytes(self.line)
        self.line.clear()
        return line


class TailReader(threading.Thread):
    """Keeps the last `limit` bytes of a stream (the child's stderr)."""

    def __init__(self, stream, limit: int) -> None:
        super().__init__(daemon=True, name="stderr-reader")
        self.stream, self.limit = stream, limit
        self.buffer = bytearray()
        self.total = 0

    def run(self) -> None:
        try:
            while chunk := self.stream.read1(QUIET_READ_BYTES):
                self.total += len(chunk)
                self.buffer += chunk
                del self.buffer[: max(0, len(self.buffer) - self.limit)]
        except (OSError, ValueError):
            pass

    def text(self) -> str:
        text = self.buffer.decode(errors="replace")
        if self.total > len(self.buffer):
            text = f"[… {self.total - len(self.buffer)} earlier bytes of stderr not kept]\n" + text
        return text


@dataclass
class Write:
    """One write a run owes the database, in the agent's order."""

    kind: str  # "spawned", "session", "events", "ask", "withdraw", "close_asks" or "delivered"
    payload: Any
    tried: bool = False  # a try failed: it may have been committed all the same, so look before writing it again
    after: int = 0  # the last seq this run had seen written when it was first tried: it would lie after that


class Recorder:
    """A TaskRun's writes, in order, held in memory while the database is away and written when it answers again.

    `flush` writes them oldest first; a failure keeps the failed write and all after it for the next try, after the
    outage's backoff. A write whose try failed may have been committed all the same (the connection can drop during
    COMMIT), so before it is written again the database is asked whether it is there: nothing is recorded twice.
    The events held are bounded by BRIDGE_DB_BUFFER_BYTES and HELD_EVENTS_MAX (reached only while the database is
    away or slow); past either only KEPT_WHILE_AWAY kinds are kept, and a `truncated` event counts the rest. It
    grows until a try to write it fails; that try may have committed it as it was, so what is dropped after it is
    counted by a new one: together they count every event dropped.
    """

    def __init__(self, task: Task, on_recorded: Callable[[PermissionRequest], None], claim: int | None = None) -> None:
        self.task = task
        self.on_recorded = on_recorded  # a permission request is in the database (already answered: pass it on)
        # The claim of the run whose writes these are: each lands only while the task still runs under it
        # (`actions.under_claim`); a refused one raises WriteRefused, nothing of it written. None: not a run's writes.
        self.claim = claim
        self.writes: deque[Write] = deque()
        self.outage = Outage(f"task {task.public_id}")
        self.held_bytes = 0
        self.held_events = 0
        self.note: tuple[Write, dict[str, Any]] | None = None  # the `truncated` event counting what is being dropped
        self.dropped = 0  # events dropped over the whole run
        self.delivered: set[int] = set()  # permission answers written to the agent: never twice

    def add(self, kind: str, payload: Any) -> None:
        self.writes.append(Write(kind, payload))

    def add_events(self, events: list[tuple[str, dict]], size: int = NOTE_BYTES) -> None:
        """Queue events (`size`: the bytes of output they came from)."""
        if not events:
            return
        over = (
            self.held_bytes + size > settings.BRIDGE_DB_BUFFER_BYTES or self.held_events + len(events) > HELD_EVENTS_MAX
        )
        if over or self.note is not None:  # a memory bound, whatever the database does; once dropping, no holes
            kept = [event for event in events if event[0] in KEPT_WHILE_AWAY]
            self._count_dropped(len(events) - len(kept), size)
            events = kept
        else:
            self.held_bytes += size
        self.held_events += len(events)
        self._open_batch().payload.extend(events)

    def _open_batch(self) -> Write:
        """The last queued write if it is a batch of events never tried (a tried one must stay as it was)."""
        if not self.writes or self.writes[-1].kind != "events" or self.writes[-1].tried:
            self.add("events", [])
        return self.writes[-1]

    def _count_dropped(self, count: int, size: int) -> None:
        if self.note is None or self.note[0].tried:
            data: dict[str, Any] = {"reason": "", "events": 0, "bytes": 0}
            batch = self._open_batch()
            batch.payload.append(("truncated", data))
            self.note = (batch, data)
        data = self.note[1]
        data["events"] += count
        data["bytes"] += size
        data["reason"] = (
            f"the database was unreachable: {data['events']} events ({data['bytes']} bytes of output) came after "
            f"BRIDGE_DB_BUFFER_BYTES ({settings.BRIDGE_DB_BUFFER_BYTES}) was held in memory and were not kept"
        )
        self.dropped += count

    def clear(self) -> tuple[int, int]:
        """Nothing more is to be written (the task was ended elsewhere): the writes owed are dropped. Returns how many,
        and how many events they held."""
        dropped = (len(self.writes), sum(len(w.payload) for w in self.writes if w.kind == "events"))
        self.writes.clear()
        self.held_bytes = self.held_events = 0
        self.note = None
        return dropped

    def attempt(self, call: Callable[[], object]) -> bool:
        """`call()` against the database unless waiting out a backoff; False when it failed in a way that may pass
        (the outage is recorded, the connection dropped). The outage ends when a call works and nothing is owed."""
        if not self.outage.due():
            return False
        started = self.outage.clock()
        try:
            call()
        except Exception as exc:
            if not is_transient(exc):
                raise
            self.outage.failed(exc, started)
            drop_connection()
            return False
        if not self.writes:
            self.outage.recovered()
        return True

    def flush(self) -> bool:
        """Write everything owed; False when the database failed (the rest waits for the next try)."""
        return not self.writes or self.attempt(self.write_all)

    def write_all(self) -> None:
        """Write everything owed, oldest first; a database error is raised with the failed write left first."""
        while self.writes:
            write = self.writes[0]
            if not write.tried:
                write.after = self.task.last_seq
            try:
                self._write(write)
            except Exception:
                write.tried = True
                raise
            self.writes.popleft()
        self.held_bytes = self.held_events = 0
        self.note = None

    def _write(self, write: Write) -> None:
        """One write, under the run's claim when it has one (`under_claim`: refused, nothing written, once the task is
        not running under it)."""
        if self.claim is None:
            self._write_now(write)
            return
        with under_claim(self.task, self.claim):
            self._write_now(write)

    def _write_now(self, write: Write) -> None:
        task = self.task
        if write.kind == "events":
            if not (write.tried and self._events_recorded(write.payload, write.after)):
                actions.append_events(task, write.payload)
        elif write.kind == "spawned":
            pid, create_time, argv = write.payload
            if not (write.tried and self._spawn_recorded(pid, write.after)):
                actions.mark_spawned(task, pid, create_time, argv)
        elif write.kind == "ask":
            self._record_ask(write.payload, write.tried)
        elif write.kind == "session":
            actions.link_session(task, write.payload)  # get-or-create: as good twice as once
        elif write.kind == "close_asks":  # before the agent, told to stop, withdraws them: Bridge ended them, say so
            actions.cancel_open_permissions(task, write.payload)
        elif write.kind == "withdraw":
            actions.cancel_permission(task, write.payload, "the agent withdrew the request")  # only if pending
        elif write.kind == "delivered":
            actions.mark_delivered(write.payload)

    def _record_ask(self, ask: PermissionAsk, tried: bool) -> None:
        perm = None
        if tried:  # one row and its events, in one transaction: there, or not at all
            perm = PermissionRequest.objects.filter(task=self.task, request_id=ask.request_id).first()
            if perm is not None:
                self._resync()
        if perm is None:
            perm = actions.record_permission_request(
                self.task,
                request_id=ask.request_id,
                tool_name=ask.tool_name,
                tool_input=ask.tool_input,
                tool_use_id=ask.tool_use_id,
                suggestions=ask.suggestions,
            )
        if perm.status != PermissionStatus.PENDING:
            self.on_recorded(perm)

    # --- was a failed write committed all the same? -----------------------------------------------------------
    # Only this run appends its own events, one write at a time, so the write in doubt lies after `after`, the last
    # seq the run had seen written before it first tried (others' events, decisions and cancels, may lie around it).
    def _events_recorded(self, events: list[tuple[str, dict]], after: int) -> bool:
        now_last = Task.objects.values_list("last_seq", flat=True).get(pk=self.task.pk)
        if now_last == after:
            return False
        want = [(kind, json.loads(json.dumps(data))) for kind, data in events]
        rows = list(TaskEvent.objects.filter(task_id=self.task.pk).after(after).values_list("seq", "kind", "data"))
        for start in range(len(rows) - len(want) + 1):
            if all(rows[start + i][1:] == want[i] for i in range(len(want))):
                self.task.last_seq = now_last
                return True
        return False

    def _spawn_recorded(self, pid: int, after: int) -> bool:
        spawned = TaskEvent.objects.filter(task_id=self.task.pk, kind="spawned", data__pid=pid)
        if not spawned.after(after).exists():
            return False
        self._resync()
        return True

    def _resync(self) -> None:
        """Nothing of this run's is in doubt any more: its last seen seq may move to the task's."""
        self.task.last_seq = Task.objects.values_list("last_seq", flat=True).get(pk=self.task.pk)
