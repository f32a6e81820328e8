"""Errors that jobs.actions raises; every adapter turns them into its own kind of answer in one place.

Each carries a message for people (what, why, what to do), an HTTP status for REST, a stable machine-readable
`code` that REST, MCP and websockets all show, and the data behind it (`detail`).
"""


class BridgeError(Exception):
    """A request Bridge refuses. `code` and `http_status` default to the class's; a raise site may be more precise."""

    http_status = 400
    code = "invalid_input"

    def __init__(self, message: str, *, code: str | None = None, http_status: int | None = None, **detail: object):
        super().__init__(message)
        self.message = message
        self.detail = detail
        if code is not None:
            self.code = code
        if http_status is not None:
            self.http_status = http_status

    def as_dict(self) -> dict:
        """The JSON body every adapter sends: {"error": message, "code": code, **detail}."""
        return {"error": self.message, "code": self.code, **self.detail}


class InvalidInput(BridgeError):
    http_status = 400
    code = "invalid_input"


class Unauthenticated(BridgeError):
    http_status = 401
    code = "unauthenticated"


class Refused(BridgeError):
    http_status = 403
    code = "refused"


class NotFound(BridgeError):
    http_status = 404
    code = "not_found"


class Conflict(BridgeError):
    http_status = 409
    code = "conflict"


class QueueFull(BridgeError):
    http_status = 429
    code = "queue_full"


class DatabaseBusy(BridgeError):
    """The database could not take the request in time: every pooled connection stayed in use, PostgreSQL had no
    connection slot left, or SQLite's write lock stayed taken. Nothing was done; the same request may be sent again
    after `retry_after_s` (HTTP adapters also send it as Retry-After)."""

    http_status = 503
    code = "database_busy"

    def __init__(self, retry_after_s: int) -> None:
        super().__init__(
            "the database is busy (too many requests at once) and nothing was done: "
            f"send the same request again in {retry_after_s} s",
            retry_after_s=retry_after_s,
        )
        self.retry_after_s = retry_after_s


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
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        names = {cls.__name__ for cls in type(current).__mro__}
        message = str(current).lower()
        if (
            names & _BUSY_CLASSES
            or getattr(current, "sqlstate", None) in _BUSY_SQLSTATES
            or any(marker in message for marker in _BUSY_MESSAGES)
        ):
            return True
        current = current.__cause__ or current.__context__
    return False
