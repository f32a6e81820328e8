"""No task is ever stuck: a supervisor rides out a lost, refused or locked database (docs/architecture.md, "Process
model"), and past BRIDGE_DB_OUTAGE_S stops the agent and records the task as failed once the database answers.

Three kinds of test: the retry helper against generated failure sequences (a fake clock, no database); writes whose
COMMIT went through though the answer was lost, injected in-process on the real database (nothing recorded or
delivered twice); and real faults: `pg_terminate_backend` and `ALLOW_CONNECTIONS false` on PostgreSQL against a
`manage.py supervise` process, another connection holding SQLite's write lock. No sleep synchronises anything: every
wait is for a row, an event, a log record or a process, with a deadline.
"""

import gc
import json
import logging
import os
import random
import re
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest
from django.db import (
    DatabaseError,
    IntegrityError,
    InterfaceError,
    OperationalError,
    ProgrammingError,
    connection,
    transaction,
)

from jobs import actions, processes
from jobs.core.resilience import Backoff, Outage, is_transient, retry
from jobs.core.vocabulary import Status
from jobs.models import PermissionRequest, Task, TaskEvent
from jobs.supervision.recording import Recorder
from jobs.supervision.supervisor import Supervisor, TaskRun
from tests.support import (
    database_url,
    has_event,
    make_task,
    postgres_or_skip,
    rerun_on_postgres,
    terminate_backends,
    wait_for,
    wait_until,
)

REPO = Path(__file__).resolve().parents[2]
LOST = "server closed the connection unexpectedly"
POSTGRES_URL = os.environ.get("BRIDGE_TEST_POSTGRES_URL", "postgres://postgres@127.0.0.1:5432/bridge_db_faults")


def on_postgres() -> bool:
    return connection.vendor == "postgresql"


# --- the retry helper, against generated failure sequences --------------------------------------------------------

TRANSIENT = [
    lambda: OperationalError(LOST),
    lambda: OperationalError("terminating connection due to administrator command"),
    lambda: OperationalError("FATAL: sorry, too many clients already"),
    lambda: OperationalError("database is locked"),
    lambda: InterfaceError("connection already closed"),
    lambda: DatabaseError("SSL connection has been closed unexpectedly"),
]
PERMANENT = [
    lambda: IntegrityError("UNIQUE constraint failed: jobs_taskevent.task_id, jobs_taskevent.seq"),
    lambda: ProgrammingError('relation "jobs_task" does not exist'),
    lambda: OperationalError("no such table: jobs_task"),
    lambda: DatabaseError("value too long for type character varying(32)"),
    lambda: ValueError("not a database error at all"),
]


