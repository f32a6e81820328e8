"""Connections that do nothing are closed (issue 27.5): a request head that trickles in, a connection that sends
nothing, a keep-alive connection left idle and a websocket that answers no ping are each closed in bounded time,
while open streams live on; one client address may hold only so many connections at once.

Driven against a real `manage.py runbridge` with raw sockets, timeouts set small by environment. Each closing is
waited for by reading until the server closes, within a generous bound; the figures asserted are when it came. The
scenarios that only wait out a timer (`@waits`) run side by side, one connection each, started together by the
`waited` fixture: one after another they took half a minute, mostly asleep."""

import base64
import json
import os
import re
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest

from jobs.core.errors import ErrorCode
from tests.bridge_server import BridgeServer, closing_times
from tests.support import fake_agent_script

HEAD_S = 2.0  # BRIDGE_HTTP_HEADER_TIMEOUT_S
IDLE_S = 6.0  # BRIDGE_HTTP_IDLE_S: longer than HEAD_S + MARGIN_S, so neither timer passes for the other
PING_INTERVAL_S = PING_TIMEOUT_S = 1.0
PING_CHECK_S = 2.0  # Daphne looks at each websocket's silence every 2 s
DRIBBLE_S = HEAD_S / 4  # a slow client's pace: one header line every quarter of the timeout
MARGIN_S = 2.0  # what a loaded machine may add to a timer
BOUND_S = 30.0  # the longest any read waits for the server before the test fails
SLOW_CLIENTS = 200
PROMPT_S = 1.0  # /health while SLOW_CLIENTS trickle their heads: its usual answer takes milliseconds


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Iterator[BridgeServer]:
    """One web process (so every connection meets the same limits) with short timeouts and the default cap."""
    root = tmp_path_factory.mktemp("idle")
    env = {
        "BRIDGE_HTTP_HEADER_TIMEOUT_S": str(HEAD_S),
        "BRIDGE_HTTP_IDLE_S": str(IDLE_S),
        "BRIDGE_WS_PING_INTERVAL_S": str(PING_INTERVAL_S),
        "BRIDGE_WS_PING_TIMEOUT_S": str(PING_TIMEOUT_S),
        "BRIDGE_WEB_PROCESSES": "1",
    }
    with BridgeServer(root, "http://127.0.0.1:9", claude=fake_agent_script(root), extra_env=env) as bridge:
        yield bridge


Scenario = Callable[[BridgeServer], object]
WAITS: list[Scenario] = []  # every scenario `waited` starts, in the order they are defined


def waits(scenario: Scenario) -> Scenario:
    """Mark `scenario` as one that `waited` runs beside the others; its test judges what it returns."""
    WAITS.append(scenario)
    return scenario


@pytest.fixture(scope="module")
def waited(server) -> Iterator[dict[Scenario, Future]]:
    """Every `@waits` scenario, started at once on `server`, each in a thread of its own: a test takes the result
    of its own (which raises what its scenario raised). Leaving waits for every one of them to end."""
    with ThreadPoolExecutor(max_workers=len(WAITS), thread_name_prefix="idle-wait") as pool:
        yield {scenario: pool.submit(scenario, server) for scenario in WAITS}


def connect(server: BridgeServer) -> socket.socket:
    host, port = re.match(r"http://([^:/]+):(\d+)", server.url).groups()
    sock = socket.create_connection((host, int(port)), timeout=BOUND_S)
    return sock


def read_until_closed(sock: socket.socket, since: float) -> tuple[bytes, float]:
    """Everything the server sends until it closes the connection, and how long after `since` it closed."""
    received = b""
    sock.settimeout(BOUND_S)
    try:
        while chunk := sock.recv(65536):
            received += chunk
    except ConnectionResetError:
        pass
    except TimeoutError:
        pytest.fail(f"the server kept the connection open for {BOUND_S} s; it sent {received[:300]!r}")
    return received, time.monotonic() - since


