"""Fencing (docs/architecture.md, "Fencing"): a run writes only while its task is still running under the run's claim,
nothing is ever appended after a task's terminal status event, and no read waits on a lock another process may hold
for as long as it likes.

Measured before (issue 28): two supervisors on PostgreSQL, one frozen (SIGSTOP) past its heartbeat lease while its
tasks streamed; the others orphaned its tasks, and on SIGCONT it first wrote about 580 `text` and `usage` events per
task after the task's `orphaned` status event, and only then killed its agents; meanwhile `GET /v1/task` of those
tasks hung for 30 s and more behind the row lock its open transaction held.

Stale writers interleaved with the orphaning read in generated orders, a writer racing it on threads, the frozen
supervisor for real (a `manage.py supervise` process), and a read of a task whose row another transaction holds. Runs
on the database of the run (SQLite by default); on SQLite the last test runs this file again on PostgreSQL.
"""

import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import psutil
import pytest
from django.conf import settings as django_settings
from django.db import connection
from django.test import Client
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from jobs import actions
from jobs.actions import runs, workers
from jobs.actions.events import WriteRefused
from jobs.core.errors import Conflict
from jobs.core.vocabulary import TERMINAL_STATUSES, Status
from jobs.models import PermissionRequest, Task, TaskEvent, Worker
from jobs.supervision.recording import Recorder
from jobs.supervision.runners.base import PermissionAsk
from tests.support import (
    REPO,
    SuperviseProcess,
    database_url,
    has_event,
    make_task,
    postgres_or_skip,
    rerun_on_postgres,
    wait_for,
    wait_until,
)

ON_POSTGRES = os.environ.get("DATABASE_URL", "").startswith("postgres")
USAGE = {"cost_usd": 0.25, "input_tokens": 100, "output_tokens": 50, "num_turns": 1}
USAGE_FIELDS = ("cost_usd", "input_tokens", "output_tokens", "num_turns")
READ_BOUND_S = 2.0  # "answers within a couple of seconds"
LEASE_S = 2  # the heartbeat lease this process gives supervisors on other hosts, shortened from 30 s


# --- what every transcript must be, whoever wrote it ------------------------------------------------------------


def assert_closed_properly(task: Task) -> list[TaskEvent]:
    """Seqs run 1…last_seq without a gap; an ended task's terminal status event is its last event, the only one, and
    the task takes no more (its claim is gone)."""
    row = Task.objects.get(pk=task.pk)
    events = list(TaskEvent.objects.filter(task_id=task.pk).order_by("seq"))
    assert [e.seq for e in events] == list(range(1, row.last_seq + 1)), "the seqs have a gap"
    terminal = [e for e in events if e.kind == "status" and e.data.get("status") in TERMINAL_STATUSES]
    if row.status in TERMINAL_STATUSES:
        assert terminal and terminal == [events[-1]], f"events after the end: {[e.kind for e in events][-5:]}"
        assert terminal[0].data["status"] == row.status and row.claim is None
    else:
        assert not terminal and row.claim is not None
    return events


def snapshot(task: Task) -> tuple:
    """All a stale write could change: the transcript's length, the status and end, usage, pid, session, questions."""
    row = Task.objects.get(pk=task.pk)
    usage = tuple(getattr(row, field) for field in USAGE_FIELDS)
    questions = tuple(PermissionRequest.objects.filter(task_id=task.pk).values_list("request_id", "status"))
    return row.last_seq, row.status, row.finished_at, usage, row.pid, row.session_id, row.claim, questions


# --- a task's runs, as stale as the interleaving makes them -------------------------------------------------------


