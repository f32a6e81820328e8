"""A task's life under a supervisor: claimed, spawned, linked to its agent session, finished or orphaned."""

import logging
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, cast

from django.db import OperationalError, connection, transaction
from django.db.models import BooleanField, F, Field, Model, Q, QuerySet, UUIDField
from django.db.models.expressions import RawSQL
from django.utils import timezone

from jobs.actions import rows
from jobs.actions.events import WriteRefused, append_events, status_event
from jobs.actions.permissions import cancel_open_permissions
from jobs.actions.workers import answers_to, live_supervisors, runnable_agents, servable_by, serves, wait_reason
from jobs.core import doorbell, paths
from jobs.core.errors import BridgeError
from jobs.core.vocabulary import TOKEN_FIELDS, Agent, Status
from jobs.models import AgentSession, PermissionRequest, Task, TaskEvent, Worker

log = logging.getLogger(__name__)
USAGE_FIELDS = ("cost_usd", *TOKEN_FIELDS, "num_turns")

# The usage figures an agent reports as its session's running total rather than for one run. Measured with the real
# CLIs (tests/fakes/NOTES.md, "Usage across --resume"): Claude's `total_cost_usd` carries on from the session's last
# run; its `usage` tokens and `num_turns` are the run's own. Hermes ACP counts per prompt, and Bridge sends one
# prompt per process.
CUMULATIVE_FIELDS: dict[str, tuple[str, ...]] = {Agent.CLAUDE: ("cost_usd",)}
# How many earlier tasks of a session to look through for the running total a resumed run carried on from.
BASE_SEARCH_LIMIT = 50
# Queued tasks a claim looks through for one this supervisor serves, where rows are not locked (SQLite).
CLAIM_LOOKAHEAD = 50
TAKEN_FIELDS = ("status", "worker", "started_at", "wait_reason", "claim")  # what a claim sets (_take)
# How often one process looks at the whole queue for tasks no live supervisor can serve (see explain_waits).
EXPLAIN_WAITS_EVERY_S = 2.0
_explained_at = {"t": float("-inf")}
_explain_lock = threading.Lock()


def claim_next_task(worker: Worker) -> Task | None:
    """Atomically take the oldest queued task this supervisor serves (FIFO among those) that may start now, or None.
    Safe with several supervisors on several hosts: each takes only tasks whose cwd lies in its roots, whose target
    is empty or names it and whose agent it can run (`workers.serves`), and never a resume whose agent session has
    another task running or queued before it (`session_is_free`). A claimed task whose cwd does not resolve inside
    this supervisor's roots on its own host (a symlink out, or missing here) is failed at once, saying so, and the
    next is looked at. With nothing to claim, queued tasks are told why they wait (`explain_waits`)."""
    while True:
        task = _claim_one(worker)
        if task is None:
            explain_waits()
            return None
        refusal = local_dirs_refusal(worker, task)
        if refusal is None:
            return task
        finish_task(task, status=Status.FAILED, error=refusal)


def _claim_one(worker: Worker) -> Task | None:
    with transaction.atomic():
        queued = _queued_for(worker)
        candidate = next((pk for pk, cwd, target, agent in queued if serves(worker, cwd, target, agent)), None)
        if candidate is None or not _take(candidate, worker):
            return None
        # with its session, which the run reads: a follow-up resumes it
        [task] = rows.select(Task, id=candidate, related=("session",))
        append_events(task, [status_event(task, worker=worker.name)])
    return task


def _queued_for(worker: Worker) -> list[tuple[int, str, str, str]]:
    """(pk, cwd, target, agent) of the first queued tasks `worker` may serve, oldest first: on PostgreSQL the first
    one not locked by another claim (LIKE is exact there), locked; elsewhere up to CLAIM_LOOKAHEAD. A supervisor
    claims after every ring, and the SQL depends only on its roots, names and runnable agents, so the ORM builds it
    once per process for each of those."""

    if not worker.roots or not runnable_agents(worker):
        return []  # it serves nothing (and SQL cannot say "IN ()")

    def build() -> QuerySet:
        free = RawSQL(*session_is_free(), output_field=BooleanField())
        fields = ("pk", "cwd", "target", "agent")
        queued = Task.objects.queued_in_order().filter(servable_by(worker), free).values_list(*fields)
        if connection.features.has_select_for_update_skip_locked:
            return queued.select_for_update(skip_locked=True)[:1]
        return queued[:CLAIM_LOOKAHEAD]

    key = ("claim", tuple(worker.roots or ()), tuple(sorted(answers_to(worker))), tuple(runnable_agents(worker)))
    return rows.compiled(key, build)


