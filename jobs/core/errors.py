"""Errors that jobs.actions raises; every adapter turns them into its own kind of answer in one place.

Each carries a message for people (what, why, what to do), an HTTP status for REST, a stable machine-readable
`code` that REST, MCP and websockets all show, and the data behind it (`detail`). `ErrorCode` is the one list of
codes: every refusal names one, the OpenAPI schema lists them, and the README's table is this list.
"""

from collections.abc import Iterator
from dataclasses import dataclass
from enum import StrEnum


class ErrorCode(StrEnum):
    """Every `code` Bridge answers with, on every interface."""

    INVALID_INPUT = "invalid_input"
    BAD_REQUEST = "bad_request"
    BAD_HTTP_REQUEST = "bad_http_request"
    INVALID_JSON = "invalid_json"
    CONFLICTING_TIMEOUTS = "conflicting_timeouts"
    UNREADABLE = "unreadable"
    UNAUTHENTICATED = "unauthenticated"
    REFUSED = "refused"
    READ_ONLY = "read_only"
    SCOPE_MISSING = "scope_missing"
    OUTSIDE_TOKEN_ROOTS = "outside_token_roots"
    NOT_FOUND = "not_found"
    NO_SUCH_TASK = "no_such_task"
    NO_SUCH_REQUEST = "no_such_request"
    NO_SUCH_SESSION = "no_such_session"
    NO_SUCH_SOCKET = "no_such_socket"
    NO_SUCH_RULE = "no_such_rule"
    METHOD_NOT_ALLOWED = "method_not_allowed"
    REQUEST_HEAD_TIMEOUT = "request_head_timeout"
    CONFLICT = "conflict"
    ALREADY_DECIDED = "already_decided"
    NOTHING_PENDING = "nothing_pending"
    TASK_ENDED = "task_ended"
    NO_SESSION_TO_CONTINUE = "no_session_to_continue"
    DEDUPE_CONTENTION = "dedupe_contention"
    TOKEN_NAME_TAKEN = "token_name_taken"
    SUPERVISOR_NAME_TAKEN = "supervisor_name_taken"
    TOO_LARGE = "too_large"
    URI_TOO_LONG = "uri_too_long"
    INVALID_REQUEST = "invalid_request"
    QUEUE_FULL = "queue_full"
    TOO_MANY_CONNECTIONS = "too_many_connections"
    HEADERS_TOO_LARGE = "headers_too_large"
    INTERNAL_ERROR = "internal_error"
    DATABASE_BUSY = "database_busy"
    STORAGE_FULL = "storage_full"
    DATABASE_UNAVAILABLE = "database_unavailable"
    NOT_A_REPOSITORY = "not_a_repository"
    NOT_ISOLATED = "not_isolated"
    WORKTREE_GONE = "worktree_gone"
    WORKTREE_ELSEWHERE = "worktree_elsewhere"
    WORKTREE_REQUEST_PENDING = "worktree_request_pending"
    MERGE_CONFLICT = "merge_conflict"
    CHECKOUT_NOT_CLEAN = "checkout_not_clean"
    NOTHING_TO_MERGE = "nothing_to_merge"


@dataclass(frozen=True)
class Meaning:
    http_status: int  # what REST answers with it (websockets close with 4000 + this)
    text: str  # what it means, for the README and the schema


