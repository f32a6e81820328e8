"""Slow readers (issue 11.4): a client that stops reading an SSE stream or a websocket costs the server a bounded
buffer, not the rest of the transcript, and is disconnected once it has read nothing for BRIDGE_STREAM_STALL_S.

Driven against a real `manage.py runbridge` with raw sockets that never read, so nothing between the server and
the test (no client library) drains the bytes."""

import base64
import os
import re
import socket
import threading
from pathlib import Path

import pytest
from django.conf import settings

from jobs.web.watching import STREAM_READ_THREADS
from jobs.web.webserver import FlowControlledServer
from tests.bridge_server import BridgeServer
from tests.support import fake_agent_script, wait_until

LINES, LINE_BYTES = 12_000, 1_000  # a 12 MB transcript
# More readers than STREAM_READ_THREADS: their reads share those threads' connections and page caches, whose cost
# is then spread. With 4 readers an SSE reader cost 5.4-5.8 MB here, too near the bound on a loaded machine; with 8,
# 4.6 MB (a websocket reader 2 MB).
READERS = 8
# What one stuck reader may cost: Twisted's 64 KiB write buffer plus the one batch (500 events) read for it.
# Without back-pressure each cost the whole transcript: 42 MB (SSE) and 14 MB (websocket) here.
PER_READER_BYTES = 6_000_000
STALL_S = 2
CLOSED_RE = re.compile(r"closed a stream to .*: its client read nothing")


@pytest.fixture
def flooded(tmp_path):
    """A fresh server (its memory not yet grown by another test) holding one finished task with a large transcript."""
    root = tmp_path
    agent = fake_agent_script(root)
    env = {"BRIDGE_STREAM_STALL_S": str(STALL_S)}
    with BridgeServer(root, "http://127.0.0.1:9", claude=agent, extra_env=env) as server:
        task_id = server.create_task(f"flood {LINES} {LINE_BYTES}", server.work)
        wait_until(lambda: server.task(task_id)["status"] == "done", timeout=120, what="the flood to end")
        yield server, task_id


def connect_without_reading(server: BridgeServer, request: str) -> socket.socket:
    """A socket with a small receive buffer that sends `request` and then reads nothing."""
    host, port = re.match(r"http://([^:/]+):(\d+)", server.url).groups()
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 32 * 1024)
    sock.connect((host, int(port)))
    sock.sendall(request.encode())
    return sock


def sse_request(server: BridgeServer, task_id: str) -> str:
    return (
        f"GET /v1/task/output/stream?task_id={task_id} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        f"Authorization: Bearer {server.token}\r\n\r\n"
    )


def websocket_request(server: BridgeServer, task_id: str) -> str:
    key = base64.b64encode(os.urandom(16)).decode()
    return (
        f"GET /ws/tasks/{task_id}/ HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\nOrigin: http://127.0.0.1\r\n"
        f"Authorization: Bearer {server.token}\r\n\r\n"
    )


class PeakMemory(threading.Thread):
    """Samples the resident memory of a server (runbridge and the web processes it started) until stopped; `.peak` is
    the largest sample of their sum."""

    def __init__(self, server: BridgeServer) -> None:
        super().__init__(daemon=True)
        self.processes = server.processes()
        self.peak = self.rss()
        self.done = threading.Event()

    def rss(self) -> int:
        return sum(process.memory_info().rss for process in self.processes)

    def run(self) -> None:
        while not self.done.wait(0.02):
            self.peak = max(self.peak, self.rss())

    def stop(self) -> int:
        self.done.set()
        self.join()
        return self.peak


def closed_streams(server: BridgeServer) -> int:
    return len(CLOSED_RE.findall(Path(server.log_path).read_text(errors="replace")))


def read_all(sock: socket.socket) -> int:
    """What the client still gets after the server gave up on it: the buffered bytes, then the end."""
    sock.settimeout(10)
    total = 0
    try:
        while chunk := sock.recv(1 << 16):
            total += len(chunk)
    except ConnectionResetError:
        pass
    return total