class FakeTime:
    """A clock that only `sleep` moves, so a test of waits takes no time."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.slept: list[float] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


class Script:
    """A call that raises each exception of `failures` in turn, then returns "ok"; counts calls and reconnects."""

    def __init__(self, failures: list[BaseException]) -> None:
        self.failures = list(failures)
        self.calls = 0
        self.reconnects = 0

    def __call__(self) -> str:
        self.calls += 1
        if self.failures:
            raise self.failures.pop(0)
        return "ok"

    def reconnect(self) -> None:
        self.reconnects += 1


def outage_logs(caplog, what: str) -> tuple[int, int]:
    began = sum(1 for r in caplog.records if r.getMessage().startswith(f"{what}: the database is unreachable"))
    ended = sum(1 for r in caplog.records if r.getMessage().startswith(f"{what}: the database answers again"))
    return began, ended


@pytest.mark.parametrize("seed", range(25))
def test_retry_rides_out_any_run_of_transient_failures(seed, caplog):
    rng = random.Random(seed)
    failures = [rng.choice(TRANSIENT)() for _ in range(rng.randrange(0, 20))]
    fake, call = FakeTime(), Script(failures)
    outage = Outage("unit", backoff=Backoff(rng=random.Random(seed)), clock=fake.clock)
    caplog.set_level(logging.WARNING, logger="jobs.core.resilience")

    assert retry(call, outage, sleep=fake.sleep, reconnect=call.reconnect) == "ok"

    assert call.calls == len(failures) + 1 and call.reconnects == len(failures)
    assert len(fake.slept) == len(failures)
    for attempt, delay in enumerate(fake.slept):  # doubling, capped, jittered within the upper half
        ceiling = min(0.05 * 2**attempt, 2.0)
        assert ceiling / 2 <= delay <= ceiling
    assert outage_logs(caplog, "unit") == ((1, 1) if failures else (0, 0)), "one line when it begins, one at its end"
    assert not outage.down and outage.due()


@pytest.mark.parametrize("seed", range(10))
def test_retry_raises_what_no_wait_cures_at_once(seed):
    rng = random.Random(seed)
    transient = [rng.choice(TRANSIENT)() for _ in range(rng.randrange(0, 5))]
    permanent = rng.choice(PERMANENT)()
    fake, call = FakeTime(), Script([*transient, permanent])
    outage = Outage("unit", clock=fake.clock)
    with pytest.raises(type(permanent)):
        retry(call, outage, sleep=fake.sleep, reconnect=call.reconnect)
    assert call.calls == len(transient) + 1, "not tried again"
    assert not is_transient(permanent)


@pytest.mark.parametrize("seed", range(10))
def test_retry_gives_up_after_the_outage_limit(seed):
    rng = random.Random(seed)
    limit = rng.uniform(0.5, 30)
    fake, call = FakeTime(), Script([rng.choice(TRANSIENT)() for _ in range(10_000)])
    outage = Outage("unit", backoff=Backoff(rng=rng), clock=fake.clock)
    start = fake.now
    with pytest.raises((DatabaseError, InterfaceError)):
        retry(call, outage, give_up_after=limit, sleep=fake.sleep, reconnect=call.reconnect)
    assert limit <= fake.now - start < limit + 2.0, "gives up at the first failure past the limit"


def test_one_outage_is_one_pair_of_log_lines_however_many_retries(caplog):
    caplog.set_level(logging.WARNING, logger="jobs.core.resilience")
    fake = FakeTime()
    outage = Outage("loop", clock=fake.clock, backoff=Backoff(rng=random.Random(7)))
    rng = random.Random(7)
    outages = 0
    for _ in range(200):
        if rng.random() < 0.7:
            fake.sleep(outage.failed(OperationalError(LOST)))
            assert not outage.due() or outage.wait() == 0
        else:
            outages += outage.down
            outage.recovered()
    outages += outage.down
    outage.recovered()
    assert outage_logs(caplog, "loop") == (outages, outages)


def test_the_outage_counts_from_when_the_failing_call_began():
    fake = FakeTime()
    outage = Outage("unit", clock=fake.clock)
    began = fake.now
    fake.sleep(20)  # SQLite waited out its busy timeout before saying "database is locked"
    outage.failed(OperationalError("database is locked"), began)
    assert outage.elapsed() == 20


# --- writes that went through though their answer was lost --------------------------------------------------------


def committed_then_lost(real: Callable, when: Callable[..., bool], before: Callable[..., bool] = lambda *a, **k: False):
    """`real`, except that once a call matching `when` is committed and then reports the connection lost (as a drop
    during COMMIT does), and once one matching `before` fails without being written."""
    fired = {"when": False, "before": False}

    def flaky(*args, **kwargs):
        if not fired["before"] and before(*args, **kwargs):
            fired["before"] = True
            raise OperationalError(LOST)
        if not fired["when"] and when(*args, **kwargs):
            fired["when"] = True
            real(*args, **kwargs)
            raise OperationalError(LOST)
        return real(*args, **kwargs)

    return flaky


def texts(task: Task) -> list[str]:
    return [e.data["text"] for e in actions.events_since(task, 0, 10_000) if e.kind == "text"]


def assert_gap_free(task: Task) -> None:
    task.refresh_from_db()
    seqs = list(TaskEvent.objects.filter(task=task).order_by("seq").values_list("seq", flat=True))
    assert seqs == list(range(1, task.last_seq + 1)), "gap-free seqs, none twice"


def says(batch, text: str) -> bool:
    return any(kind == "text" and data.get("text") == text for kind, data in batch)


def test_an_event_batch_committed_though_its_answer_was_lost_is_not_written_again(supervisor, monkeypatch):
    flaky = committed_then_lost(
        actions.append_events,
        when=lambda task, events: says(events, "two"),
        before=lambda task, events: says(events, "three"),
    )
    monkeypatch.setattr(actions, "append_events", flaky)
    task = wait_for(make_task("say one\nsleep 0.3\nsay two\nsleep 0.3\nsay three"))
    assert task.status == Status.DONE
    assert texts(task) == ["one", "two", "three"]
    assert_gap_free(task)


def ask(command: str) -> str:
    return "ask Bash " + json.dumps({"command": command})


def test_a_permission_is_recorded_and_answered_once_whatever_commits_were_lost(supervisor, monkeypatch, work_root):
    record, mark = actions.record_permission_request, actions.mark_delivered

    def lose_commits() -> None:
        monkeypatch.setattr(actions, "record_permission_request", committed_then_lost(record, lambda *a, **k: True))
        monkeypatch.setattr(actions, "mark_delivered", committed_then_lost(mark, lambda p: True, lambda p: True))

    answers: list[str] = []  # what the agent was told, as written to it
    real_write = TaskRun._write
    monkeypatch.setattr(TaskRun, "_write", lambda run, line: answers.append(line.decode()) or real_write(run, line))
    lose_commits()
    bypassed = wait_for(make_task(ask("echo ran >> bypassed.txt") + "\nsay done", permission_mode="bypass"))
    lose_commits()
    asked = make_task(ask("echo ran >> asked.txt") + "\nsay done")
    wait_for(asked, has_event("permission_request"))
    actions.decide_permission(asked, behavior="allow", by="tester")
    asked = wait_for(asked)
    for task, name in [(bypassed, "bypassed.txt"), (asked, "asked.txt")]:
        # The fake agent exits non-zero on an answer it did not wait for: `done` means none came twice.
        assert task.status == Status.DONE, task.error
        assert (work_root / name).read_text() == "ran\n", "the tool ran once"
        assert PermissionRequest.objects.get(task=task).delivered_at is not None
        assert [e.kind for e in actions.events_since(task)].count("permission_request") == 1
        perm = PermissionRequest.objects.get(task=task)
        assert sum(perm.request_id in line for line in answers) == 1, "the answer was written to the agent once"
        assert_gap_free(task)


def test_a_claim_committed_though_its_answer_was_lost_still_runs(supervisor, monkeypatch):
    monkeypatch.setattr(actions, "claim_next_task", committed_then_lost(actions.claim_next_task, lambda w: True))
    task = wait_for(make_task("say claimed"), timeout=60)  # found by the supervisor's look at its own tasks
    assert task.status == Status.DONE
    assert texts(task) == ["claimed"]
    assert [e.data.get("status") for e in actions.events_since(task) if e.kind == "status"] == [
        "queued",
        "running",
        "done",
    ]


def appends_fail_while_set(monkeypatch) -> threading.Event:
    """Make appending events fail as a locked SQLite does while the returned event is set (it starts set)."""
    away = threading.Event()
    away.set()
    real = actions.append_events

    def append_unless_away(task, events):
        if away.is_set():
            raise OperationalError("database is locked")
        return real(task, events)

    monkeypatch.setattr(actions, "append_events", append_unless_away)
    return away


def test_output_held_while_the_database_is_away_is_bounded_and_what_was_dropped_is_counted(
    supervisor, monkeypatch, settings
):
    settings.BRIDGE_DB_BUFFER_BYTES = 64 * 1024
    away = appends_fail_while_set(monkeypatch)
    task = make_task("say before\nflood 2000 200\nsay after")
    run = wait_until(lambda: supervisor.runs.get(task.pk), what="the run to start")
    wait_until(lambda: run.rec.dropped > 0 and run.eof, what="the flood to be read while the database is away")
    assert run.rec.held_bytes <= settings.BRIDGE_DB_BUFFER_BYTES
    away.clear()
    task = wait_for(task)
    assert task.status == Status.DONE
    events = actions.events_since(task, 0, 10_000)
    notes = [e.data for e in events if e.kind == "truncated"]
    # One note, or one more after each failed try of the write holding the last (a tried write cannot change).
    assert notes and sum(note["events"] for note in notes) == run.rec.dropped
    assert all("BRIDGE_DB_BUFFER_BYTES" in note["reason"] for note in notes)
    assert [e.kind for e in events].count("result") == 1, "the essential events are kept"
    kept = texts(task)
    assert kept[0] == "before" and "after" not in kept and 0 < len(kept) - 1 < 2000
    assert_gap_free(task)


@pytest.mark.parametrize("failed_tries", [0, 1, 3])
def test_drops_after_a_failed_try_are_counted_by_a_new_note_and_the_notes_count_them_all(
    transactional_db, work_root, monkeypatch, settings, failed_tries
):
    """A `truncated` note grows until the write holding it is tried; that try may have committed it, so later drops
    start a new note, which grows while the writes before it keep failing. Together they count every drop."""
    settings.BRIDGE_DB_BUFFER_BYTES = 1000
    task = make_task("say hi")
    away = appends_fail_while_set(monkeypatch)
    fake = FakeTime()
    rec = Recorder(task, on_recorded=lambda perm: None)
    rec.outage = Outage("unit", clock=fake.clock)
    line = [("text", {"text": "x" * 50})]
    rec.add_events(line * 3, size=900)  # held: within the buffer
    dropped = []
    for _ in range(failed_tries + 1):
        rec.add_events(line * (len(dropped) + 2), size=900)  # past the buffer: dropped, counted by the open note
        dropped.append(len(dropped) + 2)
        if len(dropped) <= failed_tries:
            assert not rec.flush(), "the database is away"
            fake.sleep(rec.outage.wait())
    away.clear()
    assert rec.flush()
    notes = [e.data for e in actions.events_since(task) if e.kind == "truncated"]
    expected = [sum(dropped)] if not failed_tries else [dropped[0], sum(dropped[1:])]
    assert [note["events"] for note in notes] == expected
    assert [e.kind for e in actions.events_since(task)].count("text") == 3


# --- SQLite: another process holds the write lock -----------------------------------------------------------------


class OutageLog(logging.Handler):
    """The outages the supervisor's threads log, as they are logged."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())

    def began(self, what: str) -> bool:
        return any(m.startswith(f"{what}: the database is unreachable") for m in list(self.messages))


