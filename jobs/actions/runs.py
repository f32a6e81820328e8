"""A task's life under a supervisor: claimed, spawned, linked to its agent session, finished or orphaned."""

import threading
import time
from pathlib import Path
from typing import Any, cast

from django.db import connection, transaction
from django.db.models import F, Field, Q, QuerySet
from django.utils import timezone

from jobs.actions import rows
from jobs.actions.events import append_events, status_event
from jobs.actions.permissions import cancel_open_permissions
from jobs.actions.workers import answers_to, live_supervisors, servable_by, serves, wait_reason
from jobs.core import doorbell, paths
from jobs.core.errors import BridgeError
from jobs.core.vocabulary import TOKEN_FIELDS, Agent, Status
from jobs.models import AgentSession, PermissionRequest, Task, TaskEvent, Worker

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
TAKEN_FIELDS = ("status", "worker", "started_at", "wait_reason")  # what a claim sets (_take)
# How often one process looks at the whole queue for tasks no live supervisor can serve (see explain_waits).
EXPLAIN_WAITS_EVERY_S = 2.0
_explained_at = {"t": float("-inf")}
_explain_lock = threading.Lock()


def claim_next_task(worker: Worker) -> Task | None:
    """Atomically take the oldest queued task this supervisor serves (FIFO among those), or None. Safe with several
    supervisors on several hosts: each takes only tasks whose cwd lies in its roots and whose target is empty or
    names it (`workers.serves`). A claimed task whose cwd does not resolve inside this supervisor's roots on its own
    host (a symlink out, or missing here) is failed at once, saying so, and the next is looked at. With nothing to
    claim, queued tasks that no live supervisor can serve are told why (`explain_waits`)."""
    while True:
        task = _claim_one(worker)
        if task is None:
            explain_waits()
            return None
        refusal = local_cwd_refusal(worker, task.cwd)
        if refusal is None:
            return task
        finish_task(task, status=Status.FAILED, error=refusal)


def _claim_one(worker: Worker) -> Task | None:
    with transaction.atomic():
        candidate = next((pk for pk, cwd, target in _queued_for(worker) if serves(worker, cwd, target)), None)
        if candidate is None or not _take(candidate, worker):
            return None
        # with its session, which the run reads: a follow-up resumes it
        [task] = rows.select(Task, id=candidate, related=("session",))
        append_events(task, [status_event(task, worker=worker.name)])
    return task


def _queued_for(worker: Worker) -> list[tuple[int, str, str]]:
    """(pk, cwd, target) of the first queued tasks `worker` may serve, oldest first: on PostgreSQL the first one not
    locked by another claim (LIKE is exact there), locked; elsewhere up to CLAIM_LOOKAHEAD. A supervisor claims after
    every ring, and the SQL depends only on its roots and names, so the ORM builds it once per process."""

    def build() -> QuerySet:
        queued = Task.objects.queued_in_order().filter(servable_by(worker)).values_list("pk", "cwd", "target")
        if connection.features.has_select_for_update_skip_locked:
            return queued.select_for_update(skip_locked=True)[:1]
        return queued[:CLAIM_LOOKAHEAD]

    return rows.compiled(("claim", tuple(worker.roots or ()), tuple(sorted(answers_to(worker)))), build)


def _take(pk: int, worker: Worker) -> bool:
    """Mark a queued task running under `worker`; False when another claim took it first. One UPDATE, written here for
    the reason `_queued_for` is built once."""
    meta, quote = Task._meta, connection.ops.quote_name
    status, worker_id, started_at, wait = (quote(cast(Field, meta.get_field(name)).column) for name in TAKEN_FIELDS)
    sql = (
        f"UPDATE {quote(meta.db_table)} SET {status} = %s, {worker_id} = %s, {started_at} = %s, {wait} = ''"
        f" WHERE {quote(meta.pk.column)} = %s AND {status} = %s"
    )
    now = connection.ops.adapt_datetimefield_value(timezone.now())
    with connection.cursor() as cursor:
        cursor.execute(sql, [Status.RUNNING, worker.pk, now, pk, Status.QUEUED])
        return cursor.rowcount == 1


