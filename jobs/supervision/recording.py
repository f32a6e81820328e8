"""What a run writes to the database, and how it reads its child's output.

`Recorder` keeps a TaskRun's writes in the agent's order and survives database outages (held in memory, bounded,
less while the disk is full, written when the database answers again, never twice): its events, and the raw lines of
its stdout for the task's transcript (jobs/actions/transcripts.py). `LineReader` and `TailReader` read the child's
stdout as lines and keep the tail of its stderr. The supervisor (jobs/supervision/supervisor.py) drives them.
"""

import json
import queue
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.db import transaction

from jobs import actions
from jobs.actions.runs import under_claim
from jobs.actions.transcripts import CutLine, Entry, Omitted
from jobs.core.resilience import Outage, drop_connection, is_storage_full, is_transient
from jobs.core.vocabulary import PermissionStatus
from jobs.models import PermissionRequest, Task, TaskEvent
from jobs.supervision.runners.base import PermissionAsk

ESSENTIAL_KINDS = frozenset({"init", "result"})
# Besides the essential ones, what a run keeps past BRIDGE_DB_BUFFER_BYTES while the database is away: its own notes.
KEPT_WHILE_AWAY = ESSENTIAL_KINDS | {"stopping", "signal", "truncated"}
HELD_EVENTS_MAX = 20_000  # events, and lines, one run holds in memory while the database is away, however small
NOTE_BYTES = 256  # what an event Bridge makes itself counts against BRIDGE_DB_BUFFER_BYTES
LINE_HEAD_BYTES = 2000
# A pipe read asks for up to READ_CHUNK_BYTES while the agent writes faster than Bridge reads (one hand-off per
# chunk), and for QUIET_READ_BYTES once a read finds less: a read that waits holds its whole buffer, and 64 KiB for
# each of 200 quiet agents' stdout and stderr was 25 MB of the supervisor's memory.
READ_CHUNK_BYTES = 64 * 1024
QUIET_READ_BYTES = 4 * 1024


@dataclass(frozen=True, slots=True)
class Oversized:
    """A line over the cap, counted as it passed, never held whole: its first LINE_HEAD_BYTES (for its event), its
    size, and its first cap's worth of bytes (`kept`, for the transcript)."""

    head: bytes
    size: int
    kept: bytes = field(default=b"", compare=False)


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
        self.over: tuple[bytes, bytes, int] | None = None  # (head, kept, bytes so far) of a line past the cap

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
        if self.over is not None:  # `kept` is whole already: the line passed the cap
            head, kept, size = self.over
            if len(head) < LINE_HEAD_BYTES:
                head += piece[: LINE_HEAD_BYTES - len(head)]
            self.over = (head, kept, size + len(piece))
            return
        self.line += piece
        if len(self.line) > self.max_bytes:
            self.over = (bytes(self.line[:LINE_HEAD_BYTES]), bytes(self.line[: self.max_bytes]), len(self.line))
            self.line.clear()

    def _ended(self, piece: bytes) -> bytes | Oversized:
        """The line that `piece` and a newline end."""
        if self.over is None and not self.line:  # the common case: a whole line inside one chunk
            if len(piece) > self.max_bytes:
                return Oversized(piece[:LINE_HEAD_BYTES], len(piece) + 1, piece[: self.max_bytes])
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
            (head, kept, size), self.over = self.over, None
            return Oversized(head, size + newline, kept)
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

    kind: str  # "snapshot", "spawned", "session", "events", "ask", "withdraw", "close_asks", "delivered" or "changes"
    payload: Any
    tried: bool = False  # a try failed: it may have been committed all the same, so look before writing it again
    after: int = 0  # the last seq this run had seen written when it was first tried: it would lie after that
    sizes: list[int] = field(default_factory=list)  # events: the bytes of output behind each (a line's, on its first)
    # events: the agent's lines of the same output, for the transcript, written in the same transaction as the events
    lines: list[Entry] = field(default_factory=list)
    first_line: int = 0  # the number its first line takes, fixed when it is first tried


def cut_line(line: Oversized) -> CutLine:
    """A line over the cap as the transcript keeps it: its first BRIDGE_MAX_LINE_BYTES, saying why."""
    limit = settings.BRIDGE_MAX_LINE_BYTES
    note = f"a line of {line.size} bytes is over BRIDGE_MAX_LINE_BYTES ({limit}): only its first {limit} are kept"
    return CutLine(line.kept, line.size, note)