@pytest.fixture
def outage_log():
    handler = OutageLog()
    logger = logging.getLogger("jobs.core.resilience")
    logger.addHandler(handler)
    yield handler
    logger.removeHandler(handler)


@pytest.fixture
def sqlite_supervisor(transactional_db, work_root, fake_agent, settings, monkeypatch):
    """An in-process supervisor whose connections wait only 0.5 s for SQLite's write lock."""
    if on_postgres():
        pytest.skip("SQLite's write lock; the default run covers it")
    monkeypatch.setitem(connection.settings_dict["OPTIONS"], "timeout", 0.5)

    sup = Supervisor()
    thread = threading.Thread(target=sup.run, daemon=True)
    thread.start()
    assert sup.ready.wait(10)
    yield sup
    sup.request_stop()
    thread.join(30)


def write_lock() -> sqlite3.Connection:
    lock = sqlite3.connect(str(connection.settings_dict["NAME"]), isolation_level=None, timeout=10)
    lock.execute("BEGIN IMMEDIATE")
    return lock


TICKS = "".join(f"say tick {i}\nsleep 0.05\n" for i in range(40))


def test_a_write_lock_held_past_the_busy_timeout_delays_output_but_loses_none(sqlite_supervisor, outage_log):
    task = wait_for(make_task("say before\nsleep 0.5\n" + TICKS + "say after"), has_event("text", text="before"))
    lock = write_lock()
    try:
        wait_until(lambda: outage_log.began(f"task {task.public_id}"), what="the run to meet the lock")
        run = sqlite_supervisor.runs[task.pk]
        wait_until(lambda: run.rec.held_events >= 5, what="output held in memory while the lock is held")
    finally:
        lock.execute("ROLLBACK")
        lock.close()
    task = wait_for(task, timeout=60)
    assert task.status == Status.DONE, task.error
    assert texts(task) == ["before", *[f"tick {i}" for i in range(40)], "after"]
    assert_gap_free(task)


