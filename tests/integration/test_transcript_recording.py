"""A task's raw transcript as its run records it (jobs/supervision/recording.py, jobs/actions/transcripts.py): every
line of the agent's stdout once, in order, numbered from 1 without a gap, in the write of the events it became; through
outages and commits whose answer was lost; never after the task's end; bounded per line and per task; gone with its
task.

Generated streams (any bytes, empty lines, lines around BRIDGE_MAX_LINE_BYTES) go through the stdout reader into a
run's `Recorder` under the task's claim, as a supervisor's run does, while the database fails as generated.
"""

import io
import itertools
import queue
from collections.abc import Iterator

import pytest
from django.db import OperationalError, transaction
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from jobs import actions
from jobs.actions import runs
from jobs.actions.events import WriteRefused
from jobs.actions.transcripts import append_lines, row_bytes
from jobs.core.resilience import Outage
from jobs.core.vocabulary import TERMINAL_STATUSES, Status
from jobs.models import Task, TaskEvent, TaskLine
from jobs.supervision.recording import OUTPUT_ENDED, LineReader, Oversized, Recorder
from tests.support import make_task

pytestmark = pytest.mark.django_db(transaction=True)

CAP = 1024  # BRIDGE_MAX_LINE_BYTES at its lowest
LOST = "server closed the connection unexpectedly"
EXAMPLES = hypothesis_settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)

ODD_LINES = [
    b"",
    b"\r",
    b"\x00",
    b"\xff\xfe not UTF-8",
    "\u2028 héllo 😀".encode(),
    b'{"type": "system"}',
    "é".encode()[:1],
]
line_texts = st.one_of(
    st.binary(max_size=80).map(lambda line: line.replace(b"\n", b"")),
    st.sampled_from(ODD_LINES),
    st.integers(CAP - 2, 3 * CAP).map(lambda n: ("é" * n).encode()[:n]),  # around the cap, ending inside a character
)
# the agent's whole stdout: lines, with or without a newline after the last
streams = st.tuples(st.lists(line_texts, max_size=30), st.booleans()).map(
    lambda drawn: b"\n".join(drawn[0]) + (b"\n" if drawn[1] and drawn[0] else b"")
)
# what each write meets: the database answering, away (nothing written), or a commit whose answer is lost
fates = st.lists(st.sampled_from(["ok", "away", "lost"]), max_size=40)


@pytest.fixture(autouse=True)
def _small_lines(settings, work_root):
    settings.BRIDGE_MAX_LINE_BYTES = CAP


def running_task(prompt: str = "say hi") -> Task:
    """A task claimed by a supervisor registered here: a run's writes land under its claim."""
    task = make_task(prompt)
    claimed = actions.claim_next_task(actions.register_worker(1))
    assert claimed is not None and claimed.pk == task.pk
    return claimed


def recorder(task: Task) -> Recorder:
    """A run's recorder, whose backoff is always over (its clock jumps 100 s at each look)."""
    rec = Recorder(task, on_recorded=lambda perm: None, claim=task.claim)
    rec.outage = Outage("test", clock=itertools.count(0, 100).__next__)
    return rec


Read = list[bytes | Oversized]  # the lines one read of stdout ended


def stdout_reads(data: bytes) -> list[Read]:
    """The lines the stdout reader hands a run for `data`, read by read."""
    inbox: queue.Queue = queue.Queue()
    LineReader(io.BytesIO(data), inbox, CAP).run()
    items = [inbox.get_nowait() for _ in range(inbox.qsize())]
    assert items[-1] is OUTPUT_ENDED
    return [item.lines for item in items[:-1]]


def reads_of(lines: list[bytes], size: int) -> list[Read]:
    return [list(lines[start : start + size]) for start in range(0, len(lines), size)]


Kept = tuple[int, bytes | None, int | None]  # (n, the line's bytes or None for a note, a cut line's or note's size)


