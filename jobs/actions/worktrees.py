"""The git worktree an isolated task runs in (docs/architecture.md, "Changes and worktrees"): planned as the task is
created (`plan_worktree`), made by the supervisor that runs it (`enter_worktree`), then merged into its base branch or
discarded by whoever reviews the work (`merge_worktree`, `discard_worktree`), or pruned BRIDGE_WORKTREE_KEEP_DAYS after
its last task ended (`prune_worktrees`). A worktree lives on the host that made it: only a process with that host's
data dir (its BRIDGE_MACHINE_ID) touches it."""

from datetime import timedelta
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from jobs.core import paths
from jobs.core.errors import BridgeError, Conflict, ErrorCode, InvalidInput
from jobs.core.vocabulary import TERMINAL_STATUSES, Isolation, WorktreeState
from jobs.models import AgentSession, Task, Worktree
from jobs.workspace import worktrees
from jobs.workspace.worktrees import WorktreeError

# What a WorktreeError's code means to a planner: the rest are a plain conflict with git's words.
CODES = {
    "not_a_repository": ErrorCode.NOT_A_REPOSITORY,
    "no_commits": ErrorCode.NOT_A_REPOSITORY,
    "bad_base": ErrorCode.NOT_A_REPOSITORY,
    "conflict": ErrorCode.MERGE_CONFLICT,
    "checkout_not_clean": ErrorCode.CHECKOUT_NOT_CLEAN,
    "nothing_to_merge": ErrorCode.NOTHING_TO_MERGE,
}
STRATEGIES = worktrees.STRATEGIES
MAX_NAMED = 10  # the uncommitted files a create reply names


def refusal(exc: WorktreeError) -> BridgeError:
    """A WorktreeError as every interface answers it (a 400 for what the planner asked, else a 409)."""
    code = CODES.get(exc.code, ErrorCode.CONFLICT)
    kind = InvalidInput if code == ErrorCode.NOT_A_REPOSITORY else Conflict
    return kind(exc.message, code=code, files=list(exc.files))


def isolation_wanted(isolation: str, cwd: Path) -> bool:
    """Asked for, or the default under one of BRIDGE_WORKTREE_ROOTS when the planner did not say."""
    if isolation:
        if isolation not in set(Isolation):
            raise InvalidInput(f"isolation must be one of {', '.join(Isolation)}, not {isolation!r}", field="isolation")
        return isolation == Isolation.WORKTREE
    return paths.is_inside(cwd, [Path(root) for root in settings.BRIDGE_WORKTREE_ROOTS])


def worktree_for(isolation: str, base: str, cwd: Path, session: AgentSession | None) -> Worktree | None:
    """The worktree a new task runs in: a follow-up's is its session's (so it sees what the session did); an isolated
    task's is planned here, once its cwd is known to be in a git repository with `base` (or a first commit). Nothing
    is made on disk yet, and a new row is not saved: the supervisor that runs the task makes it, create_task saves
    it with the task."""
    if session is not None:
        earlier = Task.objects.filter(session=session, worktree__isnull=False).order_by("-created_at").first()
        if earlier is not None and earlier.worktree is not None:
            return _still_there(earlier.worktree)
    if not isolation_wanted(isolation, cwd):
        if base:
            raise InvalidInput('base is only for isolation "worktree"', field="base")
        return None
    try:
        worktrees.check_base(cwd, base)
    except WorktreeError as exc:
        raise refusal(exc) from None
    return Worktree(base_ref=base)


def _still_there(row: Worktree) -> Worktree:
    if row.state not in (WorktreeState.PLANNED, WorktreeState.LIVE):
        raise Conflict(
            f"the session's worktree ({row.branch}) was {row.state}: its work is no longer there to continue; "
            "start a new task instead",
            code=ErrorCode.WORKTREE_GONE,
        )
    return row


def left_out_note(task: Task) -> str:
    """For an isolated task's create reply: the user's uncommitted changes, which its worktree does not hold (it
    starts from a commit); "" when there are none, or the task is not isolated."""
    if task.worktree is None or task.worktree.state != WorktreeState.PLANNED or task.worktree.base_ref:
        return ""
    changed = worktrees.uncommitted(Path(task.cwd))
    if not changed:
        return ""
    shown = ", ".join(changed[:MAX_NAMED]) + (
        f" and {len(changed) - MAX_NAMED} more" if len(changed) > MAX_NAMED else ""
    )
    return (
        f"{len(changed)} uncommitted change(s) in your checkout are not in the task's worktree, which starts from "
        f"the last commit: {shown}. Commit them first if the task needs them."
    )


def enter_worktree(task: Task, cwd: Path) -> Path:
    """Where the task's agent works: its worktree (made now, on this host, if it is only planned) at the same place
    relative to the repository as `cwd`. Raises BridgeError when it cannot be made or is not here."""
    row = task.worktree
    if row is None:
        return cwd
    if row.state == WorktreeState.PLANNED:
        try:
            made = worktrees.create(cwd, settings.BRIDGE_WORKTREES_DIR, task.public_id.hex[:8], row.base_ref)
        except WorktreeError as exc:
            raise refusal(exc) from None
        _record_made(row, made)
        return made.cwd()
    _on_this_host(_still_there(row))
    return _made(row).cwd()


def _record_made(row: Worktree, made: worktrees.Worktree) -> None:
    fields = {**made.as_json(), "machine": settings.BRIDGE_MACHINE_ID, "state": WorktreeState.LIVE}
    Worktree.objects.filter(pk=row.pk).update(**fields)
    row.refresh_from_db()