class Stage:
    """A task claimed by run A, whose supervisor peers see as dead (stopped), so any read orphans it; a live
    supervisor B that may claim it again; a planner who cancels and answers. A's and B's writes go through a
    `Recorder` under their claims, as a supervisor's run makes them."""

    def __init__(self, work_root) -> None:
        Task.objects.all().delete()  # what an earlier example left (the database is not rolled back between them)
        self.a, self.b = actions.register_worker(1), actions.register_worker(1)
        make_task("stale writers", cwd=str(work_root))
        task = actions.claim_next_task(self.a)
        assert task is not None and task.claim == 1
        actions.stop_worker(self.a)
        self.task = task
        self.runs: dict[str, tuple[Task, Recorder]] = {"A": (task, self.recorder(task))}
        self.asked = 0
        self.usage_at_end: tuple | None = None

    @staticmethod
    def recorder(task: Task) -> Recorder:
        return Recorder(task, on_recorded=lambda perm: None, claim=task.claim)

    def holds(self, run: str) -> bool:
        row = Task.objects.get(pk=self.task.pk)
        return run in self.runs and row.status == Status.RUNNING and row.claim == self.runs[run][0].claim

    def write(self, run: str, what: str) -> None:
        """One write of `run`'s: it lands whole while the task runs under the run's claim, else it is refused and
        nothing of it lands."""
        if run not in self.runs:
            return
        task, rec = self.runs[run]
        holds, before = self.holds(run), snapshot(task)
        try:
            self.make(task, rec, what)
        except WriteRefused:
            assert not holds, f"{run}'s {what} was refused while the task ran under its claim"
            assert snapshot(task) == before, f"{run}'s refused {what} changed the task"
            rec.clear()  # as the run does: it writes nothing more
            return
        assert holds, f"{run}'s {what} landed on a task no longer running under its claim"

    def make(self, task: Task, rec: Recorder, what: str) -> None:
        if what == "output":
            rec.add_events([("text", {"text": "stale?"}), ("usage", {"input_tokens": 5, "output_tokens": 7})])
        elif what == "spawned":
            rec.add("spawned", (os.getpid(), 1.0, ["agent"]))  # not this process's create time: no one kills it
        elif what == "session":
            rec.add("session", f"session-{uuid.uuid4().hex[:8]}")
        elif what == "ask":
            self.asked += 1
            rec.add("ask", PermissionAsk(request_id=f"q{self.asked}", tool_name="Bash", tool_input={"command": "ls"}))
        if what == "end":
            actions.finish_task(task, status=Status.DONE, exit_code=0, usage=USAGE, claim=rec.claim)
        else:
            assert rec.flush()

    def other(self, what: str) -> None:
        """Writers that are not a run: the read that orphans, a claim by B, a planner's cancel and answer."""
        row = Task.objects.get(pk=self.task.pk)
        if what == "orphaning read":
            actions.get_task(self.task.public_id)
        elif what == "claimed again by B" and row.status == Status.RUNNING:
            Task.objects.filter(pk=row.pk).update(status=Status.QUEUED)  # as if it had never been claimed
            assert runs._take(row.pk, self.b)
            [claimed] = list(Task.objects.filter(pk=row.pk))
            self.runs["B"] = (claimed, self.recorder(claimed))
        elif what == "cancel":
            try:
                actions.request_cancel(row, reason="planner")
            except Conflict:
                assert row.is_terminal
        elif what == "answer":
            pending = PermissionRequest.objects.filter(task_id=row.pk, status="pending").first()
            if pending is not None:
                actions.decide_permission(row, behavior="allow", request_id=pending.request_id, by="planner")

    def check(self) -> None:
        row = Task.objects.get(pk=self.task.pk)
        assert_closed_properly(row)
        if row.is_terminal:
            usage = tuple(getattr(row, field) for field in USAGE_FIELDS)
            self.usage_at_end = self.usage_at_end or usage
            assert usage == self.usage_at_end, "usage changed after the end"


RUN_WRITES = [(run, what) for run in ("A", "B") for what in ("output", "spawned", "session", "ask", "end")]
OTHERS = [("-", what) for what in ("orphaning read", "claimed again by B", "cancel", "answer")]


@hypothesis_settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=st.lists(st.sampled_from(RUN_WRITES + OTHERS), min_size=1, max_size=14))
def test_a_stale_run_writes_nothing_once_its_task_is_not_its_own(transactional_db, work_root, steps):
    """Every interleaving of a run's writes (output with usage, its pid, its session, a question, its end) with the
    read that orphans its task, another claim, a cancel and an answer: a run's write lands whole exactly while the
    task runs under that run's claim, else it is refused and nothing of it lands; nothing follows the terminal status
    event; seqs stay gap-free; usage never changes after the end."""
    stage = Stage(work_root)
    for run, what in steps:
        if run == "-":
            stage.other(what)
        else:
            stage.write(run, what)
        stage.check()


