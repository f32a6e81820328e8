"""Daphne as runbridge serves Bridge: Django's sync handler on a pool of threads, JSON answers to requests Twisted
cannot parse, and back-pressure on streams.

`PooledDjango`: every plain HTTP request is one call into Django's WSGI handler on a pool thread. The request body is
read before the call and the response is carried back whole, so a request costs one hand-off between the event loop
and a thread. a2wsgi, which served these before, makes four (the call, then the status, each body chunk and the end
each wait for the loop): 0.95 ms of CPU per request for a trivial app against 0.44 ms with one, and 0.27 ms for the
same app written for ASGI. Django refuses database access on the event loop's thread, so one hand-off is the least a
request can cost (docs/architecture.md, "Process model").

`GET /health` and `HEAD /health` from a Host Django accepts are answered from a snapshot of the health view's answer
no older than a second (jobs/web/health.py), on the event loop, with no hand-off and no database read: through Django
every poll ran the view's five queries and executor checks.

`HttpChannel`: Twisted drops a connection whose request line is over its line limit without a word, and answers an
unparsable request with an empty 400; Bridge's channel raises the limit and answers each in the API's error shape.

Connections that do nothing (`ConnectionLimits`): Twisted's one timer on a connection (60 s) restarts at every byte, so
a client that sent one header line every few seconds kept its connection for good, and one that sent nothing kept it a
minute (500 of the first were all open after 60 s, 1,500 of the second after 30 s). `HttpChannel` gives a request's line
and headers BRIDGE_HTTP_HEADER_TIMEOUT_S in all, from the accept or from the request's first byte; Twisted's timer,
which it stops while a request is in progress (an open stream is one), is the idle limit between requests; Daphne pings
a silent websocket and drops it if no pong comes; and `ClientConnections` caps what one client address may hold open.

Back-pressure: an ASGI `send` that waits while the client is not reading.

`AcceptTurns`: web processes that share one listening socket take turns accepting from it.

`serve`: the server as runbridge runs it, in its own process or in each web process it starts.

Daphne hands every reply straight to Twisted, which buffers whatever the socket cannot take yet, without limit: a
client that stops reading an SSE stream or a websocket made the server hold the rest of the transcript for it.
Twisted already knows when a connection's buffer is full (it pauses a registered push producer) and when it has
drained (it resumes it). `FlowControlledServer` registers a small producer on each streaming connection and makes
`send` wait for "resumed", so the stream readers in views.py and consumers.py read the next batch from the
database only once the last one is on its way. What one client can hold is then bounded by Twisted's buffer plus one
batch; a client that stays stuck for `BRIDGE_STREAM_STALL_S` is disconnected and the stream ends
(docs/architecture.md, "Streams").
"""

# Annotations stay unevaluated: `PooledDjango.respond` defines an annotated `start_response` for every request, and
# building its `Callable[[bytes], None]` was 3 % of what a one-process server did under GET load (py-spy).
from __future__ import annotations

import asyncio
import contextvars
import functools
import io
import json
import logging
import time
import weakref
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING

from a2wsgi.wsgi import build_environ
from daphne.server import Server
from django.conf import settings
from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler
from twisted.internet import reactor
from twisted.internet.interfaces import IPushProducer
from twisted.internet.protocol import connectionDone
from twisted.web import http
from zope.interface import implementer

from jobs import processes
from jobs.core.errors import ErrorCode
from jobs.web import health

if TYPE_CHECKING:
    from a2wsgi.asgi_typing import HTTPScope
    from a2wsgi.wsgi_typing import Environ
    from twisted.internet.interfaces import IDelayedCall, ITransport
    from twisted.python.failure import Failure

log = logging.getLogger("jobs")

# A request line (method, URL, version) or one header line may be this long; the line and all headers together,
# twice that. Twisted's own 16 KiB cut off a 60,000-character task_id; longer still is answered 414 or 431.
MAX_REQUEST_LINE_BYTES = 64 * 1024
MAX_REQUEST_HEAD_BYTES = 2 * MAX_REQUEST_LINE_BYTES
HTTP_REASONS = {
    400: b"Bad Request",
    408: b"Request Timeout",
    414: b"URI Too Long",
    429: b"Too Many Requests",
    431: b"Request Header Fields Too Large",
}