def read_response(sock: socket.socket) -> tuple[int, bytes]:
    """One whole HTTP response with a Content-Length (the connection stays open): its status and body."""
    received = b""
    while b"\r\n\r\n" not in received:
        received += sock.recv(65536) or pytest.fail(f"closed mid-response: {received!r}")
    head, _, body = received.partition(b"\r\n\r\n")
    length = int(re.search(rb"(?im)^content-length:\s*(\d+)", head).group(1))
    while len(body) < length:
        body += sock.recv(65536) or pytest.fail(f"closed mid-body: {received!r}")
    return int(head.split()[1]), body


def json_answer(received: bytes) -> tuple[int, dict]:
    head, _, body = received.partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(body)


def health_request(close: bool = False) -> bytes:
    return b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n" + (b"Connection: close\r\n" if close else b"") + b"\r\n"


class Dribbler(threading.Thread):
    """Sends each socket one more header line every DRIBBLE_S until stopped: a request head that never ends."""

    def __init__(self, socks: list[socket.socket]) -> None:
        super().__init__(daemon=True)
        self.socks = socks
        self.done = threading.Event()

    def run(self) -> None:
        number = 0
        while not self.done.wait(DRIBBLE_S):
            number += 1
            for sock in self.socks:
                try:
                    sock.send(f"X-Slow-{number}: {number}\r\n".encode())
                except OSError:
                    pass  # the server has closed it

    def __enter__(self) -> "Dribbler":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.done.set()
        self.join()


def slow_head(server: BridgeServer) -> socket.socket:
    sock = connect(server)
    sock.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n")
    return sock


def health_on_a_new_connection(server: BridgeServer) -> tuple[int, float]:
    """The status of `GET /health` on a connection of its own, and how long the answer took."""
    sent = time.monotonic()
    with connect(server) as sock:
        sock.sendall(health_request(close=True))
        received, took = read_until_closed(sock, sent)
    return json_answer(received)[0], took


# First in the module, before `waited` starts the scenarios: nothing else is open on the server while it times /health.
def test_health_answers_promptly_while_200_heads_trickle_in_and_each_is_closed_in_time(server):
    """With the default cap, which leaves room for a burst of 200 from one client."""
    opened = time.monotonic()
    socks = [slow_head(server) for _ in range(SLOW_CLIENTS)]
    try:
        with Dribbler(socks):
            health = [health_on_a_new_connection(server) for _ in range(5)]
            answered = time.monotonic() - opened
            received, closed = closing_times(socks, opened, BOUND_S)
    finally:
        for sock in socks:
            sock.close()
    assert all(status == 200 and took < PROMPT_S for status, took in health), health
    assert answered < min(closed), "every slow head was still open while /health answered"
    assert all(json_answer(each)[0] == 408 for each in received)
    assert max(closed) <= HEAD_S + MARGIN_S, max(closed)
    assert "Traceback" not in Path(server.log_path).read_text(errors="replace"), server.output()


@waits
def send_nothing(server: BridgeServer) -> tuple[bytes, float]:
    opened = time.monotonic()
    with connect(server) as sock:
        return read_until_closed(sock, opened)


def test_a_connection_that_sends_nothing_is_closed_after_the_header_timeout(waited):
    received, after = waited[send_nothing].result()
    assert received == b"", "nothing was asked, so nothing is answered"
    assert HEAD_S * 0.9 <= after <= HEAD_S + MARGIN_S, after


@waits
def trickle_a_head(server: BridgeServer) -> tuple[bytes, float]:
    opened = time.monotonic()
    with slow_head(server) as sock, Dribbler([sock]):
        return read_until_closed(sock, opened)


def test_a_request_head_that_trickles_in_is_answered_408_once_the_header_timeout_has_passed(waited):
    """Each header line comes well within the timeout, yet the head as a whole must arrive within it."""
    received, after = waited[trickle_a_head].result()
    status, body = json_answer(received)
    assert status == 408 and body["code"] == ErrorCode.REQUEST_HEAD_TIMEOUT and body["timeout_s"] == HEAD_S, body
    assert "BRIDGE_HTTP_HEADER_TIMEOUT_S" in body["error"]
    assert HEAD_S * 0.9 <= after <= HEAD_S + MARGIN_S, after


@waits
def keep_alive_then_idle(server: BridgeServer) -> tuple[int, bytes, float]:
    with connect(server) as sock:
        sock.sendall(health_request())
        status = read_response(sock)[0]
        answered = time.monotonic()
        return status, *read_until_closed(sock, answered)


