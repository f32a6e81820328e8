"""A Redis outage under the doorbell (jobs/core/doorbell.py, `_LayerOutage`) is told in two log lines, one when it
begins (with the reason) and one when it ends (how long, and what it cost), however many rings fall in it.

The Redis is real: the channel layer reaches it through a door on 127.0.0.1 that the test shuts (refusing new
connections and cutting open ones, as a Redis that went down does) and opens again on the same port. The machine's
Redis itself is never stopped.
"""

import asyncio
import logging
import os
import socket
import threading
import uuid
from urllib.parse import urlsplit

import pytest

from bridge.settings import redis_channel_layer
from jobs.core import doorbell
from tests.support import redis_or_skip

REDIS_URL = os.environ.get("REDIS_URL") or os.environ.get("BRIDGE_TEST_REDIS_URL") or "redis://127.0.0.1:6379/0"
RINGS = 40
BOUND_S = 15.0  # the cross-process listener retries at most every 5 s (RECONNECT_MAX_S)


class RedisDoor:
    """A TCP door in front of a real Redis: open, it passes bytes both ways; shut, nothing gets through."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        self._server: socket.socket | None = socket.create_server(("127.0.0.1", 0))
        self.port = self._server.getsockname()[1]
        self._serve(self._server)

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def _serve(self, server: socket.socket) -> None:
        threading.Thread(target=self._accept, args=(server,), daemon=True).start()

    def _accept(self, server: socket.socket) -> None:
        while True:
            try:
                client, _ = server.accept()
            except OSError:  # shut
                return
            upstream = socket.create_connection(self.target)
            with self._lock:
                self._sockets += [client, upstream]
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    @staticmethod
    def _pump(source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        for each in (source, sink):
            try:
                each.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def shut(self) -> None:
        if self._server is None:
            return
        self._server.shutdown(socket.SHUT_RDWR)  # wakes the accepting thread (closing alone does not, on Linux)
        self._server.close()
        self._server = None
        with self._lock:
            cut, self._sockets = self._sockets, []
        for each in cut:
            try:
                each.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            each.close()

    def open(self) -> None:
        self._server = socket.create_server(("127.0.0.1", self.port))
        self._serve(self._server)


@pytest.fixture
def door(settings, monkeypatch):
    """The channel layer on the real Redis through a door, and this process's outage record fresh."""
    url = urlsplit(redis_or_skip(REDIS_URL))
    door = RedisDoor((url.hostname or "127.0.0.1", url.port or 6379))
    settings.CHANNEL_LAYERS = {"default": redis_channel_layer(door.url)}
    monkeypatch.setattr(doorbell, "_outage", doorbell._LayerOutage())
    yield door
    door.shut()


def told(caplog) -> list[str]:
    return [record.getMessage() for record in caplog.records if "the channel layer" in record.getMessage()]


def ring_and_send(key: str) -> None:
    """A ring, as it is delivered once its transaction commits, and its announcement through the layer finished."""
    doorbell._deliver(key)
    doorbell._announcer.flush(timeout=BOUND_S)


def a_waiter_joins(key: str) -> None:
    """An AsyncWaiter (an SSE stream's, an MCP wait's) listens on the layer, or falls back to polling."""

    async def join() -> None:
        waiter = doorbell.AsyncWaiter(key)
        await asyncio.wait_for(waiter.joined(), BOUND_S)
        waiter.close()

    asyncio.run(join())


def test_a_redis_outage_is_told_once_when_it_begins_and_once_when_it_ends(door, caplog):
    caplog.set_level(logging.WARNING, logger=doorbell.__name__)
    key = f"outage-{uuid.uuid4().hex}"
    joined = threading.Semaphore(0)
    unsubscribe = doorbell.subscribe(key, joined.release)  # the cross-process listener joins its group
    stop = doorbell.listen_across_processes()
    try:
        assert joined.acquire(timeout=BOUND_S), "the listener never joined through the open door"
        ring_and_send(f"{key}-before")
        assert told(caplog) == []

        door.shut()
        for i in range(RINGS):
            ring_and_send(f"{key}-{i}")
        a_waiter_joins(key)
        assert len(told(caplog)) == 1, told(caplog)

        door.open()
        assert joined.acquire(timeout=BOUND_S), "the listener never came back after the door opened"
        ring_and_send(key)
    finally:
        stop()
        unsubscribe()

    began, ended = told(caplog)
    assert began.startswith("doorbell: the channel layer is unreachable (") and "Error" in began, began
    assert ended.startswith("doorbell: the channel layer answers again after "), ended
    assert f"{2 * RINGS} ring(s) were not announced and 1 waiter(s) fell back to polling" in ended, ended