# A web process that shares its listening socket waits this long after each accept for every connection it holds,
# counting at most ACCEPT_TURN_MAX_HELD of them, before it accepts again (`AcceptTurns`).
ACCEPT_TURN_S = 0.002
ACCEPT_TURN_MAX_HELD = 4


# A WSGI app's answer as `PooledDjango` carries it back: (status, headers, the body whole or as it streams).
Answer = tuple[int, list[tuple[bytes, bytes]], bytes | AsyncIterator[bytes]]


class PooledDjango:
    """An ASGI app that answers each HTTP request with one call of a WSGI app (Django's) on a fixed pool of threads.

    A response Django builds in memory is carried back whole. A response that streams from an async iterator (the
    SSE stream, jobs/web/views.py) is sent from the event loop as the iterator yields, and ends early if the client
    leaves: its view runs on a pool thread like any other and hands the thread back when it returns, so an open
    stream holds no thread (Django's ASGI handler, which served it before, kept a thread per open stream)."""

    def __init__(self, wsgi: Callable, workers: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.wsgi = wsgi
        self.pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="web")
        self.health = health.HealthSnapshot(clock)

    async def __call__(self, scope: HTTPScope, receive, send) -> None:
        body = await read_body(receive, settings.DATA_UPLOAD_MAX_MEMORY_SIZE)
        if body is None:
            return  # the client left before its request was whole
        environ = build_environ(scope, io.BytesIO(body))  # type: ignore[arg-type]  # a2wsgi: any file-like body
        if health.is_health_check(scope) and health.host_is_allowed(environ):
            refresh = functools.partial(self.call_whole, health.refresh_environ(environ))
            answer: Answer = await self.health.reply(refresh)
        else:
            answer = await self.call(environ)
        status, headers, content = answer
        await send({"type": "http.response.start", "status": status, "headers": headers})
        if isinstance(content, bytes):
            await send({"type": "http.response.body", "body": content})
        else:
            await stream_until_gone(content, receive, send)

    async def call(self, environ: Environ) -> Answer:
        """`respond` on a pool thread, in a copy of this request's context."""
        run = contextvars.copy_context().run
        return await asyncio.get_running_loop().run_in_executor(self.pool, run, self.respond, environ)

    async def call_whole(self, environ: Environ) -> health.Reply:
        """`call` for an answer that must not stream (a health snapshot keeps the whole answer)."""
        status, headers, content = await self.call(environ)
        if not isinstance(content, bytes):
            raise TypeError(f"{environ['PATH_INFO']} answered with a stream, where a whole answer was expected")
        return status, headers, content

    def respond(self, environ: Environ) -> Answer:
        """(status, headers, body) of the WSGI app's answer, on a pool thread; the body is an async iterator when the
        response streams from one."""
        started: list = []
        chunks: list[bytes] = []

        def start_response(status: str, headers: list[tuple[str, str]], exc_info=None) -> Callable[[bytes], None]:
            started[:] = [
                int(status.split(" ", 1)[0]),
                [(k.lower().encode("latin1"), v.encode("latin1")) for k, v in headers],
            ]
            return chunks.append

        response = self.wsgi(environ, start_response)
        streams = getattr(response, "is_async", False)
        try:
            if not streams:
                chunks.extend(response)
        finally:
            close = getattr(response, "close", None)
            if close is not None:
                close()  # Django's request_finished: this thread's part of the request is over either way
        return started[0], started[1], response.streaming_content if streams else b"".join(chunks)


