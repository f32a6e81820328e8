"""What a task changed in its working directory (docs/architecture.md, "Changes and worktrees").

The supervisor that runs a task takes a snapshot of its working directory as the agent starts (`begin_changes`) and
compares the directory with it once the agent is gone (`record_changes`, with a `changes` event before the task's
end). A task that ended without its run getting there (its agent did not start, Bridge failed, the task was orphaned)
is settled later by a supervisor on the machine that holds the snapshot (`settle_pending_changes`). Every interface
reads the same shape (`changes_data`)."""

from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from jobs.actions.events import append_events
from jobs.core.vocabulary import TERMINAL_STATUSES, ChangesState
from jobs.models import Task, TaskChanges
from jobs.workspace import snapshots

# The files a `changes` event lists (all of them are in GET /v1/task/changes); enough for a glance in a stream.
FILES_IN_EVENT = 50


def limits() -> snapshots.Limits:
    return snapshots.Limits(max_files=settings.BRIDGE_CHANGES_MAX_FILES, max_bytes=settings.BRIDGE_CHANGES_MAX_BYTES)


def store() -> Path:
    """Where snapshots keep what they need until the end is compared (Bridge's data dir, hidden from agents)."""
    return settings.DATA_DIR / "changes"


def take_snapshot(task: Task, cwd: Path) -> snapshots.Snapshot:
    """The working directory as the task's agent is about to start in it (no rows written: `begin_changes`)."""
    return snapshots.take(cwd, store(), str(task.public_id), limits())


def begin_changes(task: Task, snapshot: snapshots.Snapshot) -> None:
    """Keep the snapshot its end will be compared with; the same again (a retried write) changes nothing."""
    TaskChanges.objects.update_or_create(
        task=task,
        defaults={
            "machine": settings.BRIDGE_MACHINE_ID,
            "snapshot": snapshot.as_json(),
            "state": ChangesState.PENDING,
            "kind": snapshot.kind,
        },
    )


def changes_since(snapshot: snapshots.Snapshot) -> snapshots.Changes:
    """What changed since the snapshot, read from the disk now (no rows written: `record_changes`)."""
    return snapshots.changes_since(snapshot, store(), limits())


def record_changes(task: Task, changes: snapshots.Changes, *, announce: bool = True) -> bool:
    """Record what the task changed, once: False when it was recorded already (a retried write, or a peer that
    settled it first). With `announce`, a `changes` event says so in the transcript (before the task's end: nothing
    is appended after it)."""
    counts = _counts(changes)
    state = ChangesState.UNAVAILABLE if changes.reason else ChangesState.RECORDED
    with transaction.atomic():
        updated = TaskChanges.objects.filter(task=task, state=ChangesState.PENDING).update(
            state=state,
            base=changes.base,
            files=[vars(f) for f in changes.files],
            patch=changes.patch,
            truncated=changes.truncated,
            left_out=changes.left_out,
            reason=changes.reason,
            recorded_at=timezone.now(),
            **counts,
        )
        if updated and announce:
            append_events(task, [("changes", _event(state, changes, counts))])
    if updated:
        kept = TaskChanges.objects.values_list("snapshot", flat=True).get(task=task)
        snapshots.forget(snapshots.Snapshot.from_json(kept), store())
    return bool(updated)


def settle_pending_changes() -> int:
    """Record the changes of ended tasks whose run did not (their agent never started, Bridge failed, the task was
    orphaned), for the snapshots this machine's data dir holds; how many were settled. No event: a task's end is its
    transcript's last word."""
    pending = TaskChanges.objects.filter(
        state=ChangesState.PENDING, machine=settings.BRIDGE_MACHINE_ID, task__status__in=TERMINAL_STATUSES
    ).select_related("task")
    settled = 0
    for row in pending:
        settled += record_changes(row.task, changes_since(snapshots.Snapshot.from_json(row.snapshot)), announce=False)
    return settled


def changes_data(task: Task) -> dict[str, Any]:
    """The one shape every interface answers with (REST `GET /v1/task/changes`, MCP, the task page)."""
    row = TaskChanges.objects.filter(task=task).first()
    if row is None:
        return _none(task)
    answer: dict[str, Any] = {
        "task_id": str(task.public_id),
        "state": row.state,
        "kind": row.kind,
        "base": row.base,
        "files": row.files,
        "patch": row.patch,
        "truncated": row.truncated,
        "left_out": row.left_out,
        "reason": row.reason,
        "files_changed": row.files_changed,
        "lines_added": row.lines_added,
        "lines_removed": row.lines_removed,
        "recorded_at": row.recorded_at.isoformat() if row.recorded_at else None,
    }
    if row.state == ChangesState.PENDING:
        answer["reason"] = "the task has not ended yet" if not task.is_terminal else "being recorded"
    return answer


def _none(task: Task) -> dict[str, Any]:
    if not settings.BRIDGE_CHANGES:
        why = "Bridge records no changes here (BRIDGE_CHANGES=0)"
    elif task.status in TERMINAL_STATUSES:
        why = "no snapshot was taken: its agent never started here, or it ran before Bridge recorded changes"
    else:
        why = "its agent has not started yet"
    return {
        "task_id": str(task.public_id),
        "state": "none",
        "kind": "",
        "base": "",
        "files": [],
        "patch": "",
        "truncated": False,
        "left_out": "",
        "reason": why,
        "files_changed": 0,
        "lines_added": 0,
        "lines_removed": 0,
        "recorded_at": None,
    }


def _counts(changes: snapshots.Changes) -> dict[str, int]:
    """The whole counts: the listed files' lines, and the files past the list counted by `left_out`'s number."""
    return {
        "files_changed": len(changes.files) + changes.files_left_out,
        "lines_added": sum(f.added for f in changes.files),
        "lines_removed": sum(f.removed for f in changes.files),
    }


def _event(state: str, changes: snapshots.Changes, counts: dict[str, int]) -> dict[str, Any]:
    return {
        "state": state,
        **counts,
        "files": [vars(f) for f in changes.files[:FILES_IN_EVENT]],
        "truncated": changes.truncated or len(changes.files) > FILES_IN_EVENT,
        "reason": changes.reason,
    }
