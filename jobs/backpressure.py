"""Back-pressure for Daphne: an ASGI `send` that waits while the client is not reading.

Daphne hands every reply straight to Twisted, which buffers whatever the socket cannot take yet, without limit: a
client that stops reading an SSE stream or a websocket made the server hold the rest of the transcript for it.
Twisted already knows when a connection's buffer is full (it pauses a registered push producer) and when it has
drained (it resumes it). `FlowControlledServer` registers a small producer on each streaming connection and makes
`send` wait for "resumed", so the stream readers in jobs/views.py and jobs/consumers.py read the next batch from the
database only once the last one is on its way. What one client can hold is then bounded by Twisted's buffer plus one
batch; a client that stays stuck for `BRIDGE_STREAM_STALL_S` is disconnected and the stream ends
(docs/architecture.md, "Streams").
"""

import asyncio
import logging

from daphne.server import Server
from django.conf import settings
from twisted.internet.interfaces import IPushProducer
from zope.interface import implementer

log = logging.getLogger("jobs")


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


class FlowControlledServer(Server):
    """Daphne's server whose `send` for response bodies and websocket frames waits until the client has read."""

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
        if details.pop("drain", None) is not None and getattr(protocol, "producer", None) is not None:
            protocol.unregisterProducer()

    async def _wait_for_reader(self, protocol, drain: Drain) -> None:
        limit = settings.BRIDGE_STREAM_STALL_S
        try:
            await asyncio.wait_for(drain.writable.wait(), timeout=limit)
        except TimeoutError:
            log.warning("closed a stream to %s: its client read nothing for %s s", _peer(protocol), limit)
            transport = getattr(protocol, "transport", None) or protocol.channel.transport
            transport.abortConnection()


def _peer(protocol) -> str:
    client = getattr(protocol, "client_addr", None)
    return f"{client[0]}:{client[1]}" if client else "a client"
