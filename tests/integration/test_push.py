"""Push between processes: a decision or cancel made in the web process reaches the supervisor process running the
task within milliseconds, through the channel layer (Redis) or, without one, this machine's local doorbell (UDP on
127.0.0.1); polling is only the safety net (docs/architecture.md, "Principles" 1).

The supervisor is a real `manage.py supervise` with BRIDGE_POLL_S=30, so only a push can deliver in time. The test
process plays the web process (its decisions rung through Redis, or to the supervisor's local port). Nothing sleeps:
each step waits for the event it causes.
"""

import asyncio
import os
import random
import shutil
import socket
import sys
import threading
import time
import uuid

import psutil
import pytest
from channels.layers import channel_layers

from bridge.settings import redis_channel_layer
from jobs import actions
from jobs.core import doorbell
from jobs.core.vocabulary import Status
from jobs.models import PermissionRequest, TaskEvent
from tests.support import SuperviseProcess, has_event, make_task, skip_or_fail, wait_for

pytestmark = pytest.mark.django_db(transaction=True)
REDIS_URL = os.environ.get("REDIS_URL") or os.environ.get("BRIDGE_TEST_REDIS_URL") or "redis://127.0.0.1:6379/0"
PUSH_BOUND_S = 2.0  # with a 30 s poll, only a push gets there this fast


@pytest.fixture
def redis_settings(settings):
    """This process's channel layer on the running Redis (REDIS_URL, as on CI), or skip (fail on CI)."""
    import redis

    try:
        redis.Redis.from_url(REDIS_URL, socket_connect_timeout=2).ping()
    except redis.RedisError as exc:
        skip_or_fail(f"Redis is not reachable at {REDIS_URL} (set REDIS_URL or BRIDGE_TEST_REDIS_URL): {exc}")
    settings.CHANNEL_LAYERS = {"default": redis_channel_layer(REDIS_URL)}  # as REDIS_URL configures it
    return REDIS_URL


@pytest.fixture
def redis_layer(redis_settings):
    """Redis, and this process listening across processes, so the test's waits hear the supervisor at once too."""
    stop = doorbell.listen_across_processes()
    yield redis_settings
    stop()


@pytest.fixture(params=["redis", "local"])
def pushed_supervisor(request, work_root, fake_agent, settings):
    """A supervisor in its own process that hears this process's rings only by push: through Redis, or (no channel
    layer, as with SQLite) through the local doorbell of the data folder both share."""
    if request.param == "redis":
        env = {"REDIS_URL": request.getfixturevalue("redis_layer")}
    else:
        settings.CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
        doorbell.listen_across_processes()  # so this process hears the supervisor's rings at once too
        env = {"REDIS_URL": "", "BRIDGE_DATA_DIR": str(settings.DATA_DIR)}
    proc = SuperviseProcess(
        settings,
        f"push-{uuid.uuid4().hex[:6]}",
        [work_root],
        extra_env={**env, "BRIDGE_POLL_S": "30", "BRIDGE_DRAIN_S": "0"},
    )
    yield proc
    proc.stop()


def test_the_local_doorbell_names_only_live_processes_and_skips_its_own_port(settings, tmp_path):
    """A process killed with -9 leaves its entry: the next process that listens removes it. A ring goes to every
    other live entry, never back to the ringing process."""
    settings.DATA_DIR = tmp_path
    folder = tmp_path / "doorbell"
    folder.mkdir()
    dead = psutil.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (folder / f"{dead.pid}-9").touch()
    peer = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    peer.bind(("127.0.0.1", 0))
    peer.settimeout(10)
    (folder / f"{os.getpid()}-{peer.getsockname()[1]}").touch()  # a live process (this one) on another port
    bell = doorbell._LocalBell()

    bell.listen()
    bell.send("task-key")

    entries = sorted(entry.name for entry in folder.iterdir())
    assert f"{dead.pid}-9" not in entries and len(entries) == 2, entries
    secret = settings.BRIDGE_DOORBELL_SECRET.encode()  # every datagram begins with it (tests/unit/test_doorbell.py)
    assert peer.recvfrom(512)[0] == secret + b"task-key"
    heard = threading.Event()
    unsubscribe = doorbell.subscribe("from-peer", heard.set, remote=False)
    try:
        peer.sendto(secret + b"from-peer", ("127.0.0.1", bell._own[0].getsockname()[1]))
        assert heard.wait(10), "a datagram from another process rings this process's subscribers"
    finally:
        unsubscribe()
        peer.close()


