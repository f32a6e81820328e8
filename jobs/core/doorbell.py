"""The doorbell: "there is news about key K" (docs/architecture.md, "Principles" 1).

A ring carries no data: whoever wakes reads the database. Rings are sent after the transaction that wrote the
news commits, so a woken reader always finds it. A missed ring costs latency only, because every waiter also
wakes on its own short timeout and looks again. Keys are task public ids, QUEUE for "a task was queued" and
TASKS for "some task has news" (rung with every task key, for the live task list).

Within one process rings go to subscribed callbacks. When the channel layer spans processes (channels-redis),
each ring is also announced to the layer group of its key, so a browser served by one process hears a separate
`supervise` process. The other way round, a process that runs tasks starts one `listen_across_processes()`: a
thread with its own layer instance and one channel, joined to the group of every key subscribed here, which passes
what it hears to this process's subscribers (`ring_now`, never announced again, and never its own process's rings).
So a decision or cancel made in the web process reaches the supervisor running that task within milliseconds;
polling stays only as the safety net.

Without such a layer (SQLite, or PostgreSQL without Redis) the processes of one install on one machine still ring
each other: each process that listens binds a UDP socket on 127.0.0.1 and names its port in a file under
DATA_DIR/doorbell/, and a ring is one datagram to each port named there: the install's secret, then the key
(`_LocalBell`). A datagram without the secret (another program on this machine) is dropped before any other work.

A channel layer that fails (Redis down) costs latency only: rings not announced are found by polling. The outage is
logged once when it begins and once when it ends (`_LayerOutage`), never once per ring.
"""

import asyncio
import atexit
import hmac
import logging
import os
import random
import re
import socket
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import psutil
from channels.layers import DEFAULT_CHANNEL_LAYER, InMemoryChannelLayer, channel_layers, get_channel_layer
from django.conf import settings
from django.db import transaction

QUEUE = "queue"
TASKS = "tasks"
WEBHOOKS = "webhooks"  # deliveries were enqueued: the delivery loops look (jobs/supervision/deliveries.py)
RING_MESSAGE_TYPE = "doorbell.ring"
# Names this process in the rings it announces, so its own cross-process listener does not deliver them twice.
ORIGIN = uuid.uuid4().hex
REJOIN_S = 300.0  # the listener renews its group memberships this often (channels-redis forgets them after a day)
RECONNECT_MAX_S = 5.0  # the longest wait between tries to reach a layer that failed
LEAVE_TIMEOUT_S = 1.0  # the longest a waiter waits to leave its group as it closes (a courtesy, see AsyncWaiter)
LOOPBACK = "127.0.0.1"
PEER_FILE = re.compile(r"(\d+)-(\d+)")  # DATA_DIR/doorbell/<pid>-<port>: a local process listening for rings
PEERS_REREAD_S = 1.0  # the peer list is read again when its folder changes, and at least this often
MAX_KEY_BYTES = 200
MAX_DATAGRAM_BYTES = 65536  # more than any UDP datagram holds
FOREIGN_LOG_EVERY_S = 60.0  # datagrams without the secret are counted, and told of at most this often

log = logging.getLogger(__name__)
_lock = threading.Lock()
_listeners: dict[str, set[Callable[[], None]]] = {}
_remote_keys: dict[str, set[Callable[[], None]]] = {}  # the subscriptions the cross-process listener joins groups for


def group_name(key: str) -> str:
    """The channel-layer group announcing rings of `key` (group names allow letters, digits, '-', '_', '.')."""
    return f"bridge.{key}"


def subscribe(key: str, callback: Callable[[], None], *, remote: bool = True) -> Callable[[], None]:
    """Call `callback` (from any thread, so it must be quick and thread-safe) on each ring; returns unsubscribe.

    With `remote` (the default) rings from other processes reach it too while this process listens across processes
    (`listen_across_processes`); AsyncWaiter listens on the layer itself and passes False."""
    with _lock:
        _listeners.setdefault(key, set()).add(callback)
        if remote:
            _remote_keys.setdefault(key, set()).add(callback)
    if remote:
        _listener.changed()

    def unsubscribe() -> None:
        with _lock:
            for registry in (_listeners, _remote_keys):
                callbacks = registry.get(key)
                if callbacks is not None:
                    callbacks.discard(callback)
                    if not callbacks:
                        del registry[key]
        if remote:
            _listener.changed()

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


