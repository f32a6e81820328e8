"""jobs/web/watching.py: an open stream reads the database when its task rings or when the process's sweep finds news it
has not read, never on a clock of its own, so quiet streams cost nothing however many are open."""

import asyncio
from collections import Counter

import pytest
from asgiref.sync import sync_to_async
from asgiref.testing import ApplicationCommunicator
from django.db import OperationalError
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from jobs import actions
from jobs.actions import create_token
from jobs.core import doorbell
from jobs.core.vocabulary import Status
from jobs.models import Task, Worker
from jobs.web import watching
from tests.support import ASGI_HTTP_SCOPE, make_task

pytestmark = pytest.mark.django_db(transaction=True)

STREAMS = 8
SCOPE = {**ASGI_HTTP_SCOPE, "method": "GET", "path": "/v1/task/output/stream", "raw_path": b"/v1/task/output/stream"}


@pytest.fixture
def token(transactional_db) -> str:
    return create_token("watching")[1]


class Watched:
    """Counts, on the event loop, each stream's reads and each sweep, and lets the test await them."""

    def __init__(self, monkeypatch) -> None:
        self.reads: Counter[int] = Counter()
        self.read_now = asyncio.Event()
        self.swept = asyncio.Queue()
        real_read, real_once = watching.TaskWatch.read, watching.Sweep.once

        def read(watch: watching.TaskWatch, last_seq: int, task) -> None:
            self.reads[watch.task_pk] += 1
            self.read_now.set()
            real_read(watch, last_seq, task)

        async def once(sweep: watching.Sweep) -> None:
            await real_once(sweep)
            self.swept.put_nowait(None)

        monkeypatch.setattr(watching.TaskWatch, "read", read)
        monkeypatch.setattr(watching.Sweep, "once", once)

    async def until_read(self, wanted: Counter) -> None:
        """Until the streams have read `wanted` times each; fails at once when one reads more."""
        while self.reads != wanted:
            assert not self.reads - wanted, f"streams read without news: {self.reads - wanted}"
            self.read_now.clear()
            await asyncio.wait_for(self.read_now.wait(), 10)

    async def sweeps(self, count: int) -> None:
        for _ in range(count):
            await asyncio.wait_for(self.swept.get(), 10)


@hypothesis_settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(news_for=st.sets(st.integers(0, STREAMS - 1)))
def test_quiet_streams_read_nothing_and_the_sweep_wakes_only_those_with_news(settings, token, monkeypatch, news_for):
    """Rings lost on purpose: only the sweep can wake the streams whose task has news, and it wakes no other."""
    from bridge.asgi import application

    settings.BRIDGE_POLL_S = 0.05
    settings.BRIDGE_SSE_HEARTBEAT_S = 600
    tasks = [make_task("say hi") for _ in range(STREAMS)]
    headers = [(b"authorization", f"Bearer {token}".encode())]

    async def body() -> tuple[Counter, Counter, list[bytes]]:
        with monkeypatch.context() as patch:
            watched = Watched(patch)
            streams = []
            for task in tasks:
                query = f"task_id={task.public_id}".encode()
                stream = ApplicationCommunicator(application, {**SCOPE, "query_string": query, "headers": headers})
                await stream.send_input({"type": "http.request", "body": b""})
                streams.append(stream)
            await watched.until_read(Counter({task.pk: 1 for task in tasks}))
            await watched.sweeps(3)
            quiet = Counter(watched.reads)
            patch.setattr(doorbell, "ring", lambda key: None)  # every ring of the news below is lost
            for n in sorted(news_for):
                await sync_to_async(actions.append_events)(tasks[n], [("text", {"text": f"news for {n}"})])
            await watched.until_read(Counter({task.pk: 1 + (n in news_for) for n, task in enumerate(tasks)}))
            await watched.sweeps(3)
            received = []
            for stream in streams:
                body = b""
                while not stream.output_queue.empty():
                    body += (await stream.receive_output(1)).get("body", b"")
                received.append(body)
                await stream.send_input({"type": "http.disconnect"})
                await stream.wait(10)
            return quiet, Counter(watched.reads), received

    quiet, after, received = asyncio.run(body())
    assert quiet == Counter({task.pk: 1 for task in tasks}), "a quiet stream read again without news"
    assert after == Counter({task.pk: 1 + (n in news_for) for n, task in enumerate(tasks)})
    for n, body in enumerate(received):
        assert (f"news for {n}".encode() in body) == (n in news_for), (n, body)