def held_size(entry: Entry) -> int:
    """The bytes of output a transcript entry holds in memory."""
    if isinstance(entry, bytes):
        return len(entry)
    return len(entry.text) if isinstance(entry, CutLine) else 0


def written_size(entry: Entry) -> int:
    """The bytes of stdout a transcript entry stands for."""
    return len(entry) if isinstance(entry, bytes) else entry.size


@dataclass
class Shedding:
    """What `Recorder.shed` keeps of the held output, oldest first, within `limit` bytes: once anything is dropped,
    everything after it is too, but for what is always kept (KEPT_WHILE_AWAY events, `Omitted` notes)."""

    limit: int
    kept_bytes: int = 0
    dropped_events: int = 0
    dropped_event_bytes: int = 0
    dropped_lines: int = 0
    dropped_line_bytes: int = 0

    def keeps(self, size: int, always: bool = False) -> bool:
        """Whether the next event or line, of `size` bytes, is kept (and then counted)."""
        if not always and (self.dropped_events or self.dropped_lines or self.kept_bytes + size > self.limit):
            return False
        self.kept_bytes += size
        return True

    def events(self, write: Write) -> None:
        held = list(zip(write.payload, write.sizes, strict=True))
        write.payload, write.sizes = [], []
        for event, size in held:
            if self.keeps(size, always=event[0] in KEPT_WHILE_AWAY):
                write.payload.append(event)
                write.sizes.append(size)
            else:
                self.dropped_events += 1
                self.dropped_event_bytes += size

    def lines(self, write: Write) -> None:
        held, write.lines = write.lines, []
        for line in held:
            if isinstance(line, Omitted) or self.keeps(held_size(line)):
                write.lines.append(line)
            else:
                self.dropped_lines += 1
                self.dropped_line_bytes += written_size(line)


