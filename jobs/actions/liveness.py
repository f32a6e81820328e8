"""Orphans seen when a job is read: a running task whose supervisor is dead is marked `orphaned` by the first read
that looks at it, not by the next supervisor's scan (docs/architecture.md, "Orphans").

A supervisor is alive if it has not stopped and, on this host, its pid still has the recorded create time, or, on
another host, its heartbeat is fresh (`worker_is_alive`). Every adapter's single-task read goes through `get_task`,
which settles the task it returns; list and count reads call `settle_running_tasks` (or `settle_orphans` on the
rows they hold) first, and health (`system_state`) lists only `live_supervisors`. Settling never waits long on a lock
another process holds: a read that cannot take the task at once answers with the task as read, and a later read
settles it (`runs.mark_orphaned`).
"""

import logging
import socket
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from django.conf import settings
from django.db import OperationalError, connection

from jobs import processes
from jobs.actions.runs import explain_waits, mark_orphaned
from jobs.actions.workers import live_supervisors, running_by_worker, worker_is_alive
from jobs.core.resilience import DB_ERRORS, is_storage_full, saw_storage_full, storage_state
from jobs.core.vocabulary import Status
from jobs.models import PermissionRequest, Task, TaskCount, Worker

log = logging.getLogger(__name__)


def settle_if_orphaned(task: Task) -> Task:
    """The task as it really is: a running task whose supervisor is dead is marked orphaned first (with a reason
    naming that supervisor), and its agent, if still alive on this host, is killed: nobody can manage it now."""
    if task.status != Status.RUNNING:
        return task
    worker = task.worker if task.worker_id else None  # read with the task by get_task; else one query here
    if worker_is_alive(worker):
        return task
    return orphan(task, worker)


def settle_orphans(tasks: Iterable[Task]) -> list[Task]:
    """settle_if_orphaned for the rows of a list read, asking about each supervisor once; returns them, updated."""
    tasks = list(tasks)
    running = [task for task in tasks if task.status == Status.RUNNING]
    if running:
        workers, dead = _dead_workers({task.worker_id for task in running})
        for task in running:
            if task.worker_id in dead:
                orphan(task, workers.get(task.worker_id))
    return tasks


def settle_running(worker_of: dict[int, int | None]) -> list[Task]:
    """settle_orphans for running tasks known only by pk and supervisor id (`worker_of`), as a sweep reads them:
    only a task whose supervisor is dead is read whole. Returns those, orphaned now."""
    workers, dead = _dead_workers(set(worker_of.values()))
    if not dead:
        return []
    orphans = Task.objects.filter(pk__in=[pk for pk, worker in worker_of.items() if worker in dead])
    return [orphan(task, workers.get(task.worker_id)) for task in orphans]


def orphan_others(current: Worker) -> list[Task]:
    """A supervisor's scan: every running task of another supervisor that is dead is orphaned (`orphan`). Returns
    those."""
    others = Task.objects.running().exclude(worker=current).select_related("worker")
    return [task for task in settle_orphans(others) if task.status == Status.ORPHANED]


def _dead_workers(pks: set[int | None]) -> tuple[dict[int | None, Worker], set[int | None]]:
    """These supervisors' rows, and which of `pks` are dead (gone from the table, or None, counts as dead)."""
    workers = Worker.objects.in_bulk(pks - {None})
    return workers, {pk for pk in pks if pk not in workers or not worker_is_alive(workers[pk])}


def settle_running_tasks() -> int:
    """Orphan every running task whose supervisor is dead; call it before counting or listing tasks. Returns how
    many were orphaned now."""
    running = list(Task.objects.running())
    return sum(task.status == Status.ORPHANED for task in settle_orphans(running))


@dataclass
class SystemState:
    database: str  # "ok", or the error that reaching it raised
    counts: dict[str, int]
    workers: list[Worker]
    pending_permissions: int = 0  # requests waiting for someone to decide
    running: dict[int, int] = field(default_factory=dict)  # running tasks per live supervisor (by pk)
    storage: str = "ok"  # "full" when the disk that holds the database or the data directory is (resilience)


def system_state() -> SystemState:
    """What a health check reports, with dead supervisors' running tasks orphaned first and only live supervisors
    listed (with how many tasks each runs); queued tasks no live supervisor serves are told so (`explain_waits`).
    A broken database is reported, not raised; so is a full disk, which stops writes but not reads."""
    try:
        _settle_before_health()
        pending = PermissionRequest.objects.pending().count()
        workers = live_supervisors()
        state = SystemState("ok", TaskCount.by_status(), workers, pending, running_by_worker())
    except Exception as exc:
        log.warning("health: the database cannot be read: %s", exc)
        state = SystemState(f"error: {exc.__class__.__name__}: {exc}", {}, [])
    state.storage = storage_state(_storage_places())
    return state


def _settle_before_health() -> None:
    """Orphans and wait reasons are written before health reads; with the disk full they cannot be, and health
    reads on (and says the disk is full: `storage_state` hears of the failure)."""
    try:
        settle_running_tasks()
        explain_waits()
    except DB_ERRORS as exc:
        if not is_storage_full(exc):
            raise
        saw_storage_full()


def _storage_places() -> list[Path]:
    """Where Bridge stores things on this machine: its data directory, and a SQLite database's directory."""
    places = [Path(settings.DATA_DIR)]
    if connection.vendor == "sqlite":
        places.append(Path(connection.settings_dict["NAME"]).parent)
    return places


def orphan(task: Task, worker: Worker | None) -> Task:
    """End a running task whose supervisor (`worker`, None when its row is gone) is dead: the one way, wherever that
    is found (a read, a stream's sweep, another supervisor's scan). Nobody can manage its processes now, so on this
    host its agent and whatever the agent started, wherever it was re-parented (`processes.kill_tagged`), are killed
    first; every event recorded so far is kept; nothing is re-run. When another transaction holds the task (its frozen
    supervisor's, say), or the disk is too full to record the end, the task is returned as read and a later read
    settles it: no read waits on another process (`runs.mark_orphaned`), nor fails for want of space."""
    if worker is None:
        reason = "its supervisor is gone (no record of it is left)"
    else:
        reason = f"its supervisor ({worker.name}, pid {worker.pid}) stopped while the task was running"
    here = worker is not None and worker.host == socket.gethostname()
    if here and task.pid is not None and processes.same_process(task.pid, task.process_create_time):
        processes.kill_tree(task.pid, task.process_create_time)  # and everything still in its group
        reason += "; the agent process was still alive and has been killed"
    if here or worker is None:  # a gone row's host is unknown; what carries the task's tag here is the task's
        processes.kill_tagged(str(task.public_id), task.process_create_time)
    try:
        task = mark_orphaned(task, reason + ". Nothing was re-run.")
    except OperationalError as exc:
        if not is_storage_full(exc):
            raise
        saw_storage_full()
        log.warning("task %s: its supervisor is gone, and the disk is too full to record that yet", task.public_id)
        return task
    if task.status == Status.ORPHANED:
        log.warning("task %s orphaned: %s", task.public_id, reason)
    return task