def test_a_task_ring_is_one_datagram_that_also_rings_the_task_list_where_it_arrives(settings, tmp_path, monkeypatch):
    """Every ring of a task is news for the task list too: the receiver rings both, so each process is sent one
    datagram per ring and woken once."""
    settings.DATA_DIR = tmp_path
    settings.CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
    (tmp_path / "doorbell").mkdir()
    peer = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    peer.bind(("127.0.0.1", 0))
    peer.settimeout(10)
    (tmp_path / "doorbell" / f"{os.getpid()}-{peer.getsockname()[1]}").touch()
    bell = doorbell._LocalBell()
    bell.listen()
    monkeypatch.setattr(doorbell, "_local", bell)
    heard = {key: threading.Event() for key in ("some-task", doorbell.TASKS)}
    unsubscribes = [doorbell.subscribe(key, event.set, remote=False) for key, event in heard.items()]
    try:
        doorbell._deliver("task-key")
        doorbell._deliver("the-next-ring")
        secret = settings.BRIDGE_DOORBELL_SECRET.encode()  # every datagram begins with it
        assert [peer.recvfrom(512)[0] for _ in range(2)] == [secret + b"task-key", secret + b"the-next-ring"]
        peer.sendto(secret + b"some-task", ("127.0.0.1", bell._own[0].getsockname()[1]))
        assert all(event.wait(10) for event in heard.values()), "the task and the task list are both rung"
    finally:
        for unsubscribe in unsubscribes:
            unsubscribe()
        peer.close()


def test_a_decision_reaches_the_agent_in_another_process_at_once(pushed_supervisor, work_root):
    clock = shutil.which("date")
    task = make_task(f'say ready\nask Bash {{"command": "{clock} +%s.%N"}}\nsay after')
    task = wait_for(task, lambda t: PermissionRequest.objects.filter(task=t, status="pending").exists())
    decided = time.time()
    actions.decide_permission(task, behavior="allow", by="test")
    task = wait_for(task, has_event("tool_result"), timeout=PUSH_BOUND_S + 3)
    heard = time.time()
    result = TaskEvent.objects.get(task=task, kind="tool_result")
    ran_at = float(result.data["content"].strip())  # the agent ran the command as soon as it had the answer
    latency_ms = (ran_at - decided) * 1000
    print(
        f"\npush latency: decision -> agent ran the allowed command {latency_ms:.1f} ms; "
        f"-> its result back in this process {(heard - decided) * 1000:.1f} ms (supervisor BRIDGE_POLL_S=30)"
    )
    assert 0 < latency_ms < PUSH_BOUND_S * 1000
    assert wait_for(task).status == Status.DONE


def test_a_cancel_reaches_the_supervisor_in_another_process_at_once(pushed_supervisor, work_root):
    task = wait_for(make_task("say working\nsleep 60"), has_event("text", text="working"))
    asked = time.time()
    actions.request_cancel(task, reason="push test")
    task = wait_for(task, timeout=PUSH_BOUND_S + 3)
    ended = time.time()
    stopping = TaskEvent.objects.get(task=task, kind="stopping").created_at.timestamp()
    print(
        f"\npush latency: cancel -> supervisor began the stop {(stopping - asked) * 1000:.1f} ms; "
        f"-> task ended {(ended - asked) * 1000:.1f} ms (supervisor BRIDGE_POLL_S=30)"
    )
    assert task.status == Status.CANCELLED and task.error == "push test"
    assert ended - asked < PUSH_BOUND_S