def _take(pk: int, worker: Worker) -> bool:
    """Mark a queued task running under `worker`, under a claim of its own (`Task.claim` moves on: the run's writes
    carry it, `under_claim`); False when another claim took it first, or when its agent session is busy
    (`session_is_free`: the statement that decides, whatever the read before it saw), or when `worker` was asked to
    hand over (`ask_to_hand_over`: from the moment that is committed, it takes nothing more, whatever woke it). One
    UPDATE, written here for the reason `_queued_for` is built once."""
    meta, quote = Task._meta, connection.ops.quote_name
    status, worker_id, started_at, wait, claim = (_column(Task, name) for name in TAKEN_FIELDS)
    free, free_params = session_is_free()
    workers, handover = quote(Worker._meta.db_table), _column(Worker, "handover_requested_at")
    staying = (
        f"NOT EXISTS (SELECT 1 FROM {workers} WHERE {quote(Worker._meta.pk.column)} = %s AND {handover} IS NOT NULL)"
    )
    sql = (
        f"UPDATE {quote(meta.db_table)} SET {status} = %s, {worker_id} = %s, {started_at} = %s, {wait} = '',"
        f" {claim} = {claim} + 1 WHERE {quote(meta.pk.column)} = %s AND {status} = %s AND {free} AND {staying}"
    )
    now = connection.ops.adapt_datetimefield_value(timezone.now())
    with connection.cursor() as cursor:
        cursor.execute(sql, [Status.RUNNING, worker.pk, now, pk, Status.QUEUED, *free_params, worker.pk])
        return cursor.rowcount == 1


def local_dirs_refusal(worker: Worker, task: Task) -> str | None:
    """Why this supervisor must not run `task` on its own host, or None: confinement of its cwd and added directories
    (`paths.confine_task_dirs`) is checked again where the agent runs, against this supervisor's roots, with symlinks
    resolved there (the web process may have seen only the paths' text)."""
    roots = [Path(root) for root in worker.roots or ()]
    where = f" on {worker.host} (supervisor {worker.name})"
    try:
        paths.confine_task_dirs(task.cwd, (task.options or {}).get("add_dirs") or [], roots, where)
    except BridgeError as exc:
        return f"{exc.message}; nothing was run"
    return None


# --- one run at a time in an agent session --------------------------------------------------------------------------
# Two agents resuming one session at once would both write its history (measured: a claude_resume sent while the
# session's task waited for a permission ran a second Claude on the session at once). So a task that resumes a
# session waits while another task of that session (same agent, and that session id as the one it resumed or the one
# it ran in) is running, or queued before it. "Before" is by id: ids are handed out in the order tasks are queued,
# one at a time on every host (`tasks.lock_queue_admissions`). The rule is one piece of SQL about the statement's own
# queued task, the task table by its name: the claim selects by it, its UPDATE takes a task only while it holds, and a
# queued task names the task it waits for by it (`waiting_for`).