def agent_alive(pid: int, create_time: float) -> bool:
    try:
        return processes.same_process(pid, create_time) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def assert_failed_for_the_outage(task: Task, limit: int) -> None:
    assert task.status == Status.FAILED
    assert "the database was unreachable for" in task.error and f"(BRIDGE_DB_OUTAGE_S={limit})" in task.error
    assert "the agent was stopped" in task.error
    kept_after = int(re.search(r"output after seq (\d+) was kept in memory", task.error).group(1))
    events = actions.events_since(task, 0, 10_000)
    assert any(e.kind == "stopping" and e.data.get("status") == Status.FAILED for e in events)
    assert [e.data["status"] for e in events if e.kind == "status"][-1] == Status.FAILED
    assert any(e.kind == "text" for e in events if e.seq > kept_after), "the output held meanwhile was recorded"
    assert_gap_free(task)


def test_a_write_lock_held_past_the_outage_limit_stops_the_agent_and_fails_the_task(sqlite_supervisor, settings):
    settings.BRIDGE_DB_OUTAGE_S = 2
    task = wait_for(make_task("say before\nsleep 0.5\n" + TICKS * 10), has_event("text", text="before"))
    lock = write_lock()
    try:
        wait_until(lambda: not agent_alive(task.pid, task.process_create_time), what="the agent to be stopped")
        task.refresh_from_db()
        assert task.status == Status.RUNNING, "nothing can be written while the lock is held"
    finally:
        lock.execute("ROLLBACK")
        lock.close()
    assert_failed_for_the_outage(wait_for(task, timeout=60), 2)