def test_nothing_is_appended_after_the_terminal_status_event_whoever_writes(transactional_db, work_root):
    """The rule lives in append_events itself: after the end, an append by anyone (a bug, a script, a writer this
    code does not know) is refused, another terminal status event included, with the transaction it is part of."""
    make_task("ends at once", cwd=str(work_root))
    task = actions.claim_next_task(actions.register_worker(1))
    actions.finish_task(task, status=Status.DONE)
    closed_at = Task.objects.get(pk=task.pk).last_seq
    for events in ([("text", {"text": "late"})], [("status", {"status": Status.FAILED})]):
        with pytest.raises(WriteRefused, match="has ended \\(done\\)"):
            actions.append_events(task, events)
    with pytest.raises(WriteRefused):
        actions.record_permission_request(task, request_id="late", tool_name="Bash", tool_input={})
    assert not PermissionRequest.objects.filter(task_id=task.pk).exists(), "the refused question's row stayed"
    assert Task.objects.get(pk=task.pk).last_seq == closed_at
    assert_closed_properly(task)
    queued = make_task("cancelled while queued", cwd=str(work_root))
    actions.request_cancel(queued)
    with pytest.raises(WriteRefused, match="has ended \\(cancelled\\)"):
        actions.append_events(queued, [("text", {"text": "late"})])
    assert_closed_properly(queued)


# --- a run racing the read that orphans its task -------------------------------------------------------------------


