"""Riding out database faults (docs/architecture.md, "Process model"): which errors waiting may cure, how long to wait
between tries, and one log line per outage rather than one per retry.

A lost connection (PostgreSQL restarted, `pg_terminate_backend`, a network blip), a refused one (no connection slot
left, a pool that handed none out in time, `ALLOW_CONNECTIONS false`) and SQLite's "database is locked" are all
*transient*: the same call may work later on a fresh connection. Before each retry the broken connection is closed
(a pooled one goes back to the pool, which discards it), so the next query opens a new one.

A full disk is one of them too, and the one rule for it is here (`is_storage_full`): SQLite's SQLITE_FULL ("database or
disk is full"), PostgreSQL's disk_full (SQLSTATE 53100), a file write's ENOSPC or EDQUOT. Such a write was not
committed (SQLite rolls back a COMMIT it could not finish; PostgreSQL aborts the transaction), and it works again
once space is freed, which takes a person: a request is answered 503 `storage_full` (`temporary_refusal`), a run
holds less of its output meanwhile, and /health says so (`storage_state`).

Nothing here knows the models; the supervisor decides what a retry may repeat (a write whose COMMIT outcome is
unknown must be looked for before it is written again).
"""

import errno
import logging
import random
import shutil
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TypeVar

from django.conf import settings
from django.db import DatabaseError, InterfaceError, OperationalError, connection

from jobs.core.errors import DatabaseBusy, StorageFull, causes, is_database_busy

log = logging.getLogger(__name__)
T = TypeVar("T")

# Every error a database call can raise (Django's InterfaceError is not a DatabaseError).
DB_ERRORS = (DatabaseError, InterfaceError)

FIRST_DELAY_S = 0.05  # the first wait after a failure
MAX_DELAY_S = 2.0  # waits double up to this

# A plain DatabaseError (not Operational/Interface) is transient only when it says the connection is gone.
_LOST_MARKERS = (
    "server closed the connection",
    "connection already closed",
    "the connection is closed",
    "terminating connection",
    "connection refused",
    "could not connect",
    "consuming input failed",
    "no connection to the server",
    "ssl connection has been closed",
    "too many clients",
    "remaining connection slots are reserved",
    "database is locked",
)
# OperationalErrors that no wait cures: the schema is not what this code expects.
_PERMANENT_MARKERS = ("no such table", "no such column")


def is_transient(exc: BaseException) -> bool:
    """Whether a database failure may go away by itself: a dropped or refused connection, no slot, a held lock."""
    if not isinstance(exc, DB_ERRORS):
        return False
    text = str(exc).lower()
    if any(marker in text for marker in _PERMANENT_MARKERS):
        return False
    return isinstance(exc, OperationalError | InterfaceError) or any(marker in text for marker in _LOST_MARKERS)


SQLITE_FULL = 13  # the primary result code (the low byte of an extended one) of "database or disk is full"
_FULL_SQLSTATES = {"53100"}  # PostgreSQL's disk_full
_FULL_ERRNOS = {errno.ENOSPC, errno.EDQUOT}
_FULL_MESSAGE = "database or disk is full"  # SQLite's words, for a driver that gives no code


def is_storage_full(exc: BaseException) -> bool:
    """Whether `exc` (or what it wraps) says the disk is full: nothing could be stored, and nothing will be until
    someone frees space."""
    for current in causes(exc):
        sqlite_code = getattr(current, "sqlite_errorcode", None)
        if (
            (isinstance(sqlite_code, int) and sqlite_code & 0xFF == SQLITE_FULL)
            or getattr(current, "sqlstate", None) in _FULL_SQLSTATES
            or getattr(current, "pgcode", None) in _FULL_SQLSTATES
            or (isinstance(current, OSError) and current.errno in _FULL_ERRNOS)
            or _FULL_MESSAGE in str(current).lower()
        ):
            return True
    return False


def temporary_refusal(exc: BaseException) -> StorageFull | DatabaseBusy | None:
    """What a failure that waiting may cure means to a caller: the disk full (503 storage_full), the database busy
    (503 database_busy), each with the seconds to wait; None for any other failure, which is a bug. Every adapter
    answers with it (jobs/web/middleware.py, the REST API's handler, the MCP tools' error path)."""
    if is_storage_full(exc):
        saw_storage_full()
        return StorageFull(settings.BRIDGE_STORAGE_RETRY_AFTER_S)
    if is_database_busy(exc):
        return DatabaseBusy(settings.BRIDGE_DB_RETRY_AFTER_S)
    return None


# --- whether the store is full, for /health -------------------------------------------------------------------------
FULL_FLOOR_BYTES = 1024 * 1024  # less free than this where Bridge keeps its data or its SQLite file: full
FULL_SEEN_S = 10.0  # a write that failed for a full disk in this process this recently: full (PostgreSQL's disk)
_full_seen_at: float | None = None  # time.monotonic() of the last such failure in this process


def saw_storage_full() -> None:
    """A write failed because the disk is full: /health says so for FULL_SEEN_S."""
    global _full_seen_at
    _full_seen_at = time.monotonic()