MEANINGS: dict[ErrorCode, Meaning] = {
    ErrorCode.INVALID_INPUT: Meaning(400, "a value Bridge cannot take; the message names the field and what it takes"),
    ErrorCode.BAD_REQUEST: Meaning(400, "the request cannot be read (a malformed body, form or header)"),
    ErrorCode.BAD_HTTP_REQUEST: Meaning(400, "not HTTP Bridge can parse (a URL that is not ASCII, broken headers)"),
    ErrorCode.INVALID_JSON: Meaning(400, "the body is not valid JSON"),
    ErrorCode.CONFLICTING_TIMEOUTS: Meaning(400, "`timeout_s` and hbridge's `taskTimeoutMs` both given, and different"),
    ErrorCode.UNREADABLE: Meaning(400, "`hermes_read` could not read the path (the OS's reason is given)"),
    ErrorCode.UNAUTHENTICATED: Meaning(
        401, "no token, a malformed header, an unknown or a revoked token (`reason` says which)"
    ),
    ErrorCode.REFUSED: Meaning(403, "a cwd or path outside the allowed roots (the roots are named)"),
    ErrorCode.READ_ONLY: Meaning(403, "a message sent on a websocket that only reads"),
    ErrorCode.SCOPE_MISSING: Meaning(
        403, "the token's scope does not allow this (the message names the scope needed and how to make such a token)"
    ),
    ErrorCode.OUTSIDE_TOKEN_ROOTS: Meaning(
        403, "the task or cwd lies outside the roots the token is limited to (named); MCP over HTTP takes no such token"
    ),
    ErrorCode.NOT_FOUND: Meaning(404, "no such path"),
    ErrorCode.NO_SUCH_TASK: Meaning(404, "no task with this id"),
    ErrorCode.NO_SUCH_REQUEST: Meaning(404, "the task has no permission request with this id"),
    ErrorCode.NO_SUCH_SESSION: Meaning(404, "no agent session with this id (in this cwd)"),
    ErrorCode.NO_SUCH_SOCKET: Meaning(404, "no websocket at this path"),
    ErrorCode.NO_SUCH_RULE: Meaning(404, "no permission rule with this id (`GET /v1/rules?all=1` lists them all)"),
    ErrorCode.METHOD_NOT_ALLOWED: Meaning(405, "the path takes another HTTP method (`Allow` names it)"),
    ErrorCode.REQUEST_HEAD_TIMEOUT: Meaning(
        408, "a request's line and headers took over BRIDGE_HTTP_HEADER_TIMEOUT_S to arrive; the connection closes"
    ),
    ErrorCode.CONFLICT: Meaning(409, "the request does not fit the task's state now"),
    ErrorCode.ALREADY_DECIDED: Meaning(409, "the permission request was answered first by someone else"),
    ErrorCode.NOTHING_PENDING: Meaning(409, "the task has no permission request waiting"),
    ErrorCode.TASK_ENDED: Meaning(409, "the task has already ended: nothing to cancel"),
    ErrorCode.NO_SESSION_TO_CONTINUE: Meaning(409, "the task has no agent session to continue"),
    ErrorCode.DEDUPE_CONTENTION: Meaning(409, "identical tasks were created at once; send it again"),
    ErrorCode.TOKEN_NAME_TAKEN: Meaning(409, "a live token already has this name"),
    ErrorCode.SUPERVISOR_NAME_TAKEN: Meaning(409, "a live supervisor already has this name"),
    ErrorCode.TOO_LARGE: Meaning(413, "a body over DATA_UPLOAD_MAX_MEMORY_SIZE"),
    ErrorCode.URI_TOO_LONG: Meaning(414, "a URL over 64 KiB"),
    ErrorCode.INVALID_REQUEST: Meaning(
        422, "what the schema refuses: a wrong type, an out-of-range number, an unknown or repeated parameter"
    ),
    ErrorCode.QUEUE_FULL: Meaning(429, "BRIDGE_MAX_QUEUED tasks are waiting already"),
    ErrorCode.TOO_MANY_CONNECTIONS: Meaning(
        429, "the client's address holds BRIDGE_HTTP_MAX_CONNECTIONS_PER_CLIENT connections to a web process already"
    ),
    ErrorCode.HEADERS_TOO_LARGE: Meaning(431, "a request header over 64 KiB"),
    ErrorCode.INTERNAL_ERROR: Meaning(500, "a bug: Bridge failed, and logged the traceback"),
    ErrorCode.DATABASE_BUSY: Meaning(503, "the database could not take the request in time; retry after `Retry-After`"),
    ErrorCode.STORAGE_FULL: Meaning(
        503, "the disk that holds Bridge's database or data is full: nothing was stored; retry after `Retry-After`"
    ),
    ErrorCode.DATABASE_UNAVAILABLE: Meaning(
        503, "the database cannot be used or is not migrated; the message names the setting, the path and the fix"
    ),
    ErrorCode.NOT_A_REPOSITORY: Meaning(
        400,
        '`isolation: "worktree"` for a cwd in no git repository with a commit (or an unknown `base`); nothing starts',
    ),
    ErrorCode.NOT_ISOLATED: Meaning(409, "merge or discard of a task that ran without a worktree of its own"),
    ErrorCode.WORKTREE_GONE: Meaning(
        409, "the task's worktree was merged, discarded or pruned already (the state says)"
    ),
    ErrorCode.WORKTREE_ELSEWHERE: Meaning(
        409,
        "the task's worktree is on another host (`host`, where only a supervisor can act on it) and no supervisor "
        "runs there now: start one there and ask again (a merge or discard asked meanwhile is not kept)",
    ),
    ErrorCode.WORKTREE_REQUEST_PENDING: Meaning(
        409,
        "a merge or discard of the task's worktree is pending already (`requested`); the task's worktree shows its "
        "outcome",
    ),
    ErrorCode.MERGE_CONFLICT: Meaning(
        409, "the task's branch and the base branch changed the same lines (`files` names them): nothing was changed"
    ),
    ErrorCode.CHECKOUT_NOT_CLEAN: Meaning(
        409, "the base branch's checkout has changes the merge would overwrite (`files`): nothing was changed"
    ),
    ErrorCode.NOTHING_TO_MERGE: Meaning(409, "the task's worktree and branch hold nothing the base branch lacks"),
}