def _session_blockers(select: str, tail: str = "") -> tuple[str, list[str]]:
    """SQL selecting `select` from the tasks the statement's queued task, if it resumes a session, must wait for, then
    `tail`; and its parameters. Each of the two ways a task is in a session (resumed it, or ran in it: a new task that
    began it) is looked up by an index of its own (Task.Meta: task_active_resuming, task_active_in_session)."""
    quote = connection.ops.quote_name
    task, earlier, known = quote(Task._meta.db_table), quote("earlier"), quote("known_session")
    agent, status, resumed, ran_in, pk = (
        _column(Task, name) for name in ("agent", "status", "resume_session_id", "session", "id")
    )
    active = f"{earlier}.{status} IN (%s, %s)"
    sql = (
        f"SELECT {select} FROM {task} {earlier} WHERE ("
        f"({earlier}.{resumed} = {task}.{resumed} AND {active} AND {earlier}.{agent} = {task}.{agent})"
        f" OR ({earlier}.{ran_in} = (SELECT {known}.{_column(AgentSession, 'id')}"
        f" FROM {quote(AgentSession._meta.db_table)} {known} WHERE {known}.{_column(AgentSession, 'agent')} ="
        f" {task}.{agent} AND {known}.{_column(AgentSession, 'session_id')} = {task}.{resumed}) AND {active}))"
        f" AND ({earlier}.{status} = %s OR {earlier}.{pk} < {task}.{pk}){tail}"
    )
    return sql, [Status.QUEUED, Status.RUNNING, Status.QUEUED, Status.RUNNING, Status.RUNNING]


def _column(model: type[Model], name: str) -> str:
    """A field's column, quoted for SQL."""
    return connection.ops.quote_name(cast(Field, model._meta.get_field(name)).column)


def _resumed() -> str:
    """The queued task's resumed session id, as the statements of the rule name it (the task table, unaliased)."""
    return f"{connection.ops.quote_name(Task._meta.db_table)}.{_column(Task, 'resume_session_id')}"


def session_is_free() -> tuple[str, list[str]]:
    """The condition a queued task meets when no other task of its agent session holds it back, and its parameters."""
    sql, params = _session_blockers("1")
    return f"({_resumed()} = '' OR NOT EXISTS ({sql}))", params


def waiting_for(tasks: QuerySet) -> QuerySet:
    """`tasks` with `waits_for`: the public id of the task of its agent session each must wait for (the newest of
    them: it starts when that one ends), or None."""
    earlier = connection.ops.quote_name("earlier")
    sql, params = _session_blockers(
        f"{earlier}.{_column(Task, 'public_id')}", f" ORDER BY {earlier}.{_column(Task, 'id')} DESC LIMIT 1"
    )
    newest = RawSQL(f"(CASE WHEN {_resumed()} = '' THEN NULL ELSE ({sql}) END)", params, output_field=UUIDField())
    return tasks.annotate(waits_for=newest)


def explain_waits(*, force: bool = False) -> int:
    """Say on each queued task why it waits (Task.wait_reason), and clear the reason of those nothing holds back
    now (`tell_why_queued`); at most every EXPLAIN_WAITS_EVERY_S per process unless `force`. Returns how many tasks
    changed."""
    with _explain_lock:
        now = time.monotonic()
        if not force and now - _explained_at["t"] < EXPLAIN_WAITS_EVERY_S:
            return 0
        _explained_at["t"] = now
    return tell_why_queued(Task.objects.queued_in_order())


def tell_why_queued(queued: QuerySet, workers: list[Worker] | None = None) -> int:
    """Say on each of these queued tasks why it waits: for the task of its agent session it must follow
    (`waiting_for`), for a live supervisor that serves it, or "" (only the queue ahead of it). `workers`: the live
    supervisors, when the caller has just read them. Returns how many tasks changed; each change rings its task."""
    fields = ("pk", "public_id", "cwd", "target", "agent", "wait_reason", "waits_for")
    found = list(waiting_for(queued).values_list(*fields))
    if not found:
        return 0
    workers = live_supervisors() if workers is None else workers
    changed = 0
    for pk, public_id, cwd, target, agent, old, behind in found:
        reason = wait_reason(cwd, target, agent, workers, behind=behind)
        if reason != old and Task.objects.queued_in_order().filter(pk=pk).update(wait_reason=reason):
            changed += 1
            doorbell.ring(str(public_id))  # pages and sockets showing it look again
    return changed


def release_session(task: Task) -> None:
    """After `task` ended: the queued tasks of its agent session are told what they wait for now, and the queue is
    rung, so a supervisor that may run the next one claims it at once (a supervisor wakes by itself only when a run
    of its own ends, and a queued task can end in any process)."""
    if not task.resume_session_id and task.session_id is None:
        return  # it resumed nothing and never reported a session: no task can be waiting for it
    ran_in = AgentSession.objects.filter(tasks=task).values("session_id")
    same_session = Q(resume_session_id=task.resume_session_id) | Q(resume_session_id__in=ran_in)
    waiting = Task.objects.queued_in_order().filter(same_session, agent=task.agent).exclude(resume_session_id="")
    if waiting.exists():
        tell_why_queued(waiting)
        doorbell.ring(doorbell.QUEUE)