@hypothesis_settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(orphan_after=st.integers(0, 30), batch=st.integers(1, 60))
def test_a_run_racing_the_orphaning_read_writes_nothing_after_the_end(transactional_db, work_root, orphan_after, batch):
    """Two threads, each with its own connection: the run flushes batches of output as fast as it can; the read orphans
    the task once the run has written `orphan_after` batches. Every batch the run saw land lies before the orphaned
    status event, the refused one is not there, and nothing follows the end."""
    Task.objects.all().delete()
    dead = actions.register_worker(1)
    make_task("races", cwd=str(work_root))
    task = actions.claim_next_task(dead)
    actions.stop_worker(dead)
    landed: list[int] = []
    enough = threading.Event()
    refused: list[WriteRefused] = []

    def run() -> None:
        rec = Recorder(task, on_recorded=lambda perm: None, claim=task.claim)
        try:
            for number in range(orphan_after + 200):
                rec.add_events([("text", {"text": f"batch {number}"})] * batch)
                try:
                    rec.flush()
                except WriteRefused as exc:
                    refused.append(exc)
                    return
                landed.append(task.last_seq)
                if len(landed) >= orphan_after:
                    enough.set()
        finally:
            enough.set()
            connection.close()

    def orphaning_read() -> None:
        try:
            enough.wait(60)
            wait_until(lambda: actions.get_task(task.public_id).status == Status.ORPHANED, what="the task orphaned")
        finally:
            connection.close()

    threads = [threading.Thread(target=run), threading.Thread(target=orphaning_read)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    events = assert_closed_properly(task)
    end = events[-1]
    assert end.kind == "status" and end.data["status"] == Status.ORPHANED
    assert all(seq < end.seq for seq in landed), "a batch the run saw land lies after the end"
    written = [e.data["text"] for e in events if e.kind == "text"]
    assert written == [f"batch {n}" for n in range(len(landed)) for _ in range(batch)], "a refused batch landed"


# --- no read waits on a lock another process holds -------------------------------------------------------------------


@contextmanager
def held_by_another_transaction(task: Task) -> Iterator[None]:
    """Another connection holds the task's row in an open transaction (PostgreSQL: SELECT … FOR UPDATE; SQLite, which
    has no row locks: its one write lock, BEGIN IMMEDIATE), as a frozen supervisor's write would."""
    db = django_settings.DATABASES["default"]
    if connection.vendor == "postgresql":
        import psycopg

        holder = psycopg.connect(database_url(db))
        holder.execute("SELECT id FROM jobs_task WHERE id = %s FOR UPDATE", [task.pk])
    else:
        holder = sqlite3.connect(db["NAME"], timeout=30, isolation_level=None)
        holder.execute("BEGIN IMMEDIATE")
    try:
        yield
    finally:
        holder.rollback()  # sqlite3 too: it rolls back the BEGIN it sees open
        holder.close()


def answered_within(call, timeout: float) -> tuple[Any, float]:
    """`call()` on a thread of its own (with its own connection); its answer and how long it took, or a failure if it
    has not answered within `timeout` seconds."""
    answer: list[Any] = []
    started = time.monotonic()

    def work() -> None:
        try:
            answer.append(call())
        except Exception as exc:
            answer.append(exc)
        finally:
            connection.close()

    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    thread.join(timeout)
    took = time.monotonic() - started
    assert answer, f"no answer within {timeout} s: the read waited on the lock"
    return answer[0], took


def dead_supervisors_task(work_root) -> Task:
    """A running task whose supervisor has stopped: the next read that can takes it to orphaned."""
    worker = actions.register_worker(1)
    make_task("held", cwd=str(work_root))
    task = actions.claim_next_task(worker)
    actions.stop_worker(worker)
    return task


def test_a_read_of_a_task_another_transaction_holds_answers_at_once_with_the_task_as_read(transactional_db, work_root):
    """PostgreSQL: GET /v1/task of a dead supervisor's task whose row another connection holds FOR UPDATE answers
    within READ_BOUND_S, showing the task as read (running); once the row is free the next read settles it. SQLite:
    the same with actions.get_task while another connection holds the write lock (a REST request there also writes
    its token's last use, which waits for that lock like any other write)."""
    task = dead_supervisors_task(work_root)
    token = actions.create_token(f"fencing-{uuid.uuid4().hex[:6]}")[1]
    client = Client(HTTP_AUTHORIZATION=f"Bearer {token}")

    def read() -> str:
        if connection.vendor == "postgresql":
            answer = client.get("/v1/task", {"task_id": str(task.public_id)})
            assert answer.status_code == 200, answer.content
            return answer.json()["bridge_status"]
        return actions.get_task(task.public_id).status

    with held_by_another_transaction(task):
        status, took = answered_within(read, timeout=30)
    assert status == Status.RUNNING and took < READ_BOUND_S, (status, took)
    assert read() == Status.ORPHANED


# --- a frozen supervisor, for real ---------------------------------------------------------------------------------


def all_stopped(pid: int) -> bool:
    """Whether every thread of process `pid` is stopped (a signal's group stop reaches each thread on its own)."""
    threads = psutil.Process(pid).threads()
    return all(psutil.Process(thread.id).status() == psutil.STATUS_STOPPED for thread in threads)


@contextmanager
def frozen(proc: subprocess.Popen, task: Task) -> Iterator[None]:
    """SIGSTOP the supervisor `proc` until the block ends (SIGCONT), caught where it hurts most. PostgreSQL: holding
    `task`'s row in its open transaction (this process holds the row until one of its writes waits for it, stops it
    then, and lets go: the frozen process's session gets the row, and keeps it until the server ends the transaction,
    BRIDGE_PG_IDLE_IN_TRANSACTION_S). SQLite: between two of its writes (this process holds the one write lock while it
    stops the other): a stopped holder of SQLite's only write lock would stop every writer until it goes on."""
    db = django_settings.DATABASES["default"]
    if connection.vendor == "postgresql":
        import psycopg

        holder = psycopg.connect(database_url(db), autocommit=False)
        holder.execute("SELECT id FROM jobs_task WHERE id = %s FOR UPDATE", [task.pk])
        watcher = psycopg.connect(database_url(db), autocommit=True)
        waiting = "SELECT count(*) FROM pg_stat_activity WHERE %s = ANY(pg_blocking_pids(pid))"
        pid = holder.info.backend_pid
        wait_until(
            lambda: watcher.execute(waiting, [pid]).fetchone()[0], timeout=30, what="a write waiting for the row"
        )
        watcher.close()
    else:
        holder = sqlite3.connect(db["NAME"], timeout=60, isolation_level=None)
        holder.execute("BEGIN IMMEDIATE")
    proc.send_signal(signal.SIGSTOP)
    # A signal is delivered when the kernel next runs the process: let go only once every thread of it has stopped,
    # or on a busy machine it takes the lock just let go and stops holding it (SQLite's one write lock, for good).
    wait_until(lambda: all_stopped(proc.pid), timeout=30, what=f"process {proc.pid} to stop")
    holder.rollback()  # sqlite3 too: it rolls back the BEGIN it sees open
    holder.close()
    try:
        yield
    finally:
        proc.send_signal(signal.SIGCONT)


@pytest.fixture
def short_lease(monkeypatch):
    """This process takes a supervisor on another host for dead LEASE_S after its last heartbeat."""
    monkeypatch.setattr(workers, "WORKER_STALE_AFTER", timedelta(seconds=LEASE_S))


def test_a_frozen_supervisor_writes_nothing_after_its_task_was_orphaned(
    transactional_db, work_root, fake_agent, settings, short_lease
):
    """`manage.py supervise` runs an agent that streams without pause; it is stopped (SIGSTOP) past its lease, reads
    orphan its task, and it goes on (SIGCONT): the orphaned status event stays the task's last, no seq lies above it,
    and the supervisor kills its agent, saying so once. Every read meanwhile answers within READ_BOUND_S. It plays a
    supervisor on another host (its row names another), since on this host a process that still exists is alive,
    whatever its heartbeat."""
    sup = SuperviseProcess(
        settings, "frozen", [work_root], extra_env={"BRIDGE_SANDBOX": "off", "BRIDGE_PG_IDLE_IN_TRANSACTION_S": "5"}
    )
    agent = None
    try:
        task = wait_for(make_task("say started\nstamp 1000000 0.001"), has_event("text", text="started"))
        wait_for(task, lambda t: t.last_seq > 50)  # the flood is under way
        agent = psutil.Process(task.pid)
        Worker.objects.filter(name="frozen").update(host="frozen-elsewhere")
        with frozen(sup.proc, task):
            row = Worker.objects.get(name="frozen")
            wait_until(lambda: not workers.worker_is_alive(Worker.objects.get(pk=row.pk)), timeout=30)
            reads: list[tuple[str, float]] = []

            def read() -> Task | None:
                read, took = answered_within(lambda: actions.get_task(task.public_id), timeout=30)
                reads.append((read.status, took))
                return read if read.status == Status.ORPHANED else None

            orphaned = wait_until(read, timeout=60)
            assert max(took for _, took in reads) < READ_BOUND_S, reads
            assert agent.is_running(), "the agent was killed before its supervisor went on"
        agent.wait(timeout=30)  # killed by its own supervisor, which went on (psutil.TimeoutExpired if not)
        wait_until(lambda: any("no longer this run's" in line for line in sup.lines), timeout=30)
        events = assert_closed_properly(task)
        assert events[-1].seq == orphaned.last_seq and events[-1].data["status"] == Status.ORPHANED
        assert sum("no longer this run's" in line for line in sup.lines) == 1, "one line per run"
        print(f"\n{len(reads)} reads, the slowest {max(took for _, took in reads):.3f} s;")
        print("".join(line for line in sup.lines if "no longer" in line))
    finally:
        sup.stop()
        if agent is not None and agent.is_running():
            agent.kill()


# --- PostgreSQL ------------------------------------------------------------------------------------------------------

IDLE_IN_A_TRANSACTION = """
import sys, time
import django
django.setup()
from django.db import DatabaseError, connection, transaction
try:
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            time.sleep(float(sys.argv[1]))
            cursor.execute("SELECT 1")
    print("kept")
except DatabaseError as exc:
    print("ended:", exc)
"""


def test_postgresql_ends_a_bridge_session_idle_in_a_transaction(tmp_path):
    """A Bridge process's PostgreSQL session that sits in a transaction past BRIDGE_PG_IDLE_IN_TRANSACTION_S is ended
    by the server (so a frozen process's locks are released); the idle wait is the point here."""
    base = postgres_or_skip().rsplit("/", 1)[0]
    env = {
        **os.environ,
        "DATABASE_URL": f"{base}/postgres",
        "BRIDGE_DATA_DIR": str(tmp_path),
        "BRIDGE_PG_IDLE_IN_TRANSACTION_S": "0.5",
    }
    run = subprocess.run(
        [sys.executable, "-c", IDLE_IN_A_TRANSACTION, "2"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.stdout.startswith("ended:") and "idle-in-transaction" in run.stdout, run.stdout + run.stderr[-2000:]


def test_the_fencing_on_postgresql():
    """Run this file again on PostgreSQL, where writers really race and rows are locked one by one."""
    if ON_POSTGRES:
        pytest.skip("this run is on PostgreSQL already")
    run = rerun_on_postgres(postgres_or_skip(), "-s", __file__, timeout=600)
    print(run.stdout[-1500:])
