"""A task's life under a supervisor: claimed, spawned, linked to its agent session, finished or orphaned."""

from typing import Any

from django.db import connection, transaction
from django.db.models import F
from django.utils import timezone

from jobs.actions.events import append_events, status_event
from jobs.actions.permissions import cancel_open_permissions
from jobs.actions.workers import worker_is_alive
from jobs.models import AgentSession, Task, Worker
from jobs.vocabulary import Status

USAGE_FIELDS = (
    "cost_usd",
    "input_tokens",
    "output_tokens",
    "cache_creation_input_tokens",
    "cache_read_input_tokens",
    "num_turns",
)


def claim_next_task(worker: Worker) -> Task | None:
    """Atomically take the oldest queued task (FIFO), or None. Safe with several supervisors."""
    with transaction.atomic():
        queued = Task.objects.queued_in_order()
        if connection.features.has_select_for_update_skip_locked:
            queued = queued.select_for_update(skip_locked=True)
        candidate = queued.values_list("pk", flat=True).first()
        if candidate is None:
            return None
        claimed = (
            Task.objects.queued_in_order()
            .filter(pk=candidate)
            .update(status=Status.RUNNING, worker=worker, started_at=timezone.now())
        )
        if not claimed:
            return None
        task = Task.objects.select_related("session").get(pk=candidate)
        append_events(task, [status_event(task, worker=worker.name)])
    return task


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
    usage = {k: usage[k] for k in USAGE_FIELDS if (usage or {}).get(k) is not None}
    with transaction.atomic():
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
        task.refresh_from_db()
        if not updated:
            return task
        if task.session_id and usage.get("cost_usd"):
            AgentSession.objects.filter(pk=task.session_id).update(
                total_cost_usd=F("total_cost_usd") + usage["cost_usd"]
            )
        append_events(
            task,
            [status_event(task, exit_code=exit_code, error=error, result=result, usage=usage)],
        )
    return task


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


def find_orphans(current: Worker) -> list[Task]:
    """Running tasks whose supervisor is gone (not `current`): their process cannot be managed any more."""
    orphans = []
    running = Task.objects.running().exclude(worker=current).select_related("worker")
    for task in running:
        if not worker_is_alive(task.worker):
            orphans.append(task)
    return orphans