@pytest.mark.parametrize("make_request", [sse_request, websocket_request], ids=["sse", "websocket"])
def test_a_reader_that_stops_reading_costs_a_bounded_buffer_and_is_disconnected(flooded, make_request):
    server, task_id = flooded
    transcript = LINES * LINE_BYTES
    before = closed_streams(server)
    memory = PeakMemory(server)
    memory.start()
    baseline = memory.peak
    readers = [connect_without_reading(server, make_request(server, task_id)) for _ in range(READERS)]
    try:
        everyone = "every stuck reader to be closed"
        wait_until(lambda: closed_streams(server) - before >= READERS, timeout=60, what=everyone)
        growth = memory.stop() - baseline
        received = [read_all(sock) for sock in readers]
    finally:
        memory.done.set()
        for sock in readers:
            sock.close()
    assert growth < READERS * PER_READER_BYTES, f"the server grew by {growth / 1e6:.1f} MB for {READERS} stuck readers"
    assert all(count < transcript / 2 for count in received), f"stuck readers were sent {received} bytes"
    assert "Traceback" not in Path(server.log_path).read_text(errors="replace"), server.output()


def test_a_reader_that_keeps_reading_gets_every_event_in_order(flooded):
    server, task_id = flooded
    seqs = [event["id"] for event in server.stream(task_id) if event["id"] is not None]
    assert seqs == list(range(1, len(seqs) + 1))
    assert len(seqs) >= LINES


def test_a_response_whose_client_has_gone_ends_without_an_error():
    """A reply's last body part after the client closed the connection (Twisted has dropped the request's channel):
    the producer registered for its earlier parts is let go quietly, not with an AttributeError in the log."""
    from twisted.internet.error import ConnectionDone
    from twisted.python.failure import Failure
    from twisted.web import http
    from twisted.web.test.requesthelper import DummyChannel

    server = FlowControlledServer(application=None, endpoints=["tcp:port=0:interface=127.0.0.1"])
    request = http.Request(DummyChannel())
    server.connections = {request: {}}  # as run() keeps them
    assert server._drain(request) is not None and request.producer is not None
    request.connectionLost(Failure(ConnectionDone()))

    server._release(request)

    assert request.channel is None and "drain" not in server.connections[request]


OPEN_STREAMS = 40
# Besides the stream readers' connections, a web process may hold one per thread that answered a plain request.
OTHER_CONNECTIONS = 3


def test_open_streams_share_a_few_threads_and_database_connections(tmp_path):
    """However many SSE streams are open, a web process reads for them on STREAM_READ_THREADS threads, each with one
    connection to the database, and holds no thread per stream. Before, under Django's ASGI handler, every open stream
    kept a thread of its own (60 open streams: 71 more threads in the web processes), and until the reads moved to
    shared threads a connection of its own too (61 SQLite connections and 23 MB more)."""
    with BridgeServer(tmp_path, "http://127.0.0.1:9", claude=fake_agent_script(tmp_path)) as server:
        task_id = server.create_task("say hi\nsleep 60", server.work)
        web = server.web_processes()
        threads_before = [process.num_threads() for process in web]
        streams = []
        try:
            for _ in range(OPEN_STREAMS):
                sock = connect_without_reading(server, sse_request(server, task_id))
                sock.settimeout(30)  # a stream that never sends an event fails the test instead of hanging it
                streams.append(sock)
                received = b""
                while b"\nid: " not in received:  # an event with a seq: the stream has read the database
                    received += sock.recv(65536) or pytest.fail(f"a stream closed: {received!r}")
            database = server.data_dir / "bridge.sqlite3"
            held = [sum(Path(file.path) == database for file in process.open_files()) for process in web]
            bound = STREAM_READ_THREADS + OTHER_CONNECTIONS
            assert len(held) == 2 and all(count <= bound for count in held), (held, bound)
            assert sum(held) < OPEN_STREAMS, "the test opened too few streams to tell the difference"
            # the threads a web process may start for them: the stream readers, and its request pool as it fills
            grown = [process.num_threads() - before for process, before in zip(web, threads_before, strict=True)]
            bound = STREAM_READ_THREADS + settings.BRIDGE_WEB_THREADS
            assert all(growth <= bound for growth in grown), (grown, bound)
            assert len(web) * bound < OPEN_STREAMS, "the test opened too few streams to tell the difference"
        finally:
            for sock in streams:
                sock.close()
            server.post("/v1/task/cancel", {"task_id": task_id})
