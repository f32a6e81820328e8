"""The git worktree an isolated task runs in (docs/architecture.md, "Changes and worktrees"): planned as the task is
created (`plan_worktree`), made by the supervisor that runs it (`enter_worktree`), then merged into its base branch or
discarded by whoever reviews the work (`merge_worktree`, `discard_worktree`), or pruned BRIDGE_WORKTREE_KEEP_DAYS after
its last task ended (`prune_worktrees`). A worktree lives on the host that made it: only a process with that host's
data dir (its BRIDGE_MACHINE_ID) touches it, so a merge or discard asked on another host is carried out by a supervisor
of that one (`review_worktree`, `carry_out_worktree_requests`)."""

import logging
import socket
import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from asgiref.sync import async_to_sync, sync_to_async
from django.conf import settings
from django.db.models import Q
from django.utils import timezone

from jobs.actions.workers import live_supervisors
from jobs.core import doorbell, paths
from jobs.core.errors import BridgeError, Conflict, ErrorCode, InvalidInput
from jobs.core.resilience import DB_ERRORS
from jobs.core.vocabulary import TERMINAL_STATUSES, Isolation, WorktreeState
from jobs.models import AgentSession, Task, Worker, Worktree
from jobs.workspace import worktrees
from jobs.workspace.worktrees import WorktreeError

log = logging.getLogger(__name__)
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
DISCARD = "discard"  # the request that is not a merge (Worktree.request: a strategy or this)
MAX_NAMED = 10  # the uncommitted files a create reply names
ROUTED_WAIT_S = 30.0  # how long a request carried out on another host is waited for before it is answered pending
TAKE_EXPIRES = timedelta(minutes=10)  # a request taken by a process that died before recording its end is free again
REFUSAL_META = ("action", "by", "at", "error", "code")  # what a recorded refusal holds besides its error's detail


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
            f"the worktree {row.branch} is on another host (data dir {row.machine}): only a supervisor there can run "
            "a task in it",
            code=ErrorCode.WORKTREE_ELSEWHERE,
        )


def _reviewable(task: Task) -> Worktree:
    """The task's live worktree, whose tasks have all ended: what merge and discard act on."""
    row = task.worktree
    if row is None:
        raise Conflict(
            "the task ran in its cwd, not in a worktree of its own: there is nothing to merge or discard",
            code=ErrorCode.NOT_ISOLATED,
        )
    _check_live(row)
    _check_idle(row)
    return row


def _check_live(row: Worktree) -> None:
    if row.state != WorktreeState.LIVE:
        why = "its agent has not started yet" if row.state == WorktreeState.PLANNED else f"it was {row.state}"
        raise Conflict(f"the worktree cannot be merged or discarded: {why}", code=ErrorCode.WORKTREE_GONE)


def _check_idle(row: Worktree) -> None:
    active = row.tasks.exclude(status__in=TERMINAL_STATUSES).first()
    if active is not None:
        raise Conflict(f"task {active.public_id} still runs in this worktree: wait for it to end, or cancel it")


@dataclass(frozen=True)
class Review:
    """What came of a merge or discard: `done`, with the worktree as it is now; or not yet, still pending on the host
    that holds the worktree (`worktree["requested"]` says what waits there)."""

    worktree: dict[str, Any]
    done: bool


def merge_worktree(task: Task, strategy: str, message: str = "", *, by: str = "") -> Review:
    """Commit what the task's worktree holds on its branch and land it on the base branch (a merge commit, or one
    squashed commit); the worktree and its branch are then removed. A conflict, or a checkout the merge would
    overwrite, is refused naming the files, and nothing anywhere is changed. Carried out where the worktree is
    (`review_worktree`)."""
    if strategy not in STRATEGIES:
        raise InvalidInput(f"strategy must be one of {', '.join(STRATEGIES)}, not {strategy!r}", field="strategy")
    text = message.strip() or f"{task.prompt.strip().splitlines()[0][:72]}\n\nBridge task {task.public_id}"
    return review_worktree(task, strategy, text, by)


def discard_worktree(task: Task, *, by: str = "") -> Review:
    """Remove the task's worktree and its branch: its work is thrown away. Carried out where the worktree is."""
    return review_worktree(task, DISCARD, "", by)