def storage_state(places: Iterable[Path]) -> str:
    """'full' when a write failed for a full disk in this process in the last FULL_SEEN_S, or less than
    FULL_FLOOR_BYTES are free on the file system of any of `places` (which must exist); else 'ok'. A PostgreSQL
    server's disk is seen only by the first."""
    if _full_seen_at is not None and time.monotonic() - _full_seen_at < FULL_SEEN_S:
        return "full"
    for place in places:
        try:
            if shutil.disk_usage(place).free < FULL_FLOOR_BYTES:
                return "full"
        except OSError:
            continue  # gone or unreadable: what Bridge cannot look at, it does not call full
    return "ok"


def drop_connection() -> None:
    """Close this thread's database connection so the next query opens a fresh one; closing a broken one may fail."""
    try:
        connection.close()
    except Exception:
        pass  # it was broken; Django has forgotten it either way


class Backoff:
    """Waits between tries: `first`, doubling up to `cap`, each drawn from its upper half (jitter), so that threads
    which failed together do not all try again at the same instant."""

    def __init__(self, first: float = FIRST_DELAY_S, cap: float = MAX_DELAY_S, rng: random.Random | None = None):
        self.first, self.cap = first, cap
        self.rng = rng or random.Random()
        self.tries = 0

    def next(self) -> float:
        ceiling = min(self.cap, self.first * 2 ** min(self.tries, 32))
        self.tries += 1
        return ceiling / 2 + self.rng.random() * ceiling / 2

    def reset(self) -> None:
        self.tries = 0


class Outage:
    """One stretch of failed database calls seen by one loop: when it began, when to try next, and a warning when it
    begins and when it ends (never one per retry). Not thread-safe: one per thread."""

    def __init__(
        self,
        what: str,
        *,
        backoff: Backoff | None = None,
        clock: Callable[[], float] = time.monotonic,
        logger: logging.Logger = log,
    ) -> None:
        self.what = what
        self.backoff = backoff or Backoff()
        self.clock = clock
        self.logger = logger
        self.since: float | None = None  # clock() when the first failing call began; None while the database answers
        self.next_try = 0.0
        self.failures = 0
        self.full = False  # a call of this outage failed because the disk is full

    @property
    def down(self) -> bool:
        return self.since is not None

    def elapsed(self) -> float:
        return 0.0 if self.since is None else self.clock() - self.since

    def due(self) -> bool:
        """Whether a call may be tried now (always, unless waiting out a backoff)."""
        return self.since is None or self.clock() >= self.next_try

    def wait(self) -> float:
        """Seconds until the next try is due (0 when one may be tried now)."""
        return 0.0 if self.since is None else max(0.0, self.next_try - self.clock())

    def failed(self, exc: BaseException, started: float | None = None) -> float:
        """Record a failed call (begun at `started`, when known); returns the seconds to wait before the next try."""
        now = self.clock()
        full = is_storage_full(exc)
        first_line = (str(exc).strip().splitlines() or [""])[0]
        if self.since is None:
            self.since = now if started is None else min(started, now)
            self.failures = 0
            if not full:
                self.logger.warning(
                    "%s: the database is unreachable (%s: %s); retrying with backoff",
                    self.what,
                    exc.__class__.__name__,
                    first_line,
                )
        if full:
            saw_storage_full()
            if not self.full:
                self.logger.warning(
                    "%s: nothing can be stored, the disk that holds the database is full (%s: %s); retrying with "
                    "backoff until space is freed",
                    self.what,
                    exc.__class__.__name__,
                    first_line,
                )
        self.full = self.full or full
        self.failures += 1
        delay = self.backoff.next()
        self.next_try = now + delay
        return delay

    def recovered(self) -> None:
        """A call worked (and nothing is left over): the outage, if any, is over."""
        if self.since is None:
            return
        self.logger.warning(
            "%s: the database answers again after %.1f s (%d failed tries)%s",
            self.what,
            self.elapsed(),
            self.failures,
            "; its disk had been full" if self.full else "",
        )
        self.since = None
        self.next_try = 0.0
        self.full = False
        self.backoff.reset()


def retry(
    call: Callable[[], T],
    outage: Outage,
    *,
    give_up_after: float | None = None,
    stop: threading.Event | None = None,
    sleep: Callable[[float], None] = time.sleep,
    reconnect: Callable[[], None] = drop_connection,
) -> T:
    """`call()` until it works, waiting out the outage's backoff between tries and reconnecting before each.

    An error that is not transient is raised at once; a transient one is raised once the outage has lasted
    `give_up_after` seconds, at once when the disk is full (no one frees space within such a bound), or, never
    when None: for a write that must happen while this process lives, unless `stop` is set (this process is about
    to end: a wait for the next try ends then, and that try is the last).
    """
    while True:
        started = outage.clock()
        try:
            result = call()
        except Exception as exc:
            if not is_transient(exc):
                raise
            delay = outage.failed(exc, started)
            reconnect()
            if give_up_after is not None and (outage.full or outage.elapsed() >= give_up_after):
                raise
            if stop is None:
                sleep(delay)
            elif stop.is_set():
                raise
            else:
                stop.wait(delay)
            continue
        outage.recovered()
        return result
