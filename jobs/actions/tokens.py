"""API tokens: made (256 random bits, shown once, stored as SHA-256, with a scope and maybe roots), revoked, and
marked as used; and the one rule for what a caller may do (`require_scope`, `check_sees`, `check_creates`,
`seen_tasks`), which REST, SSE, the websockets, the pages and MCP over HTTP each ask once per request."""

import hashlib
import logging
import re
import secrets
import time
from collections.abc import Iterable
from datetime import timedelta
from typing import cast

from django.db import transaction
from django.db.models import Count, QuerySet
from django.utils import timezone

from jobs.actions.tasks import TaskSpec, served_dir, task_cwd_and_session
from jobs.core import paths
from jobs.core.access import DEFAULT_SCOPE, Caller, Scope
from jobs.core.errors import Conflict, ErrorCode, InvalidInput, Refused
from jobs.core.hints import manage_command
from jobs.core.inputs import check_path_text, check_text
from jobs.core.resilience import DB_ERRORS, is_storage_full, saw_storage_full
from jobs.core.terminal import UNSAFE_IN_WORDS, describe, first_unsafe, printable
from jobs.core.vocabulary import Status
from jobs.models import ApiToken, PermissionRequest, Task, TaskCount

TOKEN_PREFIX = "brg_"
PREFIX_LEN = len(TOKEN_PREFIX) + 8
LAST_USED_RESOLUTION = timedelta(minutes=1)
MAX_NAME_CHARS = cast(int, ApiToken._meta.get_field("name").max_length)  # a CharField's: always set
MAX_ROOTS = 32  # roots one token may be limited to
TOKEN_SHAPE = re.compile(r"brg_[A-Za-z0-9_-]{16,64}")
# After a write of a token's last use failed, this process writes none until then (time.monotonic()).
_last_use_paused_until = 0.0

log = logging.getLogger(__name__)


def could_be_token(text: str) -> bool:
    """Whether `text` has the shape of a token Bridge makes: anything else (NUL bytes, other alphabets, any length)
    is refused before it reaches a query."""
    return TOKEN_SHAPE.fullmatch(text) is not None


def token_digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def create_token(name: str, scope: str = DEFAULT_SCOPE, roots: Iterable[str] = ()) -> tuple[ApiToken, str]:
    """Make a token that may do what `scope` allows, in `roots` only when any are given; the plain text is returned
    once and never stored. A name an active token has is refused; a revoked token's name may be used again
    (`free_name`)."""
    name, scope, checked_roots = checked_name(name), checked_scope(scope), checked_token_roots(roots)
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    with transaction.atomic():
        free_name(name)
        row = ApiToken.objects.create(
            name=name, prefix=token[:PREFIX_LEN], hash=token_digest(token), scope=scope, roots=checked_roots
        )
    return row, token


def checked_name(name: object) -> str:
    """A token's name is text to show, never a terminal command: storable, not blank, and nothing a terminal could
    act on (`jobs.core.terminal`), since `token list`, the admin and every refusal print it."""
    name = check_text("the token name", name, MAX_NAME_CHARS).strip()
    if not name:
        raise InvalidInput("give the token a name, e.g. 'hermes'", field="name")
    found = first_unsafe(name)
    if found is not None:
        position, char = found
        raise InvalidInput(
            f"the token name '{printable(name)}' holds {describe(char)} at position {position + 1}: a name is "
            f"letters, digits, punctuation, symbols and spaces, without {UNSAFE_IN_WORDS}; pick another, e.g. 'hermes'",
            field="name",
        )
    return name


def checked_scope(scope: str) -> Scope:
    try:
        return Scope(scope)
    except ValueError:
        listed = "; ".join(f"'{each}' ({each.meaning})" for each in Scope)
        raise InvalidInput(f"a token's scope is one of {listed}; not '{printable(scope)}'", field="scope") from None


def checked_token_roots(roots: Iterable[str]) -> list[str]:
    """The roots a token is limited to: absolute paths, resolved as a task's cwd is (symlinks followed, `~`
    expanded), each once. They need not exist here: a supervisor on another host may serve them."""
    checked: list[str] = []
    for raw in roots:
        candidate = paths.expanded("root", check_path_text("root", raw).strip())
        if not candidate.is_absolute():
            raise InvalidInput(f"a token's root must be an absolute path, not '{printable(raw)}'", field="roots")
        checked.append(str(paths.resolved_or_refused("root", candidate)))
    if len(set(checked)) > MAX_ROOTS:
        raise InvalidInput(f"a token takes at most {MAX_ROOTS} roots, not {len(set(checked))}", field="roots")
    return list(dict.fromkeys(checked))


def free_name(name: str) -> None:
    """Make `name` free for a new token: refused while an active token has it; a revoked one's row is renamed
    `name~<id>` (kept, for the record of when it was made, used and revoked)."""
    old = ApiToken.objects.select_for_update().filter(name=name).first()
    if old is None:
        return
    if old.revoked_at is None:
        raise Conflict(
            f"a token named {name!r} is active: revoke it first ({manage_command('token', 'revoke', name)}) "
            "or pick another name",
            code=ErrorCode.TOKEN_NAME_TAKEN,
        )
    suffix = f"~{old.pk}"
    ApiToken.objects.filter(pk=old.pk).update(name=name[: MAX_NAME_CHARS - len(suffix)] + suffix)