def expected_entries(data: bytes) -> list[Kept]:
    """Each line of `data` as its transcript must hold it: a line over the cap, its first CAP bytes and its size."""
    texts = data.split(b"\n")
    ended = [(text, len(text) + 1) for text in texts[:-1]] + ([(texts[-1], len(texts[-1]))] if texts[-1] else [])
    return [(n, text[:CAP], size if len(text) > CAP else None) for n, (text, size) in enumerate(ended, start=1)]


def recorded_entries(task: Task) -> list[Kept]:
    """The entries the task's rows hold, read from the rows themselves."""
    entries: list[Kept] = []
    for row in TaskLine.objects.filter(task=task):
        data = row_bytes(row)
        if row.omitted or row.note:
            entries.append((row.n, None if row.omitted else data, row.size))
            continue
        lines = data.split(b"\n")[:-1] if data.endswith(b"\n") else data.split(b"\n")
        assert len(lines) == row.last - row.n + 1, "a row holds the entries it says"
        entries.extend((n, line, None) for n, line in enumerate(lines, start=row.n))
    return entries


def notes_of(task: Task) -> list[TaskLine]:
    return list(TaskLine.objects.filter(task=task, omitted__gt=0))


class Database:
    """Makes the transcript's writes meet the given fates, one a write: `away` fails before anything is written,
    `lost` commits and then reports the connection lost (as a drop during COMMIT does)."""

    def __init__(self, monkeypatch, fates: list[str]) -> None:
        self.fates: Iterator[str] = iter(fates)
        monkeypatch.setattr(actions, "append_lines", self.append)

    def append(self, task, first, lines) -> None:
        fate = next(self.fates, "ok")
        if fate == "away":
            raise OperationalError("database is locked")
        append_lines(task, first, lines)
        if fate == "lost":
            transaction.on_commit(self.lose)

    @staticmethod
    def lose() -> None:
        raise OperationalError(LOST)


def record(rec: Recorder, reads: list[Read], flush_every: int = 1, events: bool = True) -> None:
    """A run's reading (TaskRun._read): each read's lines to the transcript, then an event for each line; a flush
    after every `flush_every` reads."""
    i = 0
    for count, lines in enumerate(reads, start=1):
        rec.add_lines(lines)
        for line in lines:
            if events:
                rec.add_events([("output", {"i": i})], line.size if isinstance(line, Oversized) else len(line))
            i += 1
        if count % flush_every == 0:
            rec.flush()


def flush_all(rec: Recorder) -> None:
    for _ in range(100):
        if rec.flush():
            return
    raise AssertionError("the writes were never all written")


@EXAMPLES
@given(data=streams, fates=fates, read_size=st.integers(1, 7), flush_every=st.integers(1, 3))
def test_every_line_is_recorded_once_in_order_numbered_from_one_through_outages_and_lost_answers(
    monkeypatch, data, fates, read_size, flush_every
):
    task = running_task()
    Database(monkeypatch, fates)
    rec = recorder(task)
    record(rec, reads_of([line for read in stdout_reads(data) for line in read], read_size), flush_every)
    flush_all(rec)
    assert recorded_entries(task) == expected_entries(data)
    outputs = [e.data["i"] for e in actions.events_since(task, 0, 10_000) if e.kind == "output"]
    assert outputs == list(range(len(expected_entries(data)))), "each line's event once, in order"


@EXAMPLES
@given(before=st.lists(line_texts, max_size=8), after=st.lists(line_texts, min_size=1, max_size=8))
def test_a_run_writes_no_line_after_its_tasks_end(before, after):
    task = running_task()
    rec = recorder(task)
    record(rec, stdout_reads(b"".join(text + b"\n" for text in before)))
    flush_all(rec)
    actions.finish_task(task, status=Status.DONE, claim=task.claim)
    record(rec, stdout_reads(b"".join(text + b"\n" for text in after)), flush_every=10)
    with pytest.raises(WriteRefused):
        rec.write_all()
    assert [line for _, line, _ in recorded_entries(task)] == [text[:CAP] for text in before]
    events = list(TaskEvent.objects.filter(task=task).order_by("seq"))
    assert events[-1].kind == "status" and events[-1].data["status"] in TERMINAL_STATUSES