def is_closed(cursor: sqlite3.Cursor) -> bool:
    try:
        cursor.fetchmany(0)
    except sqlite3.ProgrammingError:  # "Cannot operate on a closed cursor"
        return True
    return False


@pytest.mark.django_db(transaction=True)
def test_a_begin_that_gives_up_on_the_write_lock_leaves_no_open_cursor_to_the_garbage_collector():
    """Freed by the cycle collector on a thread that holds the write lock, an open cursor would wait for its
    connection while that connection waits for the lock: a burst of creates stalled for 30 s (bridge/sqlite3/base.py).
    The cursor of a BEGIN that timed out is kept alive by the error's reference cycle; it must be closed already."""
    if on_postgres():
        pytest.skip("SQLite's BEGIN IMMEDIATE only")
    connection.ensure_connection()
    connection.connection.execute("PRAGMA busy_timeout = 50")
    lock = write_lock()
    gc.collect()
    gc.disable()  # what the failed BEGIN leaves in cycles stays there until looked at
    try:
        with pytest.raises(OperationalError, match="locked"), transaction.atomic():
            pass
        own = [c for c in gc.get_objects() if isinstance(c, sqlite3.Cursor) and c.connection is connection.connection]
        left_open = [cursor for cursor in own if not is_closed(cursor)]
    finally:
        gc.enable()
        lock.execute("ROLLBACK")
        lock.close()
        connection.close()  # the next test's connection gets the usual busy timeout
    assert own, "the failed BEGIN's cursor is found (it lives in the error's reference cycle)"
    assert not left_open, f"{len(left_open)} cursor(s) left open for the cycle collector to reset on any thread"


# --- PostgreSQL: dropped and refused connections under `manage.py supervise` -----------------------------------------


def require_postgres():
    if not on_postgres():
        pytest.skip("needs PostgreSQL: test_the_postgresql_fault_tests_also_run_in_the_default_run runs it there")
    import psycopg

    db = connection.settings_dict
    admin = psycopg.connect(
        host=db["HOST"] or "127.0.0.1", port=db["PORT"] or 5432, user=db["USER"], dbname="postgres", autocommit=True
    )
    return admin, db["NAME"]