def _made(row: Worktree) -> worktrees.Worktree:
    return worktrees.Worktree(
        repo=row.repo,
        path=row.path,
        branch=row.branch,
        base_branch=row.base_branch,
        base_commit=row.base_commit,
        relative_cwd=row.relative_cwd,
    )


def _on_this_host(row: Worktree) -> None:
    if row.machine != settings.BRIDGE_MACHINE_ID:
        raise Conflict(
            f"the worktree {row.branch} is on another host (data dir {row.machine}): merge or discard it through the "
            "Bridge that ran the task",
            code=ErrorCode.WORKTREE_ELSEWHERE,
        )


def _reviewable(task: Task) -> Worktree:
    """The task's live worktree on this host, whose tasks have all ended: what merge and discard act on."""
    row = task.worktree
    if row is None:
        raise Conflict(
            "the task ran in its cwd, not in a worktree of its own: there is nothing to merge or discard",
            code=ErrorCode.NOT_ISOLATED,
        )
    if row.state != WorktreeState.LIVE:
        why = "its agent has not started yet" if row.state == WorktreeState.PLANNED else f"it was {row.state}"
        raise Conflict(f"the worktree cannot be merged or discarded: {why}", code=ErrorCode.WORKTREE_GONE)
    _on_this_host(row)
    active = row.tasks.exclude(status__in=TERMINAL_STATUSES).first()
    if active is not None:
        raise Conflict(f"task {active.public_id} still runs in this worktree: wait for it to end, or cancel it")
    return row


def merge_worktree(task: Task, strategy: str, message: str = "") -> dict[str, Any]:
    """Commit what the task's worktree holds on its branch and land it on the base branch (a merge commit, or one
    squashed commit); the worktree and its branch are then removed. A conflict, or a checkout the merge would
    overwrite, is refused naming the files, and nothing anywhere is changed."""
    if strategy not in STRATEGIES:
        raise InvalidInput(f"strategy must be one of {', '.join(STRATEGIES)}, not {strategy!r}", field="strategy")
    with transaction.atomic():
        row = _reviewable(Task.objects.select_related("worktree").get(pk=task.pk))
        Worktree.objects.select_for_update().filter(pk=row.pk).first()  # one merge or discard at a time
        made = _made(row)
        text = message.strip() or f"{task.prompt.strip().splitlines()[0][:72]}\n\nBridge task {task.public_id}"
        try:
            commit = worktrees.merge(made, strategy, text, settings.BRIDGE_GIT_AUTHOR)
        except WorktreeError as exc:
            raise refusal(exc) from None
        _removed(row, made, WorktreeState.MERGED, merged_commit=commit)
    return _data(row)


def discard_worktree(task: Task) -> dict[str, Any]:
    """Remove the task's worktree and its branch: its work is thrown away."""
    with transaction.atomic():
        row = _reviewable(Task.objects.select_related("worktree").get(pk=task.pk))
        Worktree.objects.select_for_update().filter(pk=row.pk).first()
        _removed(row, _made(row), WorktreeState.DISCARDED)
    return _data(row)


def _removed(row: Worktree, made: worktrees.Worktree, state: str, merged_commit: str = "") -> None:
    try:
        worktrees.remove(made)
    except WorktreeError as exc:
        raise refusal(exc) from None
    Worktree.objects.filter(pk=row.pk).update(state=state, merged_commit=merged_commit, removed_at=timezone.now())
    row.refresh_from_db()


def prune_worktrees() -> int:
    """Remove this host's live worktrees whose tasks all ended over BRIDGE_WORKTREE_KEEP_DAYS ago (their branches
    go too: nobody merged them); how many were removed."""
    cutoff = timezone.now() - timedelta(days=settings.BRIDGE_WORKTREE_KEEP_DAYS)
    stale = (
        Worktree.objects.filter(state=WorktreeState.LIVE, machine=settings.BRIDGE_MACHINE_ID)
        .exclude(tasks__finished_at__gte=cutoff)
        .exclude(tasks__finished_at__isnull=True)
    )
    pruned = 0
    for row in stale:
        try:
            worktrees.remove(_made(row))
        except WorktreeError:
            continue  # left live: the next prune tries again
        pruned += Worktree.objects.filter(pk=row.pk, state=WorktreeState.LIVE).update(
            state=WorktreeState.PRUNED, removed_at=timezone.now()
        )
    return pruned


def live_worktree_paths() -> list[Path]:
    """The worktrees on this host whose files a planner may read (hermes_read): live ones only."""
    live = Worktree.objects.filter(state=WorktreeState.LIVE, machine=settings.BRIDGE_MACHINE_ID)
    return [Path(path) for path in live.values_list("path", flat=True)]


def worktree_data(row: Worktree | None) -> dict[str, Any] | None:
    """The worktree as every interface shows it (None for a task that ran in its cwd)."""
    return None if row is None else _data(row)


def _data(row: Worktree) -> dict[str, Any]:
    made = _made(row)
    return {
        "state": row.state,
        "branch": row.branch,
        "base_branch": row.base_branch,
        "base_commit": row.base_commit,
        "base_ref": row.base_ref,
        "repo": row.repo,
        "path": row.path,
        "cwd": str(made.cwd()) if row.path else "",
        "merged_commit": row.merged_commit,
        "removed_at": row.removed_at.isoformat() if row.removed_at else None,
    }