def local_cwd_refusal(worker: Worker, cwd: str) -> str | None:
    """Why this supervisor must not run a task in `cwd` on its own host, or None: confinement (`paths.resolve_cwd`)
    is checked again where the agent runs, against this supervisor's roots, with symlinks resolved there (the web
    process may have seen only the path's text)."""
    roots = [Path(root) for root in worker.roots or ()]
    try:
        paths.resolve_cwd(cwd, roots, where=f" on {worker.host} (supervisor {worker.name})")
    except BridgeError as exc:
        return f"{exc.message}; nothing was run"
    return None


def explain_waits(*, force: bool = False) -> int:
    """Say on each queued task that no live supervisor can serve why it waits (Task.wait_reason), and clear the
    reason of those one can serve now; at most every EXPLAIN_WAITS_EVERY_S per process unless `force`. Returns how
    many tasks changed."""
    with _explain_lock:
        now = time.monotonic()
        if not force and now - _explained_at["t"] < EXPLAIN_WAITS_EVERY_S:
            return 0
        _explained_at["t"] = now
    queued = list(Task.objects.queued_in_order().values_list("pk", "public_id", "cwd", "target", "wait_reason"))
    if not queued:
        return 0
    workers = live_supervisors()
    changed = 0
    for pk, public_id, cwd, target, old in queued:
        reason = wait_reason(cwd, target, workers)
        if reason != old and Task.objects.queued_in_order().filter(pk=pk).update(wait_reason=reason):
            changed += 1
            doorbell.ring(str(public_id))  # pages and sockets showing it look again
    return changed


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
    """The task's row as the database holds it now (its status, a cancel request), as a copy: a run asks after
    every ring, so it is read by its one statement (jobs/actions/rows.py)."""
    [now] = rows.select(Task, id=task.pk)
    return now


def mark_spawned(task: Task, pid: int, create_time: float, argv: list[str]) -> None:
    """Record the child's pid and create time: together they tell it apart from a later process with its pid."""
    Task.objects.filter(pk=task.pk).update(pid=pid, process_create_time=create_time)
    task.pid, task.process_create_time = pid, create_time
    append_events(task, [("spawned", {"pid": pid, "argv": argv})])


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
) -> Task:
    """Record the end of a run; pending permission requests that outlive their task become cancelled."""
    given = usage or {}
    reported = {k: given[k] for k in USAGE_FIELDS if given.get(k) is not None}
    with transaction.atomic():
        usage, how = own_usage(task, reported)
        updated = (
            Task.objects.running()
            .filter(pk=task.pk)
            .update(
                status=status,
                finished_at=timezone.now(),
                exit_code=exit_code,
                result=result,
                error=error,
                stderr_tail=stderr_tail,
                **usage,
            )
        )
        cancel_open_permissions(task, "the task ended before it was answered")
        rows.refresh(task)
        if not updated:
            return task
        if task.session_id and usage.get("cost_usd"):
            AgentSession.objects.filter(pk=task.session_id).update(
                total_cost_usd=F("total_cost_usd") + usage["cost_usd"]
            )
        append_events(
            task,
            [status_event(task, exit_code=exit_code, error=error, result=result, usage=usage, **how)],
        )
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
    """End a running task whose supervisor died: nobody can manage its process any more."""
    with transaction.atomic():
        updated = (
            Task.objects.running()
            .filter(pk=task.pk)
            .update(status=Status.ORPHANED, finished_at=timezone.now(), error=reason)
        )
        cancel_open_permissions(task, "the task's supervisor died before it was answered")
        task.refresh_from_db()
        if updated:
            append_events(task, [status_event(task, error=reason)])
    return task