def tasks_with_news(pks: list[int]) -> set[int]:
    """Which of these running tasks have news for their supervisor: a cancel requested or the task ended elsewhere,
    an answer not yet passed on, or a request pending past BRIDGE_PERMISSION_TIMEOUT_S (the supervisor's sweep)."""
    tasks = Task.objects.filter(pk__in=pks)
    news = set(
        tasks.filter(Q(cancel_requested_at__isnull=False) | ~Q(status=Status.RUNNING)).values_list("pk", flat=True)
    )
    perms = PermissionRequest.objects.filter(task_id__in=pks)
    news.update(perms.undelivered().values_list("task_id", flat=True))
    news.update(perms.overdue().values_list("task_id", flat=True))
    return news


def current_state(task: Task) -> Task:
    """The task's row as the database holds it now (its status, its claim, a cancel request), as a copy: a run asks
    after every ring, so it is read by its one statement (jobs/actions/rows.py)."""
    [now] = rows.select(Task, id=task.pk)
    return now


# --- fencing: a run writes only while its task runs under its claim ---------------------------------------------------
# A run's supervisor can stop for a while (SIGSTOP, a long GC pause, a suspended laptop or VM) past its heartbeat's
# lease: a peer or a read then orphans its task, and the run, when it goes on, must write nothing more. So every write
# of a run names the claim it runs under (`Task.claim`, moved on by each claim) and lands only while the task is still
# running under it (docs/architecture.md, "Fencing").


@contextmanager
def under_claim(task: Task, claim: int) -> Iterator[None]:
    """One transaction in which a run writes (events, its pid, its session, permission asks, their withdrawal and
    delivery): it first takes the task's row, only while the task is running under `claim` (a conditional SELECT …
    FOR UPDATE; SQLite's write lock is held from BEGIN), so nobody can end or claim the task again until the write
    commits. Refused with WriteRefused, nothing written, when the task is no longer the run's."""
    with transaction.atomic():
        if not _holds_claim(task.pk, claim):
            raise _claim_lost(task, claim)
        yield


def _holds_claim(task_pk: int, claim: int) -> bool:
    quote = connection.ops.quote_name
    sql = (
        f"SELECT 1 FROM {quote(Task._meta.db_table)} WHERE {quote(Task._meta.pk.column)} = %s"
        f" AND {_column(Task, 'status')} = %s AND {_column(Task, 'claim')} = %s"
    )
    if connection.features.has_select_for_update:
        sql += " FOR UPDATE"
    with connection.cursor() as cursor:
        cursor.execute(sql, [task_pk, Status.RUNNING, claim])
        return cursor.fetchone() is not None


def _claim_lost(task: Task, claim: int) -> WriteRefused:
    """The refusal of a run's write to a task no longer running under the run's claim, saying what became of it."""
    now = Task.objects.filter(pk=task.pk).values_list("status", "claim").first()
    status, current = now if now is not None else ("gone", None)
    if status == Status.RUNNING:
        why = f"it was claimed again (claim {current}; this run's is {claim})"
    else:
        why = f"it is {status} now"
    return WriteRefused(
        f"task {task.public_id} is no longer running under this run's claim ({why}): nothing of this write was "
        "recorded",
        status=status,
    )


def _of_claim(tasks: QuerySet, claim: int | None) -> QuerySet:
    """The running tasks among `tasks`, and, given a run's `claim`, only if running under it."""
    running = tasks.filter(status=Status.RUNNING)
    return running if claim is None else running.filter(claim=claim)


def mark_spawned(task: Task, pid: int, create_time: float, argv: list[str]) -> None:
    """Record the child's pid and create time: together they tell it apart from a later process with its pid."""
    with transaction.atomic():  # with its event, or not at all
        Task.objects.filter(pk=task.pk).update(pid=pid, process_create_time=create_time)
        append_events(task, [("spawned", {"pid": pid, "argv": argv})])
    task.pid, task.process_create_time = pid, create_time