async def stream_until_gone(chunks: AsyncIterator[bytes], receive, send) -> None:
    """Send `chunks` as a streamed body until they end or the client disconnects, whichever comes first; a client
    that leaves cancels the iterator wherever it waits (the stream's reader waits on the doorbell, and would notice
    only at its next write)."""

    async def send_all() -> None:
        async for chunk in chunks:
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await send({"type": "http.response.body", "body": b""})

    async def until_disconnect() -> None:
        while (await receive())["type"] != "http.disconnect":
            pass

    sending, leaving = asyncio.ensure_future(send_all()), asyncio.ensure_future(until_disconnect())
    try:
        done, _ = await asyncio.wait((sending, leaving), return_when=asyncio.FIRST_COMPLETED)
    finally:
        leaving.cancel()
        sending.cancel()  # nothing if it ended
    if sending in done:
        sending.result()  # a failed stream fails the request: Daphne logs it and closes the connection


async def read_body(receive, limit: int) -> bytes | None:
    """The request's body, at most `limit` + 1 bytes of it (Django refuses a larger one by its Content-Length, 413,
    without reading it; the rest is read and dropped), or None if the client left first."""
    kept = bytearray()
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        if len(kept) <= limit:
            kept += message.get("body", b"")[: limit + 1 - len(kept)]
        if not message.get("more_body"):
            return bytes(kept)


@dataclass(frozen=True)
class ConnectionLimits:
    """What one connection, and one client, may hold of a web process (the README's settings table)."""

    head_timeout_s: float  # a request's line and headers all arrive within this of the accept or its first byte
    idle_s: float  # a connection with no request in progress is closed after this long
    per_client: int  # connections one client address may hold open
    ping_interval_s: float  # a websocket silent this long is pinged (Daphne looks every 2 s) ...
    ping_timeout_s: float  # ... and dropped if its pong has not come within this

    @classmethod
    def from_settings(cls) -> ConnectionLimits:
        return cls(
            head_timeout_s=settings.BRIDGE_HTTP_HEADER_TIMEOUT_S,
            idle_s=settings.BRIDGE_HTTP_IDLE_S,
            per_client=settings.BRIDGE_HTTP_MAX_CONNECTIONS_PER_CLIENT,
            ping_interval_s=settings.BRIDGE_WS_PING_INTERVAL_S,
            ping_timeout_s=settings.BRIDGE_WS_PING_TIMEOUT_S,
        )


class ClientConnections:
    """The connections each client address holds open in this process, so that one client cannot take them all.

    Counted by transport: a websocket takes its connection over from the HTTP channel, which then never hears that it
    closed, and a transport knows whether it is still connected whichever protocol holds it."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.held: dict[str, weakref.WeakSet] = {}

    def admit(self, transport: ITransport) -> bool:
        """Whether `transport`'s client may hold one more connection; if so, it is counted until it closes."""
        address = client_address(transport)
        if address not in self.held:
            self.held = {each: held for each, held in self.held.items() if any(t.connected for t in held)}
            self.held[address] = weakref.WeakSet()
        held = self.held[address]
        if sum(1 for each in held if each.connected) >= self.limit:
            return False
        held.add(transport)
        return True


def client_address(transport: ITransport) -> str:
    """The client's IP address (any other kind of peer, such as a Unix socket's, by its description)."""
    peer = transport.getPeer()  # type: ignore[misc]  # zope method: no self in the stub
    return getattr(peer, "host", None) or str(peer)


