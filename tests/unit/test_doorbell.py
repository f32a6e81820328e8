"""The local doorbell hears only its own install (jobs/core/doorbell.py, `_LocalBell`): a datagram must begin with
the data dir's secret, or it is dropped and counted before any other work, and told of in one log line a minute.

Whether a datagram woke anyone is asked of the doorbell itself: every key rings QUEUE or TASKS (`rung_by`), so a
subscriber to both hears every ring. Each batch of datagrams is followed by a ring of this install's own; UDP on
127.0.0.1 keeps one sender's datagrams in order, so once that ring is heard every datagram before it has been read.
"""

import logging
import socket
import stat
import sys
import threading
import uuid
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from jobs.core import doorbell

SECRET = "0123456789abcdef0123456789abcdef"  # this install's, in these tests
BOUND_S = 10.0  # the longest a ring of our own may take to be heard


class Heard:
    """Every ring this process hears, in order, until the ring of `last` (and the TASKS ring it brings) arrives."""

    def __init__(self, last: str) -> None:
        self.last = last
        self.keys: list[str] = []
        self.done = threading.Event()
        self._unsubscribes = [
            doorbell.subscribe(key, lambda key=key: self._on_ring(key), remote=False)
            for key in (doorbell.QUEUE, doorbell.TASKS, last)
        ]

    def _on_ring(self, key: str) -> None:  # called on the bell's one receiving thread
        self.keys.append(key)
        if self.keys[-2:] == [self.last, doorbell.TASKS]:
            self.done.set()

    def close(self) -> None:
        for unsubscribe in self._unsubscribes:
            unsubscribe()


@pytest.fixture
def bell(settings, tmp_path) -> doorbell._LocalBell:
    """A process's bell listening on a data dir of its own, with SECRET as the install's secret."""
    settings.DATA_DIR = tmp_path
    settings.BRIDGE_DOORBELL_SECRET = SECRET
    bell = doorbell._LocalBell()
    bell.listen()
    return bell


@pytest.fixture
def sender():
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    yield sock
    sock.close()


def send_then_ring(bell: doorbell._LocalBell, sender: socket.socket, datagrams: list[bytes]) -> list[str]:
    """Send `datagrams` to the bell, then ring a key of our own; returns every ring heard until that one."""
    port = bell._own[0].getsockname()[1]
    last = f"last-{uuid.uuid4().hex}"
    heard = Heard(last)
    try:
        for datagram in datagrams:
            sender.sendto(datagram, (doorbell.LOOPBACK, port))
        sender.sendto(SECRET.encode() + last.encode(), (doorbell.LOOPBACK, port))
        assert heard.done.wait(BOUND_S), "a ring with this install's secret was not heard"
    finally:
        heard.close()
    return heard.keys[:-2]


KEYS = st.sampled_from([doorbell.QUEUE, doorbell.TASKS, str(uuid.UUID(int=7))]).map(str.encode) | st.binary(
    min_size=1, max_size=doorbell.MAX_KEY_BYTES
)


def near_miss(index: int, flip: int, key: bytes) -> bytes:
    """The secret with one byte changed, then a key."""
    secret = bytearray(SECRET.encode())
    secret[index] ^= flip
    return bytes(secret) + key


FOREIGN = st.one_of(
    KEYS,  # no secret at all, as a bare key
    st.tuples(st.binary(min_size=len(SECRET), max_size=len(SECRET)), KEYS).map(b"".join),  # a wrong secret
    st.builds(near_miss, st.integers(0, len(SECRET) - 1), st.integers(1, 255), KEYS),  # wrong in one byte
    st.integers(0, len(SECRET)).map(lambda n: (SECRET.encode() + doorbell.QUEUE.encode())[:n]),  # truncated
    st.binary(max_size=1024),  # random bytes
).filter(lambda datagram: not datagram.startswith(SECRET.encode()) or len(datagram) == len(SECRET))


@hypothesis_settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(datagrams=st.lists(FOREIGN, min_size=1, max_size=20))
def test_datagrams_without_this_installs_secret_wake_no_one_and_are_counted(bell, sender, datagrams):
    before = bell.foreign

    heard = send_then_ring(bell, sender, datagrams)

    assert heard == [], f"a datagram without the secret rang {heard}"
    assert bell.foreign - before == len(datagrams), "every foreign datagram is counted, once"


def test_a_ring_from_another_process_of_this_install_wakes_its_key_and_the_task_list(bell):
    other = doorbell._LocalBell()  # another process of this install: it sends, and does not listen
    key = f"task-{uuid.uuid4().hex}"
    woken = {each: threading.Event() for each in (key, doorbell.TASKS)}
    unsubscribes = [doorbell.subscribe(each, event.set, remote=False) for each, event in woken.items()]
    try:
        other.send(key)
        assert all(event.wait(BOUND_S) for event in woken.values()), "a ring with the secret woke no one"
    finally:
        for unsubscribe in unsubscribes:
            unsubscribe()
    assert bell.foreign == 0


def test_a_flood_of_foreign_datagrams_is_told_in_one_line_a_minute(settings, tmp_path, sender, caplog):
    settings.DATA_DIR = tmp_path
    settings.BRIDGE_DOORBELL_SECRET = SECRET
    now = [1000.0]
    bell = doorbell._LocalBell(clock=lambda: now[0])
    bell.listen()
    caplog.set_level(logging.WARNING, logger=doorbell.__name__)

    def told() -> list[str]:
        return [r.getMessage() for r in caplog.records if "without this install's secret" in r.getMessage()]

    for _ in range(10):  # 500 in batches the socket's buffer holds
        send_then_ring(bell, sender, [b"queue"] * 50)
        now[0] += 5
    now[0] += 9.5
    send_then_ring(bell, sender, [b"queue"])  # 59.5 s after the first line
    assert len(told()) == 1 and told()[0].startswith("doorbell: ignored 1 datagram(s)"), told()
    now[0] += 0.5
    send_then_ring(bell, sender, [b"queue"])  # a minute after it
    assert len(told()) == 2 and told()[1].startswith("doorbell: ignored 501 datagram(s)"), told()
    assert bell.foreign == 502


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX file modes")
def test_the_secret_is_kept_in_the_data_dir_for_its_owner_alone():
    from django.conf import settings

    kept = Path(settings.DATA_DIR) / "doorbell_secret"
    assert kept.read_text().strip() == settings.BRIDGE_DOORBELL_SECRET
    assert len(settings.BRIDGE_DOORBELL_SECRET) == 32
    assert stat.S_IMODE(kept.stat().st_mode) == 0o600
