"""The doorbell: "there is news about key K" (docs/architecture.md, "Principles" 1).

A ring carries no data: whoever wakes reads the database. Rings are sent after the transaction that wrote the
news commits, so a woken reader always finds it. A missed ring costs latency only, because every waiter also
wakes on its own short timeout and looks again. Keys are task public ids, QUEUE for "a task was queued" and
TASKS for "some task has news" (rung with every task key, for the live task list).

Within one process rings go to subscribed callbacks. When the channel layer spans processes (channels-redis),
each ring is also announced to the layer group of its key, so a browser served by one process hears a separate
`supervise` process.
"""

import asyncio
import atexit
import logging
import threading
from collections.abc import Callable

from channels.layers import InMemoryChannelLayer, get_channel_layer
from django.db import transaction

QUEUE = "queue"
TASKS = "tasks"
RING_MESSAGE_TYPE = "doorbell.ring"

log = logging.getLogger(__name__)
_lock = threading.Lock()
_listeners: dict[str, set[Callable[[], None]]] = {}


def group_name(key: str) -> str:
    """The channel-layer group announcing rings of `key` (group names allow letters, digits, '-', '_', '.')."""
    return f"bridge.{key}"


def subscribe(key: str, callback: Callable[[], None]) -> Callable[[], None]:
    """Call `callback` (from any thread, so it must be quick and thread-safe) on each ring; returns unsubscribe."""
    with _lock:
        _listeners.setdefault(key, set()).add(callback)

    def unsubscribe() -> None:
        with _lock:
            callbacks = _listeners.get(key)
            if callbacks is not None:
                callbacks.discard(callback)
                if not callbacks:
                    del _listeners[key]

    return unsubscribe


def ring_now(key: str) -> None:
    with _lock:
        callbacks = list(_listeners.get(key, ()))
    for callback in callbacks:
        callback()


def layer_spans_processes() -> bool:
    """True for a shared layer (Redis); the in-memory layer only reaches this process, which ring_now covers."""
    layer = get_channel_layer()
    return layer is not None and not isinstance(layer, InMemoryChannelLayer)


class _Announcer:
    """Sends rings to the channel layer from one daemon thread, one at a time, so a writer never waits for it.

    Keys waiting to be sent are a set: a ring carries no data, so several rings of one key in a row are one.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pending: set[str] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wakeup = asyncio.Event()

    def announce(self, key: str) -> None:
        with self._lock:
            if self._loop is None:
                self._loop = asyncio.new_event_loop()
                threading.Thread(target=self._loop.run_forever, name="doorbell-announcer", daemon=True).start()
                asyncio.run_coroutine_threadsafe(self._send_pending(), self._loop)
            self._pending.add(key)
        self._loop.call_soon_threadsafe(self._wakeup.set)

    def _next_key(self) -> str | None:
        with self._lock:
            return self._pending.pop() if self._pending else None

    async def _send_pending(self) -> None:
        while True:
            await self._wakeup.wait()
            self._wakeup.clear()
            await self._send_now()

    async def _send_now(self) -> None:
        while (key := self._next_key()) is not None:
            await _group_send(key)

    def flush(self, timeout: float = 2.0) -> None:
        """At exit: send what is still waiting, so a short-lived writer's last news is announced too."""
        if self._loop is not None and self._pending:
            try:
                asyncio.run_coroutine_threadsafe(self._send_now(), self._loop).result(timeout)
            except Exception as exc:  # exiting anyway; readers still find the news on their next poll
                log.warning("doorbell: rings not announced at exit: %s", exc)


async def _group_send(key: str) -> None:
    try:
        await get_channel_layer().group_send(group_name(key), {"type": RING_MESSAGE_TYPE, "key": key})
    except Exception as exc:  # a broken layer must not fail anything: a lost ring costs latency only
        log.warning("doorbell: could not announce %s through the channel layer: %s", key, exc)


_announcer = _Announcer()
atexit.register(_announcer.flush)


def announce(key: str) -> None:
    """Tell other processes through the channel layer, without waiting for it."""
    _announcer.announce(key)


def _deliver(key: str) -> None:
    keys = [key] if key in (QUEUE, TASKS) else [key, TASKS]
    spans = layer_spans_processes()
    for each in keys:
        ring_now(each)
        if spans:
            announce(each)


def ring(key: str) -> None:
    """Ring once the current transaction commits (at once when there is none)."""
    transaction.on_commit(lambda: _deliver(key))


class AsyncWaiter:
    """Lets a coroutine wait for rings on one key without missing one that comes between two waits.

    It hears rings from this process and, when the channel layer spans processes, from the layer group too.
    """

    def __init__(self, key: str) -> None:
        self._loop = asyncio.get_running_loop()
        self._event = asyncio.Event()
        self._unsubscribe = subscribe(key, self._on_ring)
        self._joined = asyncio.Event()
        self._listener = asyncio.create_task(self._listen(key)) if layer_spans_processes() else None
        if self._listener is None:
            self._joined.set()

    def _on_ring(self) -> None:
        try:
            self._loop.call_soon_threadsafe(self._event.set)
        except RuntimeError:  # the loop has closed; its waiter is gone
            pass

    async def joined(self) -> None:
        """Returns once rings from other processes reach this waiter too (at once for the in-memory layer)."""
        await self._joined.wait()

    async def _listen(self, key: str) -> None:
        layer = get_channel_layer()
        try:
            channel = await layer.new_channel()
            await layer.group_add(group_name(key), channel)
        except Exception as exc:  # a broken layer costs latency only: the waiter still polls
            log.warning("doorbell: could not listen on the channel layer for %s: %s", key, exc)
            return
        finally:
            self._joined.set()
        try:
            while True:
                await layer.receive(channel)
                self._event.set()
        finally:
            await layer.group_discard(group_name(key), channel)

    async def wait(self, timeout: float) -> bool:
        try:
            await asyncio.wait_for(self._event.wait(), timeout)
        except TimeoutError:
            return False
        self._event.clear()
        return True

    def close(self) -> None:
        self._unsubscribe()
        if self._listener is not None:
            self._listener.cancel()