class HttpChannel(http.HTTPChannel):
    """Twisted's HTTP/1.1 connection with Bridge's limits and answers. Twisted drops a connection whose request line
    is over its line limit without a word, and answers an unparsable request (a URL with raw non-ASCII characters,
    such as the README's placeholder `6f1c…` pasted into curl) with an empty 400; here each gets a JSON body saying
    what was wrong and what to do. `FlowControlledServer` makes one per connection.

    A request's line and headers must all arrive within `head_timeout_s`, counted from the accept, or on a keep-alive
    connection from the request's first byte: Twisted's own timer restarts at every byte, so a client that sent a
    header now and then kept its connection for good. Between requests that timer is the idle limit. A client over
    its `clients` limit is answered 429 as it connects, and the connection closed."""

    MAX_LENGTH = MAX_REQUEST_LINE_BYTES
    totalHeadersSize = MAX_REQUEST_HEAD_BYTES

    def __init__(
        self,
        accept_turns: AcceptTurns | None = None,
        clients: ClientConnections | None = None,
        head_timeout_s: float | None = None,
    ) -> None:
        super().__init__()
        self.accept_turns = accept_turns
        self.clients = clients
        self.head_timeout_s = head_timeout_s
        self.awaiting_head = True  # the next bytes begin a request's head (none has begun since the last one ended)
        self.head_deadline: IDelayedCall | None = None

    def connectionMade(self) -> None:  # noqa: N802 (Twisted's interface)
        super().connectionMade()
        if self.accept_turns is not None:
            self.accept_turns.accepted(self.transport)
        if self.clients is not None and not self.clients.admit(self.connected_transport):
            self.refuse_client(self.clients.limit)
            return
        self.start_head_clock()

    def dataReceived(self, data: bytes) -> None:  # noqa: N802
        if self.awaiting_head and self.head_deadline is None:  # a keep-alive connection's next request begins
            self.start_head_clock()
        super().dataReceived(data)

    def allHeadersReceived(self) -> None:  # noqa: N802
        self.awaiting_head = False
        self.stop_head_clock()
        super().allHeadersReceived()

    def requestDone(self, request: http.Request) -> None:  # noqa: N802
        self.awaiting_head = True  # first: Twisted hands on the bytes of a pipelined next request from here
        super().requestDone(request)

    def connectionLost(self, reason: Failure = connectionDone) -> None:  # noqa: N802
        self.stop_head_clock()
        super().connectionLost(reason)

    def start_head_clock(self) -> None:
        if self.head_timeout_s is not None:
            self.head_deadline = self.callLater(self.head_timeout_s, self.head_timed_out)

    def stop_head_clock(self) -> None:
        if self.head_deadline is not None and self.head_deadline.active():  # type: ignore[misc]  # zope: no self
            self.head_deadline.cancel()  # type: ignore[misc]  # zope method: no self in the stub
        self.head_deadline = None

    def head_timed_out(self) -> None:
        """A request whose line has come is answered 408; a connection that has not sent one is closed."""
        self.head_deadline = None
        if not self.requests:
            self.loseConnection()
            return
        self.refuse(
            408,
            ErrorCode.REQUEST_HEAD_TIMEOUT,
            f"the request line and headers did not all arrive within {self.head_timeout_s:g} s "
            "(BRIDGE_HTTP_HEADER_TIMEOUT_S), so the connection closes: send each request whole, on a new connection",
            timeout_s=self.head_timeout_s,
        )

    def refuse_client(self, limit: int) -> None:
        address = client_address(self.connected_transport)
        self.refuse(
            429,
            ErrorCode.TOO_MANY_CONNECTIONS,
            f"{address} holds {limit} connections to this Bridge web process already "
            "(BRIDGE_HTTP_MAX_CONNECTIONS_PER_CLIENT): reuse keep-alive connections or close some, then connect "
            "again",
            limit=limit,
        )

    def lineLengthExceeded(self, line: bytes) -> None:
        if not self.requests:  # no request has begun: this is its first line, the URL
            self.refuse(
                414,
                ErrorCode.URI_TOO_LONG,
                f"the request's URL is over {MAX_REQUEST_LINE_BYTES} bytes: send long values in a POST body "
                "(a task id is 36 characters)",
            )
        else:
            self.refuse(431, ErrorCode.HEADERS_TOO_LARGE, f"a request header is over {MAX_REQUEST_LINE_BYTES} bytes")

    def _respondToBadRequestAndDisconnect(self) -> None:
        """Twisted's one answer to every request it cannot parse (it names none of them apart)."""
        self.refuse(
            400,
            ErrorCode.BAD_HTTP_REQUEST,
            "the HTTP request could not be read: a URL must be ASCII (percent-encode other characters, e.g. "
            "curl -G --data-urlencode 'task_id=…'; ids in the README such as 6f1c… are placeholders for the task_id "
            "a create answered with), headers well-formed, and the request line and headers under "
            f"{MAX_REQUEST_HEAD_BYTES} bytes in all",
        )

    @property
    def connected_transport(self) -> ITransport:
        """The connection's transport, which Twisted sets before it hands the channel any data."""
        if self.transport is None:
            raise RuntimeError("HttpChannel has no transport: it is not connected")
        return self.transport

    def refuse(self, status: int, code: ErrorCode, message: str, **detail: object) -> None:
        body = json.dumps({"error": message, "code": code, **detail}).encode()
        head = (
            f"HTTP/1.1 {status} {HTTP_REASONS[status].decode()}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
        )
        self.connected_transport.write(head.encode() + body)  # type: ignore[call-arg,misc]  # zope: no self in the stub
        self.loseConnection()