class FlakyLayer:
    """A real channel layer whose first `receive` fails, as when Redis restarts under a listener."""

    def __init__(self, layer) -> None:
        self.layer = layer
        self.channels: list[str] = []
        self.failed = False

    async def new_channel(self) -> str:
        self.channels.append(await self.layer.new_channel())
        return self.channels[-1]

    async def receive(self, channel: str) -> dict:
        if not self.failed:
            self.failed = True
            raise ConnectionError("Redis went away (simulated)")
        return await self.layer.receive(channel)

    def __getattr__(self, name):
        return getattr(self.layer, name)


class SlowLayer:
    """A channel layer whose `group_send` takes a while: the first one `first_s`, the others up to 20 ms."""

    def __init__(self, rng: random.Random, first_s: float) -> None:
        self.delays = iter([first_s] + [rng.uniform(0, 0.02) for _ in range(100)])
        self.in_flight = threading.Event()
        self.sent: list[str] = []

    async def group_send(self, group: str, message: dict) -> None:
        self.in_flight.set()
        await asyncio.sleep(next(self.delays))
        self.sent.append(message["key"])


@pytest.mark.parametrize("seed", range(4))
def test_the_exit_flush_waits_for_every_announced_ring_including_the_one_being_sent(monkeypatch, seed):
    """A short-lived writer (a script calling the actions) exits right after its last write: the ring already taken
    off the set and still on its way to Redis must arrive too, or a reader waiting on it hears nothing."""
    rng = random.Random(seed)
    layer = SlowLayer(rng, first_s=0.2)
    monkeypatch.setattr(doorbell, "get_channel_layer", lambda: layer)
    announcer = doorbell._Announcer()
    keys = [f"key-{seed}-{i}" for i in range(rng.randint(1, 5))]
    announcer.announce(keys[0])
    assert layer.in_flight.wait(5), "the announcer never sent"
    for key in keys[1:]:
        announcer.announce(key)
    announcer.flush(timeout=10)
    assert sorted(layer.sent) == sorted(keys), "a ring announced before exit was never sent"


def send_from_elsewhere(*rings: tuple[str, str]) -> None:
    """Rings (key, origin) as another process announces them, in order, from its own loop and layer instance."""

    async def send() -> None:
        layer = channel_layers.make_backend("default")
        for key, origin in rings:
            message = {"type": doorbell.RING_MESSAGE_TYPE, "key": key, "origin": origin}
            await layer.group_send(doorbell.group_name(key), message)
        await layer.close_pools()

    asyncio.run(send())


def test_the_listener_rejoins_after_the_layer_fails_and_ignores_its_own_rings(redis_settings, monkeypatch):
    made: list[FlakyLayer] = []
    make_backend = channel_layers.make_backend

    def flaky_backend(name):
        made.append(FlakyLayer(make_backend(name)))
        return made[-1]

    monkeypatch.setattr(channel_layers, "make_backend", flaky_backend)
    own, other = f"push-own-{uuid.uuid4().hex}", f"push-other-{uuid.uuid4().hex}"
    rings = {own: threading.Semaphore(0), other: threading.Semaphore(0)}
    counts = dict.fromkeys(rings, 0)

    def on_ring(key: str):
        def ring() -> None:
            counts[key] += 1
            rings[key].release()

        return ring

    stop = doorbell.listen_across_processes()
    unsubscribes = [doorbell.subscribe(key, on_ring(key)) for key in rings]
    try:
        # Each key is joined on the second channel (the first failed) and rung here once, to look again.
        for key in rings:
            assert rings[key].acquire(timeout=10), "the listener never joined after the layer failed"
        listening = [layer for layer in made if layer.channels]  # (others were made for announcing)
        assert len(listening) == 1 and listening[0].failed and len(listening[0].channels) == 2
        # One channel, read in order: once `other` is heard, the ring before it was read and (as ours) dropped.
        send_from_elsewhere((own, doorbell.ORIGIN), (other, "another-process"))
        assert rings[other].acquire(timeout=5), "a ring from another process did not arrive after the rejoin"
        assert counts == {own: 1, other: 2}, "this process's own ring came back through the layer"
    finally:
        for unsubscribe in unsubscribes:
            unsubscribe()
        stop()
