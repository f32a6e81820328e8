"""An in-process doorbell: "there is news about key K" (DESIGN.md principle 1).

A ring carries no data: whoever wakes reads the database. Rings are sent after the transaction that wrote the
news commits, so a woken reader always finds it. A missed ring costs latency only, because every waiter also
wakes on its own short timeout and looks again. Keys are task public ids, plus QUEUE for "a task was queued".
"""

import asyncio
import threading
from collections.abc import Callable

from django.db import transaction

QUEUE = "queue"

_lock = threading.Lock()
_listeners: dict[str, set[Callable[[], None]]] = {}


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


def ring(key: str) -> None:
    """Ring once the current transaction commits (at once when there is none)."""
    transaction.on_commit(lambda: ring_now(key))


class AsyncWaiter:
    """Lets a coroutine wait for rings on one key without missing one that comes between two waits."""

    def __init__(self, key: str) -> None:
        self._loop = asyncio.get_running_loop()
        self._event = asyncio.Event()
        self._unsubscribe = subscribe(key, self._on_ring)

    def _on_ring(self) -> None:
        try:
            self._loop.call_soon_threadsafe(self._event.set)
        except RuntimeError:  # the loop has closed; its waiter is gone
            pass

    async def wait(self, timeout: float) -> bool:
        try:
            await asyncio.wait_for(self._event.wait(), timeout)
        except TimeoutError:
            return False
        self._event.clear()
        return True

    def close(self) -> None:
        self._unsubscribe()