@implementer(IPushProducer)
class Drain:
    """Paused by Twisted while the connection's write buffer is full, resumed once it has drained."""

    def __init__(self) -> None:
        self.writable = asyncio.Event()
        self.writable.set()

    def pauseProducing(self) -> None:  # noqa: N802 (Twisted's interface)
        self.writable.clear()

    def resumeProducing(self) -> None:  # noqa: N802
        self.writable.set()

    def stopProducing(self) -> None:  # noqa: N802 (the connection is gone: let the writer go on; Daphne drops replies)
        self.writable.set()


class AcceptTurns:
    """Makes a web process that shares its listening socket with others take turns at accepting from it.

    Each process waits on the same socket, and whichever runs first takes every connection waiting: Twisted accepts
    in a loop, and takes more per wake-up the more it found last time. A burst of keep-alive connections (a
    client's pool) then often landed in one process while the other had none: 5 rounds of 12 here, each served at
    half the rate, on one core. After each accept this process stops accepting for ACCEPT_TURN_S per connection it
    holds (at most ACCEPT_TURN_MAX_HELD counted, so 8 ms), so a sibling woken by the same connection takes the next
    one; a busy process, slow to come back to its loop, takes fewer. Nothing is refused meanwhile: new connections
    wait in the listen backlog. A lone client that connects once per request holds one connection and waits at most
    ACCEPT_TURN_S."""

    def __init__(self) -> None:
        self.ports: list = []
        self.held: weakref.WeakSet = weakref.WeakSet()
        self.resuming: IDelayedCall | None = None

    def listening(self, port) -> None:
        port.numberAccepts = 1
        self.ports.append(port)

    def accepted(self, transport) -> None:
        self.held.add(transport)
        if self.resuming is not None:
            return
        held = sum(1 for each in self.held if each.connected)
        for port in self.ports:
            port.stopReading()
        delay = ACCEPT_TURN_S * min(held, ACCEPT_TURN_MAX_HELD)
        self.resuming = reactor.callLater(delay, self.resume)  # type: ignore[arg-type]  # zope method: no self in stub

    def resume(self) -> None:
        self.resuming = None
        for port in self.ports:
            if port.connected:  # not stopped meanwhile
                port.numberAccepts = 1  # Twisted raised it after a full loop: one accept per turn
                port.startReading()