class _LayerOutage:
    """One stretch of channel-layer failures, as every user of the layer in this process sees it (the announcer, the
    cross-process listener, waiters): a warning when it begins, with the reason, and one when the layer answers
    again, with how long it lasted and what it cost; never one per ring. Thread-safe."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._lock = threading.Lock()
        self._clock = clock
        self.since: float | None = None  # clock() at the first failure; None while the layer answers
        self.lost = 0  # rings not announced meanwhile: other processes find that news by polling
        self.polling = 0  # waiters that could not listen on the layer meanwhile, and poll instead

    def failed(self, exc: BaseException, *, lost: int = 0, polling: int = 0) -> None:
        """A call to the layer failed; `lost` rings were not announced, `polling` waiters fell back to polling."""
        with self._lock:
            self.lost += lost
            self.polling += polling
            if self.since is not None:
                return
            self.since = self._clock()
        cause = exc.exceptions[0] if isinstance(exc, BaseExceptionGroup) else exc
        log.warning(
            "doorbell: the channel layer is unreachable (%s: %s); until it answers, other processes hear this one's "
            "news only by polling (every BRIDGE_POLL_S)",
            cause.__class__.__name__,
            (str(cause).strip().splitlines() or [""])[0],
        )

    def answered(self) -> None:
        """A call to the layer worked: the outage, if any, is over."""
        if self.since is None:  # the usual case, without the lock
            return
        with self._lock:
            if self.since is None:
                return
            lasted, lost, polling = self._clock() - self.since, self.lost, self.polling
            self.since, self.lost, self.polling = None, 0, 0
        log.warning(
            "doorbell: the channel layer answers again after %.1f s; meanwhile %d ring(s) were not announced and %d "
            "waiter(s) fell back to polling",
            lasted,
            lost,
            polling,
        )


_outage = _LayerOutage()


class _Announcer:
    """Sends rings to the channel layer from one daemon thread, one at a time, so a writer never waits for it.

    Keys waiting to be sent are a set: a ring carries no data, so several rings of one key in a row are one.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pending: set[str] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wakeup = asyncio.Event()
        self._sending = asyncio.Lock()  # held while keys are sent, so `flush` also waits for one already in flight

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
        async with self._sending:
            while (key := self._next_key()) is not None:
                await _group_send(key)

    def flush(self, timeout: float = 2.0) -> None:
        """At exit: send what is still waiting and finish the send under way, so a short-lived writer's last news
        is announced too (a key already taken off the set is not sent until its `group_send` returns)."""
        if self._loop is not None:
            try:
                asyncio.run_coroutine_threadsafe(self._send_now(), self._loop).result(timeout)
            except Exception as exc:  # exiting anyway; readers still find the news on their next poll
                log.warning("doorbell: rings not announced at exit: %s", exc)


async def _group_send(key: str) -> None:
    try:
        message = {"type": RING_MESSAGE_TYPE, "key": key, "origin": ORIGIN}
        await get_channel_layer().group_send(group_name(key), message)
    except Exception as exc:  # a broken layer must not fail anything: a lost ring costs latency only
        _outage.failed(exc, lost=1)
    else:
        _outage.answered()


_announcer = _Announcer()
atexit.register(_announcer.flush)


def announce(key: str) -> None:
    """Tell other processes through the channel layer, without waiting for it."""
    _announcer.announce(key)


class _Stopped(Exception):
    """The listener was told to stop (raised in its loop, so a stop never depends on a cancel being honoured)."""