def test_the_sweep_stops_when_its_last_stream_closes_and_starts_with_the_next(settings):
    settings.BRIDGE_POLL_S = 0.05
    task = make_task("say hi")

    async def body() -> tuple[bool, bool, bool]:
        first = watching.TaskWatch(task)
        sweep = first.sweep
        first.close()
        await asyncio.wait_for(sweep.running, 5)  # returns: nothing left to watch
        stopped = sweep.running.done()
        second = watching.TaskWatch(task)
        restarted = second.sweep is sweep and not sweep.running.done()
        second.close()
        await asyncio.wait_for(sweep.running, 5)
        return stopped, restarted, not sweep.watches

    assert asyncio.run(body()) == (True, True, True)


def test_a_sweep_that_finds_the_database_away_leaves_the_streams_waiting(settings, monkeypatch):
    settings.BRIDGE_POLL_S = 0.05
    task = make_task("say hi")
    failures = []

    def away(task_pks: list[int]) -> None:
        failures.append(task_pks)
        raise OperationalError("database is locked")

    async def body() -> bool:
        watch = watching.TaskWatch(task)
        watch.read(0, task)
        monkeypatch.setattr(watching, "read_marks", away)
        await watch.sweep.once()
        woken = await watch.wait(timeout=0)
        watch.close()
        return woken

    assert asyncio.run(body()) is False
    assert failures == [[task.pk]]


def test_a_quiet_stream_sends_heartbeats_without_reading(settings, token, monkeypatch):
    from bridge.asgi import application

    settings.BRIDGE_POLL_S = 600  # no sweep within the test
    settings.BRIDGE_SSE_HEARTBEAT_S = 0.1
    task = make_task("say hi")
    query = f"task_id={task.public_id}".encode()
    scope = {**SCOPE, "query_string": query, "headers": [(b"authorization", f"Bearer {token}".encode())]}

    async def body() -> tuple[Counter, bytes]:
        with monkeypatch.context() as patch:
            watched = Watched(patch)
            stream = ApplicationCommunicator(application, scope)
            await stream.send_input({"type": "http.request", "body": b""})
            await watched.until_read(Counter({task.pk: 1}))
            received = b""
            while received.count(b": heartbeat") < 3:
                received += (await stream.receive_output(5)).get("body", b"")
            reads = Counter(watched.reads)
            await stream.send_input({"type": "http.disconnect"})
            await stream.wait(10)
            return reads, received

    reads, received = asyncio.run(body())
    assert reads == Counter({task.pk: 1}), "a heartbeat made the stream read again"
    assert received.count(b": heartbeat") >= 3


@hypothesis_settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(fates=st.lists(st.sampled_from(["queued", "live", "dead", "gone"]), min_size=1, max_size=6))
def test_the_sweep_settles_exactly_the_running_tasks_whose_supervisor_is_dead(transactional_db, fates):
    """Its marks are read without the tasks' rows; only a task whose supervisor died (or whose row is gone) is read
    whole and orphaned, and its mark is then the orphaned one."""
    live = actions.register_worker(10)
    dead = actions.register_worker(10)
    tasks = [make_task("say hi") for _ in fates]
    for task, fate in zip(tasks, fates, strict=True):
        if fate != "queued":
            Task.objects.filter(pk=task.pk).update(status=Status.RUNNING, worker=live if fate == "live" else dead)
    Worker.objects.filter(pk=dead.pk).update(pid=dead.pid + 10_000_000)  # its process is not there any more
    Task.objects.filter(pk__in=[t.pk for t, fate in zip(tasks, fates, strict=True) if fate == "gone"]).update(
        worker=None
    )

    marks = watching.read_marks([task.pk for task in tasks])

    expected = {"queued": Status.QUEUED, "live": Status.RUNNING, "dead": Status.ORPHANED, "gone": Status.ORPHANED}
    for task, fate in zip(tasks, fates, strict=True):
        task.refresh_from_db()
        assert task.status == expected[fate], (fate, task.status)
        assert marks[task.pk][:2] == (task.last_seq, task.status), "the mark is read after the settling"