def link_session(task: Task, session_id: str) -> AgentSession:
    """Record the agent's own session id (first seen on its init line) and link the task to it."""
    session, _ = AgentSession.objects.get_or_create(
        agent=task.agent,
        session_id=session_id,
        defaults={"cwd": task.cwd, "title": task.prompt.strip().splitlines()[0][:200]},
    )
    if task.session_id != session.pk:
        Task.objects.filter(pk=task.pk).update(session=session)
        task.session = session
    return session


def finish_task(
    task: Task,
    *,
    status: str,
    exit_code: int | None = None,
    result: str = "",
    error: str = "",
    usage: dict[str, Any] | None = None,
    stderr_tail: str = "",
    claim: int | None = None,
) -> Task:
    """Record the end of a run; pending permission requests that outlive their task become cancelled. A task no longer
    running is left as it is; given the run's `claim`, that is refused (WriteRefused), as is a task running under
    another claim: the end, its usage and its status event are written only by the run the task is still running
    under."""
    given = usage or {}
    reported = {k: given[k] for k in USAGE_FIELDS if given.get(k) is not None}
    with transaction.atomic():
        usage, how = own_usage(task, reported)
        updated = _of_claim(Task.objects.filter(pk=task.pk), claim).update(
            status=status,
            finished_at=timezone.now(),
            exit_code=exit_code,
            result=result,
            error=error,
            stderr_tail=stderr_tail,
            **usage,
        )
        if not updated:
            if claim is not None:
                raise _claim_lost(task, claim)
            rows.refresh(task)
            return task
        cancel_open_permissions(task, "the task ended before it was answered")
        rows.refresh(task)
        if task.session_id and usage.get("cost_usd"):
            AgentSession.objects.filter(pk=task.session_id).update(
                total_cost_usd=F("total_cost_usd") + usage["cost_usd"]
            )
        append_events(
            task,
            [status_event(task, exit_code=exit_code, error=error, result=result, usage=usage, **how)],
        )
        release_session(task)
    return task