def revoke_tokens(tokens: QuerySet) -> int:
    """Stop these tokens from working (the rows stay, for the record); returns how many were still active."""
    return tokens.filter(revoked_at__isnull=True).update(revoked_at=timezone.now())


def mark_token_used(token: ApiToken) -> None:
    """Record when a token was last used, at most once a minute: every request reads a token, and on SQLite a
    write takes the lock. It is bookkeeping, so no request fails for it: a write that fails (the disk full, the lock
    held) is logged, and this process leaves it alone for the next minute rather than try it on every request."""
    global _last_use_paused_until
    now = timezone.now()
    if token.last_used_at is not None and now - token.last_used_at <= LAST_USED_RESOLUTION:
        return
    if time.monotonic() < _last_use_paused_until:
        return
    try:
        with transaction.atomic():  # a savepoint inside a caller's transaction, which a failure leaves usable
            ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
    except DB_ERRORS as exc:
        _last_use_paused_until = time.monotonic() + LAST_USED_RESOLUTION.total_seconds()
        if is_storage_full(exc):
            saw_storage_full()
        log.warning(
            "token %r: its last use was not recorded (%s: %s); the request goes on, and this process tries again in "
            "%d s",
            token.name,
            exc.__class__.__name__,
            exc,
            LAST_USED_RESOLUTION.total_seconds(),
        )
        return
    token.last_used_at = now


# --- what a caller may do ------------------------------------------------------------------------------------------


def _token_command(scope: Scope, roots: Iterable[str]) -> str:
    """The command that makes a token with `scope` and `roots`."""
    return manage_command("token", "create", "NAME", "--scope", str(scope), *(a for r in roots for a in ("--root", r)))


def _whose(caller: Caller) -> str:
    return f"the token '{caller.token_name}'" if caller.token_name is not None else f"'{caller.name}'"


def require_scope(caller: Caller, needed: Scope) -> None:
    """The one scope check: refused (403 scope_missing) unless the caller's scope holds `needed`, saying which scope
    was missing and the command that makes a token with it."""
    if caller.has(needed):
        return
    raise Refused(
        f"{_whose(caller)} has scope '{caller.scope}' ({caller.scope.meaning}); this needs scope '{needed}' "
        f"({needed.meaning}). Make a token that has it: {_token_command(needed, caller.roots)}",
        code=ErrorCode.SCOPE_MISSING,
        scope=str(caller.scope),
        needed=str(needed),
    )


def _outside_roots(caller: Caller, what: str, cwd: str) -> Refused:
    return Refused(
        f"{what} lies outside the roots {_whose(caller)} is limited to ({', '.join(caller.roots)}); use a token "
        f"whose roots cover it, made with: {_token_command(caller.scope, [*caller.roots, cwd])}",
        code=ErrorCode.OUTSIDE_TOKEN_ROOTS,
        roots=list(caller.roots),
    )


def check_sees(caller: Caller, task: Task) -> Task:
    """`task`, if the caller may see it (and so act on it, as its scope allows): its cwd under the caller's roots."""
    if caller.covers(task.cwd):
        return task
    raise _outside_roots(caller, f"task {task.public_id}", "DIR")


def check_creates(caller: Caller, spec: TaskSpec) -> None:
    """Whether the caller may queue `spec`: scope `run`, and for a token limited to roots, the cwd the task would run
    in (as `create_task` resolves it: the default cwd, a resumed session's own) and each directory it adds, under one
    of them."""
    require_scope(caller, Scope.RUN)
    if not caller.roots:
        return
    cwd = str(task_cwd_and_session(spec)[0])
    if not caller.covers(cwd):
        raise _outside_roots(caller, f"cwd {cwd!r}", cwd)
    for raw in (spec.options or {}).get("add_dirs") or []:
        added = str(served_dir("add_dirs", raw))
        if not caller.covers(added):
            raise _outside_roots(caller, f"add_dirs entry {added!r}", added)


def seen_tasks(caller: Caller, tasks: QuerySet[Task]) -> QuerySet[Task]:
    """The tasks of `tasks` the caller may see: all, or for a token limited to roots those in a cwd under them (the
    distinct cwds are few: each is tried by `Caller.covers`, the one rule, not a second one in SQL)."""
    if not caller.roots:
        return tasks
    cwds = Task.objects.order_by().values_list("cwd", flat=True).distinct()
    return tasks.filter(cwd__in=[cwd for cwd in cwds if caller.covers(cwd)])


def seen_requests(caller: Caller, requests: QuerySet[PermissionRequest]) -> QuerySet[PermissionRequest]:
    """The permission requests of `requests` whose task the caller may see (`seen_tasks`), still a query: a count or a
    page of it holds no other task's."""
    if not caller.roots:
        return requests
    return requests.filter(task__in=seen_tasks(caller, Task.objects.all()))


def seen_counts(caller: Caller) -> dict[str, int]:
    """How many of the tasks the caller may see are in each status (every status present, zeros included)."""
    if not caller.roots:
        return TaskCount.by_status()
    counts = dict.fromkeys((status.value for status in Status), 0)
    seen = seen_tasks(caller, Task.objects.all()).order_by().values_list("status").annotate(n=Count("id"))
    counts.update(seen)
    return counts


def seen_permissions(caller: Caller, requests: Iterable[PermissionRequest]) -> list[PermissionRequest]:
    """The permission requests of tasks the caller may see."""
    return [request for request in requests if caller.covers(request.task.cwd)]