class BridgeError(Exception):
    """A request Bridge refuses. `code` defaults to the class's; a raise site may name a more precise one, whose
    HTTP status (MEANINGS) then goes with it unless `http_status` says otherwise."""

    code = ErrorCode.INVALID_INPUT
    http_status = MEANINGS[code].http_status

    def __init_subclass__(cls, **kwargs: object) -> None:
        """A subclass names its code; its HTTP status is that code's, so the pair is written once, in MEANINGS."""
        super().__init_subclass__(**kwargs)
        cls.http_status = MEANINGS[cls.code].http_status

    def __init__(
        self, message: str, *, code: ErrorCode | None = None, http_status: int | None = None, **detail: object
    ):
        super().__init__(message)
        self.message = message
        self.detail = detail
        if code is not None:
            self.code = ErrorCode(code)  # a code not on the list fails here, at the raise site
            self.http_status = MEANINGS[self.code].http_status
        if http_status is not None:
            self.http_status = http_status

    @property
    def files(self) -> list[str]:
        """The files it concerns (a merge's conflicts), which every interface names: `files` in its detail."""
        named = self.detail.get("files")
        return [str(name) for name in named] if isinstance(named, list) else []

    def as_dict(self) -> dict:
        """The JSON body every adapter sends: {"error": message, "code": code, **detail}."""
        return {"error": self.message, "code": self.code, **self.detail}


class InvalidInput(BridgeError):
    """A value the caller can correct and send again; the message names the field and what it takes."""

    code = ErrorCode.INVALID_INPUT


class Unauthenticated(BridgeError):
    """No usable credentials: `reason` says whether they were missing, malformed, unknown or revoked."""

    code = ErrorCode.UNAUTHENTICATED


class Refused(BridgeError):
    """Understood and well-formed, but not allowed here: a cwd or path outside the allowed roots, an executor
    that cannot run. Sending it again changes nothing until the setting it names does."""

    code = ErrorCode.REFUSED


class NotFound(BridgeError):
    """Nothing by that id (a task, a permission request, a session)."""

    code = ErrorCode.NOT_FOUND


class Conflict(BridgeError):
    """The request fits no longer: the task or request moved on (ended, answered) since the caller looked."""

    code = ErrorCode.CONFLICT


class QueueFull(BridgeError):
    """Back-pressure: BRIDGE_MAX_QUEUED tasks wait already; send it again once some have started."""

    code = ErrorCode.QUEUE_FULL


class DatabaseBusy(BridgeError):
    """The database could not take the request in time: every pooled connection stayed in use, PostgreSQL had no
    connection slot left, or SQLite's write lock stayed taken. Nothing was done; the same request may be sent again
    after `retry_after_s` (HTTP adapters also send it as Retry-After)."""

    code = ErrorCode.DATABASE_BUSY

    def __init__(self, retry_after_s: int) -> None:
        super().__init__(
            "the database is busy (too many requests at once) and nothing was done: "
            f"send the same request again in {retry_after_s} s",
            retry_after_s=retry_after_s,
        )
        self.retry_after_s = retry_after_s


class StorageFull(BridgeError):
    """Nothing could be stored: the disk that holds the database (or Bridge's data directory) is full. Nothing was
    done; the same request may be sent again once space is freed, after `retry_after_s` at the earliest (HTTP
    adapters also send it as Retry-After)."""

    code = ErrorCode.STORAGE_FULL

    def __init__(self, retry_after_s: int) -> None:
        super().__init__(
            "the disk that holds Bridge's database is full, so nothing could be stored and nothing was done: free "
            f"space on it (BRIDGE_DATA_DIR, or the database server's volume), then send the same request again (in "
            f"{retry_after_s} s at the earliest)",
            retry_after_s=retry_after_s,
        )
        self.retry_after_s = retry_after_s


def causes(exc: BaseException) -> Iterator[BaseException]:
    """`exc` and what it wraps (its cause, else its context), each once: Django wraps the driver's error."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


# How the drivers say "busy", by class name (psycopg_pool's PoolTimeout and TooManyRequests; Django wraps them in its
# OperationalError) and by message (PostgreSQL out of connection slots, SQLite's lock); SQLSTATE 53300 is PostgreSQL's
# too_many_connections. Read by name so this module stays free of driver imports.
_BUSY_CLASSES = {"PoolTimeout", "TooManyRequests"}
_BUSY_MESSAGES = (
    "too many clients",
    "remaining connection slots are reserved",
    "database is locked",
    "database table is locked",
    # the server ended this request's connection mid-way (a restart, pg_terminate_backend): the statement that saw it
    # did not commit, but one the request made before it may have (writes outside a transaction commit one by one),
    # so a retried write must be one that is safe twice; the pool hands the retry a checked connection
    "terminating connection",
    "server closed the connection unexpectedly",
)
_BUSY_SQLSTATES = {"53300", "57P01", "57P02"}  # too many connections, admin shutdown, crash shutdown


def is_database_busy(exc: BaseException) -> bool:
    """Whether `exc` (or what it wraps) says the database had no connection or lock to give in time, or ended the
    connection under the request, as opposed to any other database failure (a missing table, a refused connection),
    which stays an internal error."""
    for current in causes(exc):
        names = {cls.__name__ for cls in type(current).__mro__}
        message = str(current).lower()
        if (
            names & _BUSY_CLASSES
            or getattr(current, "sqlstate", None) in _BUSY_SQLSTATES
            or any(marker in message for marker in _BUSY_MESSAGES)
        ):
            return True
    return False