def review_worktree(task: Task, action: str, message: str, by: str) -> Review:
    """Merge, squash or discard the task's worktree on the host that holds it, and answer alike from any host.

    Here: at once. Elsewhere: recorded on the worktree's row for a live supervisor of that host (`Worker.machine`),
    which carries it out in its sweep (`carry_out_worktree_requests`) and records the outcome; this waits for it on
    the task's doorbell up to ROUTED_WAIT_S, then answers it still pending. With no live supervisor there it is
    refused at once (`worktree_elsewhere`) and not kept: nothing would carry it out. One request at a time: the
    conditional UPDATE that records it fails for a second while one is pending (`worktree_request_pending`)."""
    row = _reviewable(Task.objects.select_related("worktree").get(pk=task.pk))
    if row.machine == settings.BRIDGE_MACHINE_ID:
        asked_at = _ask(row, action, message, by, taken=True)
        return Review(_carry_out(row.pk, asked_at), done=True)
    _check_served(row)
    asked_at = _ask(row, action, message, by, taken=False)
    _ring_tasks_of(row.pk)
    return _await_outcome(task, row.pk, asked_at)


def _untaken(now: datetime) -> Q:
    """No process carries the row's request out: none took it, or the one that did died before recording its end."""
    return Q(request_taken_at__isnull=True) | Q(request_taken_at__lt=now - TAKE_EXPIRES)


def _free(now: datetime) -> Q:
    """A new request may be recorded: none is pending, or the one taken was left by a process that died."""
    return Q(request="") | Q(request_taken_at__lt=now - TAKE_EXPIRES)


def _ask(row: Worktree, action: str, message: str, by: str, *, taken: bool) -> datetime:
    """Record the request, taken at once when this process carries it out; when it was recorded (its identity)."""
    now = timezone.now()
    asked = Worktree.objects.filter(_free(now), pk=row.pk, state=WorktreeState.LIVE).update(
        request=action,
        request_message=message,
        requested_by=by,
        requested_at=now,
        request_taken_at=now if taken else None,
        refusal={},
    )
    if not asked:
        current = Worktree.objects.get(pk=row.pk)
        _check_live(current)
        raise Conflict(
            f"a {current.request or 'merge or discard'} of the worktree {current.branch} is pending (asked by "
            f"{current.requested_by or 'someone'}): wait for its outcome, which the task's worktree shows, and ask "
            "again if need be",
            code=ErrorCode.WORKTREE_REQUEST_PENDING,
            requested=_requested(current),
        )
    return now


def _check_served(row: Worktree) -> None:
    """Refuse at once when no live supervisor of the worktree's host is there to carry a request out."""
    if any(w.machine == row.machine and w.handover_requested_at is None for w in live_supervisors()):
        return
    hosts = Worker.objects.filter(machine=row.machine).order_by("-heartbeat_at").values_list("host", flat=True)
    host = hosts.first() or "unknown"
    raise Conflict(
        f"the worktree {row.branch} is on host {host} (data dir {row.machine}), where no supervisor runs now to merge "
        "or discard it: start one there (`manage.py supervise`, or runbridge) and ask again. This request was not "
        "kept.",
        code=ErrorCode.WORKTREE_ELSEWHERE,
        host=host,
    )


def _await_outcome(task: Task, pk: int, asked_at: datetime) -> Review:
    """Until the request's outcome is on the row, or ROUTED_WAIT_S passes: then it is still pending. The row is read
    again at each ring of the task (the carrying supervisor rings it; Redis carries that ring across hosts) and every
    BRIDGE_POLL_S in case a ring is lost, as MCP's bounded waits do (`AsyncWaiter`, which hears other processes)."""
    return async_to_sync(_outcome_within)(str(task.public_id), pk, asked_at, time.monotonic() + ROUTED_WAIT_S)


async def _outcome_within(key: str, pk: int, asked_at: datetime, deadline: float) -> Review:
    waiter = doorbell.AsyncWaiter(key)
    read = sync_to_async(_read_outcome)  # on the caller's thread, with its database connection
    try:
        while True:
            review = await read(pk, asked_at, final=time.monotonic() >= deadline)
            if review is not None:
                return review
            await waiter.wait(min(deadline - time.monotonic(), settings.BRIDGE_POLL_S))
    finally:
        waiter.close()


def _read_outcome(pk: int, asked_at: datetime, *, final: bool) -> Review | None:
    """The request's outcome (its refusal raised); None while pending, unless this is the `final` look."""
    row = Worktree.objects.get(pk=pk)
    review = _outcome(row, asked_at)
    return Review(_data(row), done=False) if review is None and final else review


def _outcome(row: Worktree, asked_at: datetime) -> Review | None:
    """What came of the request recorded at `asked_at`: None while pending; its refusal is raised."""
    if row.requested_at != asked_at:  # it was refused and another asked since: that one's state is all there is
        return Review(_data(row), done=False)
    if row.request:
        return None
    if row.state == WorktreeState.LIVE:
        raise _refused(row.refusal)
    return Review(_data(row), done=True)