class _Listener:
    """Rings from other processes for the keys subscribed here, passed to this process's subscribers.

    One thread with its own event loop and its own channel-layer instance (the process's shared one belongs to other
    loops), one channel joined to the group of each remotely subscribed key. When the layer fails (Redis restarted or
    unreachable) it tries again with a fresh channel after a short backoff, joins every group again, and rings each
    key here once: whatever was announced meanwhile is found by that look, not lost (Principles 1).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._users = 0
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._changed: asyncio.Event | None = None  # keys changed, or stop: look at both
        self._stopping: asyncio.Event | None = None

    def start(self) -> Callable[[], None]:
        """Listen (if not already listening) until every caller has called the returned stop."""
        with self._lock:
            self._users += 1
            if self._thread is None:
                loop, self._changed, self._stopping = asyncio.new_event_loop(), asyncio.Event(), asyncio.Event()
                main = loop.create_task(self._serve(self._changed, self._stopping))
                self._thread = threading.Thread(target=self._run, args=(loop, main), name="doorbell-listener")
                self._thread.daemon = True
                self._loop = loop
                self._thread.start()
        stopped = threading.Event()

        def stop() -> None:
            if not stopped.is_set():
                stopped.set()
                self._release()

        return stop

    def _release(self) -> None:
        with self._lock:
            self._users -= 1
            thread, loop, changed, stopping = self._thread, self._loop, self._changed, self._stopping
            if self._users or thread is None or loop is None or changed is None or stopping is None:
                return  # not listening (`start` sets the four together, and this clears them together)
            self._thread = self._loop = self._changed = self._stopping = None

        def stop_now() -> None:
            stopping.set()
            changed.set()
            for task in asyncio.all_tasks(loop):
                task.cancel()

        loop.call_soon_threadsafe(stop_now)
        thread.join(timeout=5)

    def changed(self) -> None:
        """The keys subscribed here changed: join or leave groups to match (from any thread)."""
        with self._lock:
            loop, changed = self._loop, self._changed
        if loop is not None and changed is not None:
            try:
                loop.call_soon_threadsafe(changed.set)
            except RuntimeError:  # its loop has just closed
                pass

    @staticmethod
    def _run(loop: asyncio.AbstractEventLoop, main: asyncio.Task) -> None:
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(main)
        except asyncio.CancelledError:
            pass
        finally:
            loop.close()

    async def _serve(self, changed: asyncio.Event, stopping: asyncio.Event) -> None:
        layer = channel_layers.make_backend(DEFAULT_CHANNEL_LAYER)
        loop = asyncio.get_running_loop()
        failures = 0
        try:
            while not stopping.is_set():
                began = loop.time()
                try:
                    await self._session(layer, changed, stopping)
                except Exception as exc:  # the layer failed: polling covers the gap; try again soon
                    if stopping.is_set():
                        return
                    _outage.failed(exc)
                    if loop.time() - began > RECONNECT_MAX_S:
                        failures = 0  # it had worked for a while: back off from the start
                    failures += 1
                    delay = min(RECONNECT_MAX_S, 0.05 * 2 ** min(failures, 10))
                    await asyncio.sleep(delay / 2 + random.random() * delay / 2)
        finally:
            if hasattr(layer, "close_pools"):
                try:
                    async with asyncio.timeout(2):
                        await layer.close_pools()
                except BaseException:  # closing is a courtesy; the process's other layers are not touched
                    pass

    async def _session(self, layer, changed: asyncio.Event, stopping: asyncio.Event) -> None:
        """One channel, its groups kept in step with the keys wanted, and rings passed on until the layer fails."""
        channel = await layer.new_channel()
        joined: set[str] = set()
        try:
            async with asyncio.TaskGroup() as group:
                group.create_task(self._keep_joined(layer, channel, joined, changed, stopping))
                group.create_task(self._pass_on(layer, channel))
        finally:
            for key in joined:
                try:
                    async with asyncio.timeout(1):
                        await layer.group_discard(group_name(key), channel)
                except BaseException:  # leaving is a courtesy: the groups forget a silent channel in a day
                    break

    async def _keep_joined(
        self, layer, channel: str, joined: set[str], changed: asyncio.Event, stopping: asyncio.Event
    ) -> None:
        loop = asyncio.get_running_loop()
        renewed = loop.time()
        while True:
            changed.clear()
            if stopping.is_set():
                raise _Stopped
            with _lock:
                wanted = set(_remote_keys)
            renew = loop.time() - renewed >= REJOIN_S
            new = wanted - joined
            adding, leaving = (wanted if renew else new), joined - wanted
            for key in adding:
                await layer.group_add(group_name(key), channel)
                joined.add(key)
            for key in leaving:
                await layer.group_discard(group_name(key), channel)
                joined.discard(key)
            if renew:
                renewed = loop.time()
            if adding or leaving:
                _outage.answered()  # Redis took those calls (making a channel alone asks it nothing)
            for key in new:
                ring_now(key)  # a ring announced before the join was not heard here: look again now
            try:
                async with asyncio.timeout(REJOIN_S):
                    await changed.wait()
            except TimeoutError:
                pass

    async def _pass_on(self, layer, channel: str) -> None:
        while True:
            message = await layer.receive(channel)
            _outage.answered()
            key = message.get("key")
            if isinstance(key, str) and message.get("origin") != ORIGIN:
                ring_now(key)


_listener = _Listener()


class _LocalBell:
    """Rings between the processes of one install (one DATA_DIR) on one machine, when no channel layer spans them.

    A process that listens binds a UDP socket on 127.0.0.1, names it in DATA_DIR/doorbell/<pid>-<port> (the folder
    is private to Bridge's user) and passes the key of every datagram it gets to `ring_now`, until it exits. A ring
    sends the install's secret (BRIDGE_DOORBELL_SECRET, kept in DATA_DIR/doorbell_secret, owner-only) and its key to
    every port named there but its own. Any local program may send to the port: a datagram that does not begin with
    the secret is dropped before any other work (a constant-time compare), counted in `foreign`, and told of in at
    most one log line a minute. A lost ring costs latency only, as with any ring.
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._lock = threading.Lock()
        self._own: tuple[socket.socket, Path] | None = None
        self._sender: socket.socket | None = None
        self._peers: list[int] = []
        self._read_at = (-1, 0.0)  # (the folder's mtime, the clock) when _peers was read
        self._clock = clock
        self.foreign = 0  # datagrams dropped for want of the secret (counted by the receiving thread alone)
        self._foreign_told: tuple[float, int] | None = None  # (the clock, `foreign`) at the last line about them

    @staticmethod
    def folder() -> Path:
        return Path(settings.DATA_DIR) / "doorbell"

    def listen(self) -> None:
        """Hear other local processes' rings from now until this process exits (once per process)."""
        with self._lock:
            if self._own is not None:
                return
            receiver = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            receiver.bind((LOOPBACK, 0))
            folder = self.folder()
            folder.mkdir(mode=0o700, exist_ok=True)
            self._forget_dead(folder)
            entry = folder / f"{os.getpid()}-{receiver.getsockname()[1]}"
            entry.touch(mode=0o600)
            self._own = (receiver, entry)
            self._read_at = (-1, 0.0)
        secret = settings.BRIDGE_DOORBELL_SECRET.encode()
        threading.Thread(target=self._receive, args=(receiver, secret), name="doorbell-local", daemon=True).start()
        atexit.register(entry.unlink, missing_ok=True)

    @staticmethod
    def _forget_dead(folder: Path) -> None:
        """Entries of processes that died without removing theirs (kill -9)."""
        for entry in folder.iterdir():
            match = PEER_FILE.fullmatch(entry.name)
            if match and not psutil.pid_exists(int(match[1])):
                entry.unlink(missing_ok=True)

    def _receive(self, receiver: socket.socket, secret: bytes) -> None:
        size = len(secret)
        buffer = memoryview(bytearray(MAX_DATAGRAM_BYTES))  # read whole, never cut short (Windows fails on that)
        while True:
            try:
                length, sender = receiver.recvfrom_into(buffer)
            except ConnectionResetError:  # Windows' word for an unreachable port somewhere: keep listening
                continue
            except OSError as exc:  # polling still finds every piece of news, only later
                log.warning("doorbell: stopped hearing other local processes: %s", exc)
                return
            if not size < length <= size + MAX_KEY_BYTES or not hmac.compare_digest(buffer[:size], secret):
                self._dropped_foreign(sender)  # ours hold the secret and a key of 1 to MAX_KEY_BYTES bytes
                continue
            for each in rung_by(bytes(buffer[size:length]).decode("utf-8", errors="replace")):
                ring_now(each)

    def _dropped_foreign(self, sender: tuple[str, int]) -> None:
        """Count a datagram without the secret; tell of them at most once every FOREIGN_LOG_EVERY_S."""
        self.foreign += 1
        now = self._clock()
        if self._foreign_told is not None and now - self._foreign_told[0] < FOREIGN_LOG_EVERY_S:
            return
        since = self.foreign - (self._foreign_told[1] if self._foreign_told else 0)
        self._foreign_told = (now, self.foreign)
        log.warning(
            "doorbell: ignored %d datagram(s) without this install's secret (the latest from %s:%d; at most one such "
            "line a minute): another program on this machine writes to this process's doorbell port, and wakes "
            "nothing. If a Bridge process of this install sends them, it started before DATA_DIR/doorbell_secret was "
            "made or changed: restart it",
            since,
            *sender[:2],
        )

    def send(self, key: str) -> None:
        data = settings.BRIDGE_DOORBELL_SECRET.encode() + key.encode()[:MAX_KEY_BYTES]
        peers = self._current_peers()
        sender = self._sender
        if sender is None:  # no peer has been found yet (the socket is made with the first)
            return
        for port in peers:
            try:
                sender.sendto(data, (LOOPBACK, port))
            except OSError:  # that process is gone: its entry is removed by the next one that starts listening
                pass

    def _current_peers(self) -> list[int]:
        try:
            changed = os.stat(self.folder()).st_mtime_ns
        except OSError:
            return []  # no process of this install has listened on this machine
        now = time.monotonic()
        with self._lock:
            if changed != self._read_at[0] or now - self._read_at[1] > PEERS_REREAD_S:
                own = self._own[1].name if self._own else ""
                names = [entry.name for entry in self.folder().iterdir() if entry.name != own]
                self._peers = [int(match[2]) for match in map(PEER_FILE.fullmatch, names) if match]
                self._read_at = (changed, now)
                if self._peers and self._sender is None:
                    self._sender = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
                    self._sender.setblocking(False)
            return self._peers


_local = _LocalBell()


def listen_across_processes() -> Callable[[], None]:
    """Hear rings that other processes send, for every key subscribed here (with `remote`), until the returned
    function is called: through the channel layer when it spans processes, else from this machine's other processes
    of this install (`_LocalBell`, which listens until the process exits). A supervisor calls it, so decisions and
    cancels made in the web process reach its runs at once."""
    if not layer_spans_processes():
        _local.listen()
        return lambda: None
    return _listener.start()


def rung_by(key: str) -> list[str]:
    """The keys one ring rings: a task's news is also news for the task list."""
    return [key] if key in (QUEUE, TASKS, WEBHOOKS) else [key, TASKS]


def _deliver(key: str) -> None:
    spans = layer_spans_processes()
    for each in rung_by(key):
        ring_now(each)
        if spans:
            announce(each)
    if not spans:
        _local.send(key)  # one datagram: the receiver rings what it rings (`_receive`), waking each process once


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
        self._unsubscribe = subscribe(key, self._on_ring, remote=False)
        self._joined = asyncio.Event()
        self._listener = asyncio.create_task(self._listen(key)) if layer_spans_processes() else None
        if self._listener is None:
            _local.listen()
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
            _outage.failed(exc, polling=1)
            return
        finally:
            self._joined.set()
        _outage.answered()
        try:
            while True:
                await layer.receive(channel)
                self._event.set()
        except Exception as exc:  # the layer failed under the waiter: it polls from now on
            _outage.failed(exc, polling=1)
        finally:
            try:
                # Bounded: this runs as the waiter's loop is torn down (asyncio.run cancelling its tasks), where a
                # Redis round trip may never complete, and that teardown would wait for it for ever.
                await asyncio.wait_for(layer.group_discard(group_name(key), channel), LEAVE_TIMEOUT_S)
            except Exception:  # leaving is a courtesy: the group forgets a silent channel in a day
                pass

    def wake(self) -> None:
        """Wake the waiting coroutine as a ring would; from the waiter's own event loop."""
        self._event.set()

    async def wait(self, timeout: float | None) -> bool:
        """True once rung (or woken) since the last wait returned True; False after `timeout` seconds (None: none)."""
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