class Recorder:
    """A TaskRun's writes, in order, held in memory while the database is away and written when it answers again.

    `flush` writes them oldest first; a failure keeps the failed write and all after it for the next try, after the
    outage's backoff. A write whose try failed may have been committed all the same (the connection can drop during
    COMMIT), so before it is written again the database is asked whether it is there: nothing is recorded twice.
    The events held are bounded by BRIDGE_DB_BUFFER_BYTES and HELD_EVENTS_MAX (reached only while the database is
    away or slow); past either only KEPT_WHILE_AWAY kinds are kept, and a `truncated` event counts the rest. It
    grows until a try to write it fails; that try may have committed it as it was, so what is dropped after it is
    counted by a new one: together they count every event dropped.

    While the disk that holds the database is full, the bound is BRIDGE_DB_FULL_BUFFER_BYTES, and what was held
    past it is dropped the same way (`shed`): what is held is written once space is freed, and a backlog as large
    as the normal bound would fill that space again at once. A write that failed for a full disk was not committed,
    so it may be cut down too; and each try of the end that finds the disk still full halves the bound (`narrow`),
    so the end needs less and less room and is recorded once anything can be written.

    The raw lines of the agent's stdout (`add_line`) ride in the batches of events, held and dropped by the same
    bounds (each line's bytes count besides its events'), an `Omitted` note counting what is dropped; the lines past
    BRIDGE_MAX_TRANSCRIPT_BYTES are counted in one note at the end (`end_transcript`).
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
        self.held_lines = 0
        self.line_note: tuple[Write, Omitted] | None = None  # the note counting the lines being dropped
        self.last_line: int | None = None  # the task's last transcript row written (read at the first write of lines)
        self.transcript_bytes = 0  # of stdout, kept in the transcript
        self.past_transcript = Omitted()  # the lines past BRIDGE_MAX_TRANSCRIPT_BYTES
        self.narrowed = 0  # how often the bound while the disk is full was halved (`narrow`)
        self.delivered: set[int] = set()  # permission answers written to the agent: never twice

    def add(self, kind: str, payload: Any) -> None:
        self.writes.append(Write(kind, payload))

    def held_limit(self) -> int:
        """The bytes of output this run may hold now: BRIDGE_DB_BUFFER_BYTES, or less while the disk is full."""
        if not self.outage.full:
            return settings.BRIDGE_DB_BUFFER_BYTES
        return min(settings.BRIDGE_DB_FULL_BUFFER_BYTES, settings.BRIDGE_DB_BUFFER_BYTES) >> self.narrowed

    def add_events(self, events: list[tuple[str, dict]], size: int = NOTE_BYTES) -> None:
        """Queue events (`size`: the bytes of output they came from)."""
        if not events:
            return
        over = self.held_bytes + size > self.held_limit() or self.held_events + len(events) > HELD_EVENTS_MAX
        if over or self.dropping:  # a memory bound, whatever the database does; once dropping, no holes
            kept = [event for event in events if event[0] in KEPT_WHILE_AWAY]
            self._count_dropped(len(events) - len(kept), size)
            events, size = kept, 0
        self.held_bytes += size
        self.held_events += len(events)
        batch = self._open_batch()
        batch.payload.extend(events)
        batch.sizes.extend([size] + [0] * (len(events) - 1) if events else [])

    @property
    def dropping(self) -> bool:
        """Output past the bound is being dropped (events or lines): so is all after it, until the rest is written."""
        return self.note is not None or self.line_note is not None

    def add_lines(self, lines: list[bytes | Oversized]) -> None:
        """Queue the lines of one read of the agent's stdout for the task's transcript, before the events they become:
        at once while all are whole and within every bound (the common case: one look for the read, not one a line),
        else one by one (`add_line`)."""
        whole = [line for line in lines if isinstance(line, bytes)]
        size = sum(map(len, whole))
        if len(whole) < len(lines) or not self._fit(len(lines), size):
            for line in lines:
                self.add_line(line)
            return
        self.transcript_bytes += size
        self.held_bytes += size
        self.held_lines += len(lines)
        self._open_batch().lines.extend(whole)

    def _fit(self, count: int, size: int) -> bool:
        """Whether `count` lines of `size` bytes are all kept: nothing is being dropped, and they are within the
        transcript's bound and what a run may hold."""
        return (
            not self.dropping
            and not self.past_transcript.lines
            and self.transcript_bytes + size <= settings.BRIDGE_MAX_TRANSCRIPT_BYTES
            and self.held_bytes + size <= self.held_limit()
            and self.held_lines + count <= HELD_EVENTS_MAX
        )

    def add_line(self, line: bytes | Oversized) -> None:
        """Queue one line of the agent's stdout for the task's transcript, before the events it becomes: whole, or
        cut at BRIDGE_MAX_LINE_BYTES (saying so). While output is being dropped it is counted in an `Omitted` note in
        its place; past BRIDGE_MAX_TRANSCRIPT_BYTES, in the one `end_transcript` adds."""
        if isinstance(line, Oversized):
            entry: Entry = cut_line(line)
            kept, written = len(line.kept), line.size
        else:
            entry, kept = line, len(line)
            written = kept
        if self.past_transcript.lines or self.transcript_bytes + kept > settings.BRIDGE_MAX_TRANSCRIPT_BYTES:
            self.past_transcript.lines += 1
            self.past_transcript.size += written
            return
        if self.dropping or self.held_bytes + kept > self.held_limit() or self.held_lines >= HELD_EVENTS_MAX:
            self._count_dropped_lines(1, written)
            return
        self.transcript_bytes += kept
        self.held_bytes += kept
        self.held_lines += 1
        self._open_batch().lines.append(entry)

    def end_transcript(self) -> None:
        """The agent's output is all read: the lines past BRIDGE_MAX_TRANSCRIPT_BYTES, if any, are noted last."""
        past = self.past_transcript
        if past.lines and not past.note:
            past.note = (
                f"{past.lines} lines ({past.size} bytes) came after the {self.transcript_bytes} bytes of stdout a "
                f"transcript keeps (BRIDGE_MAX_TRANSCRIPT_BYTES={settings.BRIDGE_MAX_TRANSCRIPT_BYTES}) and were not "
                "kept"
            )
            self._open_batch().lines.append(past)

    def _count_dropped_lines(self, count: int, size: int) -> None:
        """Count dropped lines in the open note: one in the last batch, unless the one open is still untried."""
        if self.line_note is None or self.line_note[0].tried:
            note, batch = Omitted(), self._open_batch()
            batch.lines.append(note)
            self.line_note = (batch, note)
        note = self.line_note[1]
        note.lines += count
        note.size += size
        note.note = self._why_dropped(f"{note.lines} lines ({note.size} bytes)")

    def _open_batch(self) -> Write:
        """The last queued write if it is a batch of events never tried (a tried one must stay as it was)."""
        if not self.writes or self.writes[-1].kind != "events" or self.writes[-1].tried:
            self.add("events", [])
        return self.writes[-1]

    def _note(self) -> dict[str, Any]:
        """The open `truncated` event's data; a new one at the end of the queue if none is open (or it was tried)."""
        if self.note is None or self.note[0].tried:
            data: dict[str, Any] = {"reason": "", "events": 0, "bytes": 0}
            batch = self._open_batch()
            batch.payload.append(("truncated", data))
            batch.sizes.append(0)
            self.note = (batch, data)
        return self.note[1]

    def _count_dropped(self, count: int, size: int) -> None:
        data = self._note()
        data["events"] += count
        data["bytes"] += size
        data["reason"] = self._why_dropped(f"{data['events']} events ({data['bytes']} bytes of output)")
        self.dropped += count

    def _why_dropped(self, what: str) -> str:
        if self.outage.full:
            return (
                f"the disk that holds the database is full: {what} came after the {self.held_limit()} bytes a run "
                "holds while it is (BRIDGE_DB_FULL_BUFFER_BYTES) and were not kept"
            )
        return (
            f"the database was unreachable: {what} came after BRIDGE_DB_BUFFER_BYTES "
            f"({settings.BRIDGE_DB_BUFFER_BYTES}) was held in memory and were not kept"
        )

    def narrow(self) -> None:
        """The end could not be written for a full disk: hold half as much output, so the next try needs less room."""
        self.narrowed += 1
        self.shed()

    def shed(self) -> None:
        """Drop the output held past `held_limit` (the oldest is kept, and nothing after the first dropped;
        KEPT_WHILE_AWAY kinds and `Omitted` notes always are), counted by a `truncated` note and an `Omitted` one
        after what is kept. Writes a try may have committed stay as they are."""
        cut = Shedding(self.held_limit())
        for write in self.writes:
            if write.kind != "events":
                continue
            if write.tried:
                cut.kept_bytes += sum(write.sizes) + sum(map(held_size, write.lines))
                continue
            cut.events(write)
            cut.lines(write)
        batches = [write for write in self.writes if write.kind == "events"]
        self.held_bytes = cut.kept_bytes
        self.held_events = sum(len(write.payload) for write in batches)
        self.held_lines = sum(not isinstance(line, Omitted) for write in batches for line in write.lines)
        if cut.dropped_events:
            self._count_dropped(cut.dropped_events, cut.dropped_event_bytes)
        if cut.dropped_lines:
            self._count_dropped_lines(cut.dropped_lines, cut.dropped_line_bytes)

    def clear(self) -> tuple[int, int]:
        """Nothing more is to be written (the task was ended elsewhere): the writes owed are dropped. Returns how many,
        and how many events they held."""
        dropped = (len(self.writes), sum(len(w.payload) for w in self.writes if w.kind == "events"))
        self.writes.clear()
        self.held_bytes = self.held_events = self.held_lines = 0
        self.note = self.line_note = None
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
            if self.outage.full:
                self.shed()
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
                write.first_line = self._next_line() if write.lines else 0
            try:
                self._write(write)
            except Exception as exc:
                # one the disk had no room for was not committed: unless an earlier try may have been, it may change
                write.tried = write.tried or not is_storage_full(exc)
                raise
            self.writes.popleft()
            if write.lines:
                self.last_line = write.first_line + len(write.lines) - 1
        self.held_bytes = self.held_events = self.held_lines = 0
        self.note = self.line_note = None

    def _next_line(self) -> int:
        """The number the next transcript row takes: after the task's last, read once (a run claimed again after
        another's lines goes on from them) and counted here after that, since only this run writes them."""
        if self.last_line is None:
            self.last_line = actions.last_line(self.task)
        return self.last_line + 1

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
            if not (write.tried and self._output_recorded(write)):
                self._append_output(write)
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
        elif write.kind == "snapshot":
            actions.begin_changes(task, write.payload)  # update-or-create: as good twice as once
        elif write.kind == "changes":
            actions.record_changes(task, write.payload)  # only while pending: its event is written once

    def _append_output(self, write: Write) -> None:
        """A batch's events and the lines they came from: both, or neither."""
        if not write.lines:
            actions.append_events(self.task, write.payload)
            return
        with transaction.atomic(savepoint=False):
            actions.append_events(self.task, write.payload)
            actions.append_lines(self.task, write.first_line, write.lines)

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
    def _output_recorded(self, write: Write) -> bool:
        """Its lines are numbered: the first one is there or not (with the events written with it). A batch without
        lines is looked for among the events."""
        if not write.lines:
            return self._events_recorded(write.payload, write.after)
        if not actions.line_recorded(self.task, write.first_line):
            return False
        self._resync()
        return True

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