def own_usage(task: Task, reported: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """What a task used itself, and what its status event says about how that was worked out.

    A figure the agent reports as the session's running total (CUMULATIVE_FIELDS) becomes the difference from the
    running total the run carried on from: the figure reported by the session's last task that had finished when
    this one started (so two tasks resuming one session at once are each charged their own share), 0 for a new
    session. Never below 0. The reported figure is kept in the event as `reported_usage` (the next task's base);
    when the base is unknown (the session began outside Bridge) the reported figure is recorded and `usage_note`
    says so.
    """
    fields = [f for f in CUMULATIVE_FIELDS.get(task.agent, ()) if f in reported]
    if not fields:
        return reported, {}
    base, base_from = running_total_before(task, fields)
    how: dict[str, Any] = {"reported_usage": {f: reported[f] for f in fields}, "usage_base_from": base_from}
    if base is None:
        how["usage_note"] = (
            "Bridge did not see this session begin, so the cost of its earlier turns is unknown: "
            "the figure recorded is the session's running total as the agent reported it"
        )
        return reported, how
    own = dict(reported)
    for field in fields:
        own[field] = usage_delta(reported[field], base.get(field, 0))
    how["usage_base"] = base
    if any(reported[f] < base.get(f, 0) for f in fields):
        how["usage_note"] = "the agent reported a running total below the one this run carried on from: recorded 0"
    return own, how


def usage_delta(reported: float, base: float) -> float:
    """The part of a running total that is new since `base`; never negative, and free of float noise."""
    return round(max(0.0, reported - base), 10)


def running_total_before(task: Task, fields: list[str]) -> tuple[dict[str, float] | None, str]:
    """The running total a resumed run carried on from, and where it came from (`new_session`, `task:<id>`), or
    (None, `unknown`) when the session began outside Bridge and no earlier task of it reported one."""
    current = current_state(task)
    if not current.resume_session_id:
        return dict.fromkeys(fields, 0.0), "new_session"
    if current.session_id is None:
        return None, "unknown"
    earlier = (
        Task.objects.filter(session_id=current.session_id, finished_at__lte=current.started_at or timezone.now())
        .exclude(pk=task.pk)
        .order_by("-finished_at", "-pk")
    )
    for previous in earlier[:BASE_SEARCH_LIMIT]:
        figures = reported_usage(previous, fields)
        if figures:
            return figures, f"task:{previous.public_id}"
    if Task.objects.filter(session_id=current.session_id, resume_session_id="").exists():
        return dict.fromkeys(fields, 0.0), "new_session"  # Bridge started it; no run had reported a total yet
    return None, "unknown"


def reported_usage(task: Task, fields: list[str]) -> dict[str, float]:
    """The running totals a finished task's agent reported (kept in its last status event). Tasks finished before
    Bridge kept them stored the reported figure itself."""
    data = TaskEvent.objects.filter(task=task, kind="status").newest_first().values_list("data", flat=True).first()
    figures = (data or {}).get("reported_usage")
    if figures is None:
        figures = {f: getattr(task, f) for f in fields}
    return {f: figures[f] for f in fields if figures.get(f) is not None}


def mark_orphaned(task: Task, reason: str) -> Task:
    """End a running task whose supervisor died: nobody can manage its process any more. Never waits long for a lock
    another process holds (a frozen supervisor's open transaction holds its task's row, and a read that settles must
    not hang on it): past ORPHAN_LOCK_WAIT_S it leaves the task as it was read, for a later read to settle."""
    try:
        with _waiting_at_most(ORPHAN_LOCK_WAIT_S):
            updated = (
                Task.objects.running()
                .filter(pk=task.pk)
                .update(status=Status.ORPHANED, finished_at=timezone.now(), error=reason)
            )
            if updated:
                cancel_open_permissions(task, "the task's supervisor died before it was answered")
            task.refresh_from_db()
            if updated:
                append_events(task, [status_event(task, error=reason)])
                release_session(task)
    except OperationalError as exc:
        if not _held_elsewhere(exc):
            raise
        log.debug("task %s: not orphaned yet: another transaction holds it (%s); a later read settles it", task, exc)
    return task


# --- waiting for locks: bounded where a read settles ---------------------------------------------------------------
# How long the write that orphans a task waits for a lock another transaction holds before it gives up (the task is
# then shown as read and settled by a later read). A live writer holds a task's row for milliseconds.
ORPHAN_LOCK_WAIT_S = 0.2
LOCK_NOT_AVAILABLE = "55P03"  # PostgreSQL's SQLSTATE for a lock not granted in time (lock_timeout, NOWAIT)


@contextmanager
def _waiting_at_most(seconds: float) -> Iterator[None]:
    """One transaction that waits at most `seconds` for any lock (then OperationalError: `_held_elsewhere`). PostgreSQL:
    `lock_timeout` for the transaction, put back as it was after (the transaction may be part of a caller's). SQLite:
    its busy timeout, which bounds the wait for its one write lock, taken at BEGIN."""
    milliseconds = max(1, int(seconds * 1000))
    if connection.vendor != "sqlite":
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute("SHOW lock_timeout")
            before = cursor.fetchone()[0]
            cursor.execute("SELECT set_config('lock_timeout', %s, true)", [f"{milliseconds}ms"])
            yield
            cursor.execute("SELECT set_config('lock_timeout', %s, true)", [before])
        return
    connection.ensure_connection()
    with connection.cursor() as cursor:
        cursor.execute("PRAGMA busy_timeout")
        before = cursor.fetchone()[0]
        cursor.execute(f"PRAGMA busy_timeout = {milliseconds}")
        try:
            with transaction.atomic():
                yield
        finally:
            cursor.execute(f"PRAGMA busy_timeout = {int(before)}")


def _held_elsewhere(exc: OperationalError) -> bool:
    """Whether a statement failed because another transaction held what it needed past the wait it was given."""
    return getattr(exc.__cause__, "sqlstate", None) == LOCK_NOT_AVAILABLE or "database is locked" in str(exc)