def test_an_idle_keep_alive_connection_is_closed_after_the_idle_time(waited):
    status, received, after = waited[keep_alive_then_idle].result()
    assert status == 200
    assert received == b""
    assert IDLE_S * 0.9 <= after <= IDLE_S + MARGIN_S, after


@waits
def ask_again_after_quiet(server: BridgeServer) -> tuple[int, bool, int | None]:
    """The first answer's status, whether the connection stayed open through HEAD_S and more of quiet, and the
    status of the request sent after it (None when it was closed)."""
    with connect(server) as sock:
        sock.sendall(health_request())
        first = read_response(sock)[0]
        if not still_quiet(sock, HEAD_S + 0.5):
            return first, False, None
        sock.sendall(health_request())
        return first, True, read_response(sock)[0]


def test_a_keep_alive_connections_next_head_is_timed_from_its_first_byte_not_from_the_accept(waited):
    """Between requests the idle time applies, not the head's: a request sent after HEAD_S of quiet is answered."""
    first, quiet, second = waited[ask_again_after_quiet].result()
    assert first == 200
    assert quiet, "the connection was closed between requests"
    assert second == 200


def still_quiet(sock: socket.socket, seconds: float) -> bool:
    """Whether the server sends nothing and keeps the connection open for `seconds`."""
    sock.settimeout(seconds)
    try:
        sock.recv(1, socket.MSG_PEEK)
    except TimeoutError:
        return True
    finally:
        sock.settimeout(BOUND_S)
    return False


# --- streams that are open are not idle ---------------------------------------------------------------------------


@waits
def follow_a_running_task(server: BridgeServer) -> bytes:
    task_id = server.create_task("say hi\nsleep 60", server.work)
    try:
        with connect(server) as sock:
            sock.sendall(
                f"GET /v1/task/output/stream?task_id={task_id} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                f"Authorization: Bearer {server.token}\r\n\r\n".encode()
            )
            return read_for(sock, IDLE_S + MARGIN_S)
    finally:
        server.post("/v1/task/cancel", {"task_id": task_id})


def test_an_open_sse_stream_outlives_the_idle_time(waited):
    received = waited[follow_a_running_task].result()
    assert received.startswith(b"HTTP/1.1 200 ") and b"\nid: " in received, received[:300]


def read_for(sock: socket.socket, seconds: float) -> bytes:
    """What the server sends over `seconds`; the test fails if it closes the connection meanwhile."""
    received, deadline = b"", time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        sock.settimeout(left)
        try:
            chunk = sock.recv(65536)
        except TimeoutError:
            break
        assert chunk, f"the server closed the stream after {seconds - left:.1f} s: {received[-300:]!r}"
        received += chunk
    return received