def test_lines_appended_by_anyone_after_the_end_are_refused_and_not_written():
    task = running_task()
    actions.append_lines(task, 1, [b"before\n"])
    actions.finish_task(task, status=Status.FAILED, error="ended by the test")
    with pytest.raises(WriteRefused):
        actions.append_lines(task, 2, [b"after\n"])
    assert recorded_entries(task) == [(1, b"before", None)]


def test_a_task_claimed_again_numbers_its_new_runs_lines_after_the_old_ones():
    task = running_task()
    first = recorder(task)
    record(first, [[b"one\n", b"two\n"]])
    flush_all(first)
    Task.objects.filter(pk=task.pk).update(status=Status.QUEUED)  # as if it had never been claimed
    assert runs._take(task.pk, actions.register_worker(1))
    again = Task.objects.get(pk=task.pk)
    second = recorder(again)
    record(second, [[b"three\n"]])
    flush_all(second)
    first.add_line(b"stale\n")
    with pytest.raises(WriteRefused):
        first.write_all()
    assert recorded_entries(task) == [(1, b"one", None), (2, b"two", None), (3, b"three", None)]


@EXAMPLES
@given(sizes=st.lists(st.integers(0, 300), min_size=1, max_size=40), limit=st.integers(0, 3000))
def test_lines_past_the_transcript_limit_are_counted_in_one_note_at_the_end(settings, sizes, limit):
    settings.BRIDGE_MAX_TRANSCRIPT_BYTES = limit
    task = running_task()
    rec = recorder(task)
    lines = [b"x" * size + b"\n" for size in sizes]
    record(rec, reads_of(lines, 3))
    rec.end_transcript()
    flush_all(rec)
    kept = len(list(itertools.takewhile(lambda total: total <= limit, itertools.accumulate(map(len, lines)))))
    entries, not_kept = recorded_entries(task), lines[kept:]
    assert entries[:kept] == [(n, line[:-1], None) for n, line in enumerate(lines[:kept], start=1)]
    assert entries[kept:] == ([(kept + 1, None, sum(map(len, not_kept)))] if not_kept else [])
    assert [(note.omitted, "BRIDGE_MAX_TRANSCRIPT_BYTES" in note.note) for note in notes_of(task)] == (
        [(len(not_kept), True)] if not_kept else []
    )


def test_lines_held_while_the_database_is_away_are_bounded_and_every_dropped_one_is_counted(monkeypatch, settings):
    settings.BRIDGE_DB_BUFFER_BYTES = 4000
    task = running_task()
    Database(monkeypatch, ["away"] * 30)
    rec = recorder(task)
    lines = [b"%04d " % i + b"y" * 95 + b"\n" for i in range(300)]
    record(rec, reads_of(lines, 10), events=False)  # lines that became no events: only their own bound holds them
    assert rec.held_bytes <= settings.BRIDGE_DB_BUFFER_BYTES
    flush_all(rec)
    entries = recorded_entries(task)
    assert [n for n, _, _ in entries] == list(range(1, len(entries) + 1)), "numbered without a gap"
    kept = [line + b"\n" for _, line, _ in entries if line is not None]
    assert kept == lines[: len(kept)] and 0 < len(kept) < len(lines)
    assert sum(note.omitted for note in notes_of(task)) == len(lines) - len(kept)
    assert all("BRIDGE_DB_BUFFER_BYTES" in note.note for note in notes_of(task))


def test_deleting_a_task_deletes_its_transcript():
    task = running_task()
    actions.append_lines(task, 1, [b"one\n", b"two\n"])
    other = running_task()
    actions.append_lines(other, 1, [b"kept\n"])
    Task.objects.filter(pk=task.pk).delete()
    assert list(TaskLine.objects.values_list("task_id", "n", "last")) == [(other.pk, 1, 1)]