class FlowControlledServer(Server):
    """Daphne's server whose `send` for response bodies and websocket frames waits until the client has read, and
    whose HTTP connections are `HttpChannel`s held to `limits` (by default the settings'). With `shares_socket`, it
    takes turns accepting with the other web processes serving the same listening socket (`AcceptTurns`)."""

    listen_failure = ""  # why it could not listen (Daphne only logs it, and stops)

    def __init__(
        self,
        *args,
        shares_socket: bool = False,
        on_listening: Callable[[tuple[str, int]], None] | None = None,
        limits: ConnectionLimits | None = None,
        **kwargs,
    ) -> None:
        self.limits = limits or ConnectionLimits.from_settings()
        ping = {"ping_interval": self.limits.ping_interval_s, "ping_timeout": self.limits.ping_timeout_s}
        super().__init__(*args, **ping, **kwargs)
        self.accept_turns = AcceptTurns() if shares_socket else None
        self.clients = ClientConnections(self.limits.per_client)
        self.on_listening = on_listening

    def listen_success(self, port) -> None:
        super().listen_success(port)
        if self.accept_turns is not None:
            self.accept_turns.listening(port)
        if self.on_listening is not None and self.listening_addresses:
            self.on_listening(self.listening_addresses[-1])

    def listen_error(self, failure) -> None:
        self.listen_failure = failure.getErrorMessage()
        super().listen_error(failure)

    @property
    def http_factory(self) -> http.HTTPFactory:
        return self._http_factory

    @http_factory.setter
    def http_factory(self, factory: http.HTTPFactory) -> None:  # Daphne makes its factory inside run()
        channel = functools.partial(
            HttpChannel, accept_turns=self.accept_turns, clients=self.clients, head_timeout_s=self.limits.head_timeout_s
        )
        factory.protocol = channel  # type: ignore[method-assign,assignment]  # Twisted types it as its own factory
        factory.timeOut = self.limits.idle_s  # each channel's idle timer, which Twisted stops while a request runs
        self._http_factory = factory

    async def handle_reply(self, protocol, message) -> None:
        kind, more = message.get("type"), message.get("more_body", False)
        streamed = kind == "websocket.send" or (kind == "http.response.body" and more)
        drain = self._drain(protocol) if streamed else None
        if kind == "http.response.body" and not more:
            self._release(protocol)
        await super().handle_reply(protocol, message)
        if drain is not None and not drain.writable.is_set():
            await self._wait_for_reader(protocol, drain)

    def _drain(self, protocol) -> Drain | None:
        """The connection's producer, registered on its first streamed write."""
        details = self.connections.get(protocol)
        if details is None or details.get("disconnected"):
            return None
        if "drain" not in details:
            details["drain"] = drain = Drain()
            if hasattr(protocol, "channel"):  # HTTP: the request forwards its channel's pause and resume
                protocol.registerProducer(drain, True)
                if getattr(protocol.channel, "_waitingForTransport", False):
                    drain.pauseProducing()
            else:  # a websocket owns the TCP transport the HTTP channel had registered itself on
                protocol.transport.unregisterProducer()
                protocol.transport.registerProducer(drain, True)
        return details["drain"]

    def _release(self, protocol) -> None:
        """The response ends: Twisted wants the request's producer gone before it finishes."""
        details = self.connections.get(protocol) or {}
        registered = details.pop("drain", None) is not None and getattr(protocol, "producer", None) is not None
        if registered and protocol.channel is not None:  # None: the client has gone, and its channel with it
            protocol.unregisterProducer()

    async def _wait_for_reader(self, protocol, drain: Drain) -> None:
        limit = settings.BRIDGE_STREAM_STALL_S
        try:
            await asyncio.wait_for(drain.writable.wait(), timeout=limit)
        except TimeoutError:
            log.warning("closed a stream to %s: its client read nothing for %s s", _peer(protocol), limit)
            transport = getattr(protocol, "transport", None) or protocol.channel.transport
            transport.abortConnection()


def serve(
    application: Callable,
    endpoints: list[str],
    *,
    on_listening: Callable[[tuple[str, int]], None],
    shares_socket: bool = False,
    drain: Callable[[str], None] | None = None,
    now: Callable[[str], None] | None = None,
) -> str:
    """Serve `application` (static files too) until `stop_serving()`; return why it could not listen, or "". The first
    stop signal calls `drain` on the server's thread (default: stop serving), the second `now`."""
    server = FlowControlledServer(
        application=ASGIStaticFilesHandler(application),  # type: ignore[arg-type]  # any ASGI app, not only Django's
        endpoints=endpoints,
        signal_handlers=False,  # ours, below: a first stop may drain while the server goes on serving
        verbosity=0,
        shares_socket=shares_socket,
        on_listening=on_listening,
    )
    first = drain or (lambda name: reactor.stop())  # type: ignore[misc]  # zope method: no self in stub
    with processes.on_stop_signals(
        lambda name: reactor.callFromThread(first, name),
        None if now is None else lambda name: reactor.callFromThread(now, name),
    ):
        server.run()
    return server.listen_failure


def stop_serving() -> None:
    """End `serve` (from any thread)."""
    reactor.callFromThread(reactor.stop)  # type: ignore[misc]  # zope method: no self in stub


def _peer(protocol) -> str:
    client = getattr(protocol, "client_addr", None)
    return f"{client[0]}:{client[1]}" if client else "a client"