def fresh(read: Callable[[], object]) -> object:
    """A read from the test itself, whose connections the faults kill too."""
    return retry(read, Outage("test"), give_up_after=30)


def supervise_process(settings, extra_env: dict) -> subprocess.Popen:
    env = {
        **os.environ,
        "DATABASE_URL": database_url(settings.DATABASES["default"]),
        "BRIDGE_CLAUDE_BIN": settings.BRIDGE_CLAUDE_BIN,
        "BRIDGE_ALLOWED_ROOTS": str(settings.BRIDGE_ALLOWED_ROOTS[0]),
        "BRIDGE_KILL_GRACE_S": "1",
        "BRIDGE_POLL_S": "0.2",
        **extra_env,
    }
    return subprocess.Popen([sys.executable, str(REPO / "manage.py"), "supervise"], env=env, cwd=REPO)


def stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def status_of(pk: int) -> str:
    return fresh(lambda: Task.objects.values_list("status", flat=True).get(pk=pk))


def test_dropped_connections_mid_run_lose_nothing_on_postgres(transactional_db, work_root, fake_agent, settings):
    admin, name = require_postgres()
    proc = supervise_process(settings, {})
    try:
        scripts = ["".join(f"say t{i}-{k}\nsleep 0.25\n" for k in range(24)) for i in range(3)]
        tasks = [make_task(script) for script in scripts]
        for task in tasks:
            wait_for(task, has_event("text", text=texts_of(task)[0]))
        for _ in range(4):  # each drop only after the supervisor has written again since the last one
            written = fresh(lambda: sum(Task.objects.values_list("last_seq", flat=True)))
            assert terminate_backends(admin, name) > 0
            wait_until(lambda w=written: fresh(lambda: sum(Task.objects.values_list("last_seq", flat=True))) > w)
        for task in tasks:
            wait_until(lambda t=task: status_of(t.pk) != Status.RUNNING, 60, f"task {task.public_id} to end")
            task.refresh_from_db()
            assert task.status == Status.DONE, task.error
            assert texts(task) == texts_of(task), "all its output, in order, none twice"
            kinds = [e.kind for e in actions.events_since(task, 0, 10_000)]
            assert kinds.count("spawned") == 1 and kinds.count("result") == 1 and kinds.count("status") == 3
            assert_gap_free(task)
        later = fresh(lambda: make_task("say still serving"))
        assert wait_for(later).status == Status.DONE
        assert proc.poll() is None
    finally:
        stop(proc)
        admin.close()


def texts_of(task: Task) -> list[str]:
    return [line.split(" ", 1)[1] for line in task.prompt.splitlines() if line.startswith("say ")]


def test_refused_connections_past_the_outage_limit_fail_the_task_on_postgres(
    transactional_db, work_root, fake_agent, settings
):
    admin, name = require_postgres()
    proc = supervise_process(settings, {"BRIDGE_DB_OUTAGE_S": "2", "BRIDGE_DB_POOL_TIMEOUT_S": "0.5"})
    try:
        task = wait_for(make_task("say before\nsleep 0.5\n" + TICKS * 10), has_event("text", text="before"))
        admin.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS false')
        try:
            terminate_backends(admin, name)
            wait_until(lambda: not agent_alive(task.pid, task.process_create_time), what="the agent to be stopped")
        finally:
            admin.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS true')
        wait_until(lambda: status_of(task.pk) != Status.RUNNING, 60, "the task to end")
        task.refresh_from_db()
        assert_failed_for_the_outage(task, 2)
        assert wait_for(make_task("say still serving")).status == Status.DONE
        assert proc.poll() is None
    finally:
        stop(proc)
        admin.close()


def test_the_postgresql_fault_tests_also_run_in_the_default_run():
    """The PostgreSQL tests above (named `…_on_postgres`), rerun on PostgreSQL when this run is on SQLite."""
    if on_postgres():
        pytest.skip("already on PostgreSQL")
    run = rerun_on_postgres(postgres_or_skip(POSTGRES_URL), __file__, "-k", "on_postgres", timeout=600)
    assert " 2 passed" in " " + run.stdout.splitlines()[-1], run.stdout[-2000:]
