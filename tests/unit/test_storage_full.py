"""A full disk is one rule (jobs/core/resilience.py, `is_storage_full`): SQLite's SQLITE_FULL, PostgreSQL's SQLSTATE
53100 and a file write's ENOSPC or EDQUOT, however the driver's error is wrapped, and nothing else. Callers get a 503
`storage_full` with its Retry-After, and the retry helper does not wait out a full disk where its wait is bounded."""

import errno
import sqlite3
import threading
import time

import psycopg.errors
import pytest
from django.db import DatabaseError, InterfaceError, OperationalError
from django.test import override_settings
from hypothesis import given
from hypothesis import strategies as st

from jobs.core import resilience
from jobs.core.errors import DatabaseBusy, ErrorCode, StorageFull, is_database_busy
from jobs.core.resilience import Backoff, Outage, is_storage_full, retry, temporary_refusal

SQLITE_FULL = 13
FULL_WORDS = "database or disk is full"


@pytest.fixture(autouse=True)
def _forget_full_disks(monkeypatch):
    """What these tests make this process see of full disks is forgotten after each (/health would report it)."""
    monkeypatch.setattr(resilience, "_full_seen_at", None)


def real_sqlite_full() -> sqlite3.Error:
    """The error SQLite itself raises when a write finds no room (here: a database capped at two pages)."""
    db = sqlite3.connect(":memory:")
    db.execute("CREATE TABLE t (x BLOB)")
    db.execute("PRAGMA max_page_count = 2")
    try:
        for _ in range(10):
            db.execute("INSERT INTO t VALUES (?)", (b"x" * 4000,))
    except sqlite3.OperationalError as exc:
        return exc
    finally:
        db.close()
    raise AssertionError("SQLite stored 40 KB in two pages")


def sqlite_error(code: int, message: str) -> sqlite3.Error:
    exc = sqlite3.OperationalError(message)
    exc.sqlite_errorcode = code
    return exc


class DriverError(Exception):
    """An error as a PostgreSQL driver raises it: a message and a SQLSTATE."""

    def __init__(self, message: str, sqlstate: str) -> None:
        super().__init__(message)
        self.sqlstate = sqlstate


def wrapped(inner: BaseException, layers: list[tuple[type[Exception], bool]]) -> BaseException:
    """`inner` as Django and Bridge pass it on: each layer raised from (cause) or while handling (context) the last."""
    exc = inner
    for cls, as_cause in layers:
        outer = cls("while writing")
        if as_cause:
            outer.__cause__ = exc
        else:
            outer.__context__ = exc
        exc = outer
    return exc


messages = st.text(max_size=80).filter(lambda text: FULL_WORDS not in text.lower())
layers = st.lists(
    st.tuples(st.sampled_from([OperationalError, DatabaseError, InterfaceError, RuntimeError]), st.booleans()),
    max_size=3,
)
full_errors = st.one_of(
    st.builds(real_sqlite_full),
    st.builds(sqlite_error, st.integers(0, 255).map(lambda extended: SQLITE_FULL | extended << 8), messages),
    st.builds(psycopg.errors.DiskFull, messages),
    st.builds(OSError, st.sampled_from([errno.ENOSPC, errno.EDQUOT]), messages),
    st.builds(OperationalError, st.just(FULL_WORDS)),
)
busy_errors = st.sampled_from(
    [
        OperationalError("database is locked"),
        OperationalError("FATAL: sorry, too many clients already"),
        DriverError("terminating connection due to administrator command", "57P01"),
        DriverError("too many connections", "53300"),
    ]
)
other_errors = st.one_of(
    st.builds(sqlite_error, st.integers(0, 2**16).filter(lambda code: code & 0xFF != SQLITE_FULL), messages),
    st.builds(
        DriverError, messages, st.text("0123456789ABCDEFP", min_size=5, max_size=5).filter(lambda s: s != "53100")
    ),
    st.builds(OSError, st.integers(0, 200).filter(lambda n: n not in (errno.ENOSPC, errno.EDQUOT)), messages),
    st.builds(OperationalError, messages),
    st.builds(ValueError, messages),
    busy_errors,
)


@given(full_errors, layers)
def test_every_way_a_disk_says_it_is_full_is_storage_full_however_it_is_wrapped(inner, wrapping):
    assert is_storage_full(wrapped(inner, wrapping))


