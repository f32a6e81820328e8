"""Orphans seen when a job is read: a running task whose supervisor is dead is marked `orphaned` by the first read
that looks at it, not by the next supervisor's scan (docs/architecture.md, "Orphans").

A supervisor is alive if it has not stopped and, on this host, its pid still has the recorded create time, or, on
another host, its heartbeat is fresh (`worker_is_alive`). Every adapter's single-task read goes through `get_task`,
which settles the task it returns; list and count reads call `settle_running_tasks` (or `settle_orphans` on the
rows they hold) first, and health (`system_state`) lists only `live_supervisors`.
"""

import logging
import socket
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import timedelta

from django.utils import timezone

from jobs import processes, rows
from jobs.actions.runs import explain_waits, mark_orphaned
from jobs.actions.workers import WORKER_STALE_AFTER, running_by_worker, worker_is_alive
from jobs.models import PermissionRequest, Task, TaskCount, Worker
from jobs.vocabulary import Status

log = logging.getLogger(__name__)
LOCAL_ROWS_WITHIN = timedelta(days=1)


def settle_if_orphaned(task: Task) -> Task:
    """The task as it really is: a running task whose supervisor is dead is marked orphaned first (with a reason
    naming that supervisor), and its agent, if still alive on this host, is killed: nobody can manage it now."""
    if task.status != Status.RUNNING:
        return task
    worker = task.worker if task.worker_id else None  # read with the task by get_task; else one query here
    if worker_is_alive(worker):
        return task
    return _orphan(task, worker)


def settle_orphans(tasks: Iterable[Task]) -> list[Task]:
    """settle_if_orphaned for the rows of a list read, asking about each supervisor once; returns them, updated."""
    tasks = list(tasks)
    running = [task for task in tasks if task.status == Status.RUNNING]
    if running:
        workers, dead = _dead_workers({task.worker_id for task in running})
        for task in running:
            if task.worker_id in dead:
                _orphan(task, workers.get(task.worker_id))
    return tasks


def settle_running(worker_of: dict[int, int | None]) -> list[Task]:
    """settle_orphans for running tasks known only by pk and supervisor id (`worker_of`), as a sweep reads them:
    only a task whose supervisor is dead is read whole. Returns those, orphaned now."""
    workers, dead = _dead_workers(set(worker_of.values()))
    if not dead:
        return []
    orphans = Task.objects.filter(pk__in=[pk for pk, worker in worker_of.items() if worker in dead])
    return [_orphan(task, workers.get(task.worker_id)) for task in orphans]


def _dead_workers(pks: set[int | None]) -> tuple[dict[int, Worker], set[int | None]]:
    """These supervisors' rows, and which of `pks` are dead (gone from the table, or None, counts as dead)."""
    workers = Worker.objects.in_bulk(pks - {None})
    return workers, {pk for pk in pks if pk not in workers or not worker_is_alive(workers[pk])}


def settle_running_tasks() -> int:
    """Orphan every running task whose supervisor is dead; call it before counting or listing tasks. Returns how
    many were orphaned now."""
    running = list(Task.objects.running())
    return sum(task.status == Status.ORPHANED for task in settle_orphans(running))


def live_supervisors() -> list[Worker]:
    """Supervisors alive now, as `worker_is_alive` decides: on this host still the process that registered, whatever
    the clocks say (a supervisor killed a second ago keeps a fresh heartbeat; a live one's can look stale after a
    clock step), elsewhere a fresh heartbeat. Rows of this host that have not beaten for a day are not asked."""
    now, host = timezone.now(), socket.gethostname()
    oldest = now - max(WORKER_STALE_AFTER, LOCAL_ROWS_WITHIN)
    recent = rows.select(Worker, stopped_at=None, above={"heartbeat_at": oldest})
    return [
        worker
        for worker in recent
        if worker.may_be_alive(now, WORKER_STALE_AFTER, host, LOCAL_ROWS_WITHIN) and worker_is_alive(worker)
    ]


@dataclass
class SystemState:
    database: str  # "ok", or the error that reaching it raised
    counts: dict[str, int]
    workers: list[Worker]
    pending_permissions: int = 0  # requests waiting for someone to decide
    running: dict[int, int] = field(default_factory=dict)  # running tasks per live supervisor (by pk)


def system_state() -> SystemState:
    """What a health check reports, with dead supervisors' running tasks orphaned first and only live supervisors
    listed (with how many tasks each runs); queued tasks no live supervisor serves are told so (`explain_waits`).
    A broken database is reported, not raised."""
    try:
        settle_running_tasks()
        explain_waits()
        pending = PermissionRequest.objects.pending().count()
        workers = live_supervisors()
        return SystemState("ok", TaskCount.by_status(), workers, pending, running_by_worker())
    except Exception as exc:
        log.warning("health: the database cannot be read: %s", exc)
        return SystemState(f"error: {exc.__class__.__name__}: {exc}", {}, [])


def _orphan(task: Task, worker: Worker | None) -> Task:
    if worker is None:
        reason = "its supervisor is gone (no record of it is left)"
    else:
        reason = f"its supervisor ({worker.name}, pid {worker.pid}) stopped while the task was running"
    on_this_host = worker is not None and worker.host == socket.gethostname()
    if on_this_host and processes.same_process(task.pid, task.process_create_time):
        processes.kill_tree(task.pid, task.process_create_time)  # and everything it started
        reason += "; the agent process was still alive and has been killed"
    task = mark_orphaned(task, reason + ". Nothing was re-run.")
    log.warning("task %s orphaned when read: %s", task.public_id, reason)
    return task