def _refused(told: dict[str, Any]) -> BridgeError:
    """A refusal recorded on the row (`_record_refusal`) as the error the host that refused it raised."""
    detail = {key: value for key, value in told.items() if key not in REFUSAL_META}
    return BridgeError(str(told.get("error", "")), code=ErrorCode(told.get("code", ErrorCode.CONFLICT)), **detail)


def carry_out_worktree_requests() -> int:
    """This host's side of `review_worktree`, called by each supervisor's sweep: every request for a worktree here
    that no process carries out is taken (a conditional UPDATE, so one supervisor does it) and carried out, its
    outcome recorded on the row, where the requester reads it. One read through a partial index; how many it
    carried out (done or refused)."""
    carried = 0
    now = timezone.now()
    for row in Worktree.objects.requested_on(settings.BRIDGE_MACHINE_ID).filter(_untaken(now)):
        took = Worktree.objects.filter(_untaken(now), pk=row.pk, requested_at=row.requested_at).update(
            request_taken_at=timezone.now()
        )
        if not took:
            continue  # another supervisor of this host took it
        try:
            _carry_out(row.pk, row.requested_at)
        except BridgeError:
            pass  # refused: recorded on the row, where its requester reads it
        carried += 1
    return carried


def _carry_out(pk: int, asked_at: datetime | None) -> dict[str, Any]:
    """Carry out the request this process took: the worktree's data once done; a refusal is recorded, then raised.
    A failure of Bridge's own (not the database's, which the caller's retries cover) is logged and recorded as one."""
    row = Worktree.objects.get(pk=pk)
    try:
        _check_idle(row)
        commit = _apply(row)
    except BridgeError as exc:
        _record_refusal(row, asked_at, exc)
        raise
    except DB_ERRORS:
        raise
    except Exception as exc:
        log.exception("worktree %s: the %s asked by %s failed", row, row.request, row.requested_by)
        failed = BridgeError(
            f"Bridge failed to {row.request} the worktree {row.branch} on host {socket.gethostname()}: "
            f"{exc.__class__.__name__}: {exc}; that host's log has the details",
            code=ErrorCode.INTERNAL_ERROR,
        )
        _record_refusal(row, asked_at, failed)
        raise failed from exc
    state = WorktreeState.DISCARDED if row.request == DISCARD else WorktreeState.MERGED
    Worktree.objects.filter(pk=pk).update(
        state=state, merged_commit=commit, removed_at=timezone.now(), request="", request_taken_at=None
    )
    row.refresh_from_db()
    _ring_tasks_of(pk)
    return _data(row)


def _apply(row: Worktree) -> str:
    """The git side: merge (its commit) or not, then remove the worktree and its branch."""
    made = _made(row)
    commit = ""
    try:
        if row.request != DISCARD:
            commit = worktrees.merge(made, row.request, row.request_message, settings.BRIDGE_GIT_AUTHOR)
        worktrees.remove(made)
    except WorktreeError as exc:
        raise refusal(exc) from None
    return commit


def _record_refusal(row: Worktree, asked_at: datetime | None, exc: BridgeError) -> None:
    """The request is cleared, so it can be asked again, and why it was refused kept (`refused` in the data)."""
    told = {"action": row.request, "by": row.requested_by, "at": timezone.now().isoformat(), **exc.as_dict()}
    Worktree.objects.filter(pk=row.pk, requested_at=asked_at).update(request="", request_taken_at=None, refusal=told)
    _ring_tasks_of(row.pk)


def _ring_tasks_of(pk: int) -> None:
    """News of a worktree is its tasks' news: the requester waits on its task's ring, pages show the task."""
    for public_id in Task.objects.filter(worktree_id=pk).values_list("public_id", flat=True):
        doorbell.ring(str(public_id))


def prune_worktrees() -> int:
    """Remove this host's live worktrees whose tasks all ended over BRIDGE_WORKTREE_KEEP_DAYS ago (their branches
    go too: nobody merged them); how many were removed."""
    cutoff = timezone.now() - timedelta(days=settings.BRIDGE_WORKTREE_KEEP_DAYS)
    stale = (
        Worktree.objects.filter(state=WorktreeState.LIVE, machine=settings.BRIDGE_MACHINE_ID, request="")
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
        "requested": _requested(row),
        "refused": row.refusal or None,
    }


def _requested(row: Worktree) -> dict[str, Any] | None:
    """The merge or discard pending on the worktree's host, if one is."""
    if not row.request:
        return None
    return {
        "action": row.request,
        "message": row.request_message,
        "by": row.requested_by,
        "at": row.requested_at.isoformat() if row.requested_at else None,
        "taken_at": row.request_taken_at.isoformat() if row.request_taken_at else None,
    }