@given(other_errors, layers)
def test_no_other_failure_is_storage_full(inner, wrapping):
    assert not is_storage_full(wrapped(inner, wrapping))


@override_settings(BRIDGE_STORAGE_RETRY_AFTER_S=42)
@given(full_errors, layers)
def test_a_full_disk_is_refused_as_storage_full_503_with_its_retry_after(inner, wrapping):
    refusal = temporary_refusal(wrapped(inner, wrapping))
    assert isinstance(refusal, StorageFull)
    assert (refusal.code, refusal.http_status, refusal.retry_after_s) == (ErrorCode.STORAGE_FULL, 503, 42)
    assert refusal.as_dict()["retry_after_s"] == 42 and "full" in refusal.message


@given(full_errors, layers)
def test_a_full_disk_is_not_taken_for_a_busy_database(inner, wrapping):
    assert not is_database_busy(wrapped(inner, wrapping))


@override_settings(BRIDGE_DB_RETRY_AFTER_S=3)
@given(busy_errors, layers)
def test_a_busy_database_stays_database_busy(inner, wrapping):
    refusal = temporary_refusal(wrapped(inner, wrapping))
    assert isinstance(refusal, DatabaseBusy) and refusal.retry_after_s == 3


@given(other_errors.filter(lambda exc: not is_database_busy(exc)), layers)
def test_any_other_failure_is_no_temporary_refusal(inner, wrapping):
    assert temporary_refusal(wrapped(inner, wrapping)) is None


# --- riding it out ------------------------------------------------------------------------------------------------


class Clock:
    """A clock that only the retry's waits move."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def failing(*failures: BaseException):
    """A call that raises each of `failures` in turn, then returns "ok"."""
    left = list(failures)

    def call() -> str:
        if left:
            raise left.pop(0)
        return "ok"

    return call


@given(st.lists(st.sampled_from(["locked", "full"]), min_size=1, max_size=8))
def test_an_outage_is_full_from_its_first_full_failure_until_it_ends(kinds):
    clock = Clock()
    outage = Outage("unit", clock=clock)
    for seen, kind in enumerate(kinds):
        outage.failed(OperationalError(FULL_WORDS if kind == "full" else "database is locked"))
        assert outage.full == ("full" in kinds[: seen + 1])
    outage.recovered()
    assert not outage.full and not outage.down


def test_a_bounded_retry_gives_up_at_once_on_a_full_disk():
    clock = Clock()
    call = failing(OperationalError(FULL_WORDS), OperationalError(FULL_WORDS))
    with pytest.raises(OperationalError):
        retry(call, Outage("unit", clock=clock), give_up_after=60, sleep=clock.sleep, reconnect=lambda: None)
    assert clock.now == 100.0, "no wait: a full disk is not freed within such a bound"


def test_an_unbounded_retry_waits_a_full_disk_out():
    clock = Clock()
    call = failing(*[OperationalError(FULL_WORDS)] * 5)
    assert retry(call, Outage("unit", clock=clock), sleep=clock.sleep, reconnect=lambda: None) == "ok"


def test_a_retry_whose_stop_is_set_raises_its_next_failure():
    stop = threading.Event()
    tries = []

    def call() -> None:
        tries.append(1)
        if len(tries) > 3:
            raise ValueError("a retry that goes on after its stop was set")
        stop.set()  # Bridge begins to stop while this try fails
        raise OperationalError(FULL_WORDS)

    with pytest.raises(OperationalError):
        retry(call, Outage("unit"), stop=stop, reconnect=lambda: None)
    assert len(tries) == 1


def test_a_retry_waiting_when_told_to_stop_tries_once_more_at_once_and_gives_up():
    stop = threading.Event()
    tries = []

    def call() -> None:
        tries.append(time.monotonic())
        if len(tries) == 1:
            threading.Timer(0.1, stop.set).start()  # while the retry waits out a backoff of a minute
        raise OperationalError(FULL_WORDS)

    with pytest.raises(OperationalError):
        retry(call, Outage("unit", backoff=Backoff(first=60, cap=60)), stop=stop, reconnect=lambda: None)
    assert len(tries) == 2 and tries[1] - tries[0] < 10