class Websocket:
    """The client end of a websocket to the task list, spoken over a raw socket: frames are read one at a time, and
    pings are answered only when `answers_pings`."""

    PING, PONG, CLOSE = 0x9, 0xA, 0x8

    def __init__(self, server: BridgeServer, answers_pings: bool) -> None:
        self.sock = connect(server)
        self.answers_pings = answers_pings
        self.pings = 0
        key = base64.b64encode(os.urandom(16)).decode()
        self.sock.sendall(
            f"GET /ws/tasks/ HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\nOrigin: http://127.0.0.1\r\n"
            f"Authorization: Bearer {server.token}\r\n\r\n".encode()
        )
        self.buffer = b""
        head = self.take_until(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 101 "), head

    def take_until(self, marker: bytes) -> bytes:
        while marker not in self.buffer:
            self.fill()
        head, _, self.buffer = self.buffer.partition(marker)
        return head

    def take(self, size: int) -> bytes:
        while len(self.buffer) < size:
            self.fill()
        taken, self.buffer = self.buffer[:size], self.buffer[size:]
        return taken

    def fill(self) -> None:
        chunk = self.sock.recv(65536)
        if not chunk:
            raise EOFError
        self.buffer += chunk

    def next_frame(self) -> int:
        """Read one frame (answering a ping if this client does); its opcode. EOFError once the server has closed."""
        first, second = self.take(2)
        size = second & 0x7F
        if size == 126:
            size = struct.unpack(">H", self.take(2))[0]
        elif size == 127:
            size = struct.unpack(">Q", self.take(8))[0]
        payload, opcode = self.take(size), first & 0x0F
        if opcode == self.PING:
            self.pings += 1
            if self.answers_pings:
                self.send(self.PONG, payload)
        return opcode

    def send(self, opcode: int, payload: bytes) -> None:
        mask = os.urandom(4)
        masked = bytes(byte ^ mask[i % 4] for i, byte in enumerate(payload))
        self.sock.sendall(bytes([0x80 | opcode, 0x80 | len(payload)]) + mask + masked)

    def frames_for(self, seconds: float) -> None:
        """Read frames for `seconds`; the test fails if the server closes the socket meanwhile."""
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            self.sock.settimeout(left)
            try:
                opcode = self.next_frame()
            except TimeoutError:
                break
            except EOFError:
                pytest.fail(f"the server closed a websocket after {seconds - left:.1f} s")
            assert opcode != self.CLOSE, f"the server closed a websocket after {seconds - left:.1f} s"

    def frames_until_closed(self, since: float) -> float:
        """Read frames until the server ends the connection; how long after `since` it did."""
        self.sock.settimeout(BOUND_S)
        try:
            while True:
                self.next_frame()
        except (EOFError, ConnectionResetError):
            return time.monotonic() - since
        except TimeoutError:
            pytest.fail(f"the server kept a websocket that answers no ping open for {BOUND_S} s")

    def close(self) -> None:
        self.sock.close()


@waits
def answer_pings(server: BridgeServer) -> Websocket:
    socket_ = Websocket(server, answers_pings=True)
    try:
        socket_.frames_for(IDLE_S + PING_CHECK_S + PING_TIMEOUT_S + MARGIN_S)
    finally:
        socket_.close()
    return socket_


def test_a_websocket_that_answers_pings_outlives_the_idle_time(waited):
    socket_ = waited[answer_pings].result()
    assert socket_.pings >= 2, "the server pinged the quiet socket, and its answers kept it open"


@waits
def answer_no_ping(server: BridgeServer) -> tuple[Websocket, float]:
    opened = time.monotonic()
    socket_ = Websocket(server, answers_pings=False)
    try:
        return socket_, socket_.frames_until_closed(opened)
    finally:
        socket_.close()


def test_a_websocket_that_answers_no_ping_is_closed(waited):
    socket_, after = waited[answer_no_ping].result()
    assert socket_.pings >= 1
    assert after <= PING_INTERVAL_S + PING_CHECK_S + PING_TIMEOUT_S + MARGIN_S, after


# --- many connections from one client ------------------------------------------------------------------------

CAP = 4


@pytest.fixture(scope="module")
def capped(tmp_path_factory) -> Iterator[BridgeServer]:
    root = tmp_path_factory.mktemp("capped")
    env = {"BRIDGE_HTTP_MAX_CONNECTIONS_PER_CLIENT": str(CAP), "BRIDGE_WEB_PROCESSES": "1"}
    with BridgeServer(root, "http://127.0.0.1:9", claude=fake_agent_script(root), extra_env=env) as bridge:
        yield bridge


def test_a_client_over_its_connection_cap_is_refused_in_json_until_one_of_its_connections_closes(capped):
    held = [connect(capped) for _ in range(CAP)]
    try:
        for sock in held:
            sock.sendall(health_request())
            assert read_response(sock)[0] == 200, "each connection up to the cap is served"
        with connect(capped) as over:
            over.sendall(health_request())
            received, _ = read_until_closed(over, time.monotonic())
        status, body = json_answer(received)
        assert status == 429 and body["code"] == ErrorCode.TOO_MANY_CONNECTIONS and body["limit"] == CAP, body
        assert "BRIDGE_HTTP_MAX_CONNECTIONS_PER_CLIENT" in body["error"]
        held[0].sendall(health_request(close=True))
        assert json_answer(read_until_closed(held[0], time.monotonic())[0])[0] == 200
        assert health_on_a_new_connection(capped)[0] == 200, "once one has closed, a new connection is served"
    finally:
        for sock in held:
            sock.close()
