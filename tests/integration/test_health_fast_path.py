"""The cheap `/health` (jobs/web/health.py): Bridge's web server answers `GET /health` and `HEAD /health` from a
snapshot of the health view's answer that is never more than a second old, with no database read while it is fresh,
and still refuses a Host Django would refuse and says 503 when the database cannot be reached.

The snapshot's rules are driven by a fake clock: first the cache alone against generated schedules of requests,
clock steps and refreshes that end, then `PooledDjango` (bridge/asgi.py's app for HTTP) in-process over the test
database, and once through a real `runbridge`.
"""

import asyncio
import json
import threading

import pytest
from asgiref.testing import ApplicationCommunicator
from django.core.wsgi import get_wsgi_application
from django.db import OperationalError, connection
from django.db.backends.signals import connection_created
from django.test import Client
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from jobs.models import PermissionRequest
from jobs.web.health import HealthSnapshot, Reply
from jobs.web.webserver import PooledDjango
from tests.bridge_server import BridgeServer
from tests.support import ASGI_HTTP_SCOPE, make_task

ALLOWED_HOST = "127.0.0.1:8800"
MAX_AGE_S = 1.0  # the rule: no answer is older than this (issue 28)
REFRESH_EVERY_S = 0.5  # and the view runs at most this often per web process


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def settle() -> None:
    """Let every task that can run, run (a refresh that ended wakes its waiters a few loop turns later)."""
    for _ in range(20):
        await asyncio.sleep(0)


# --- the cache alone, against generated schedules -----------------------------------------------------------------


class Refreshes:
    """The view, as the cache calls it: each refresh waits until the test ends it, and answers with its number."""

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.started: list[float] = []  # the clock when each began
        self.gates: list[asyncio.Event] = []
        self.running = self.most_at_once = 0

    async def __call__(self) -> Reply:
        number = len(self.started)
        self.started.append(self.clock())
        self.gates.append(gate := asyncio.Event())
        self.running += 1
        self.most_at_once = max(self.most_at_once, self.running)
        try:
            await gate.wait()
        finally:
            self.running -= 1
        return 200, [], str(number).encode()

    def end_one(self) -> None:
        for gate in self.gates:
            if not gate.is_set():
                gate.set()
                return


STEPS = st.lists(
    st.one_of(
        st.tuples(st.just("wait"), st.floats(0, 0.8)),
        st.just(("request", 0.0)),
        st.just(("end a refresh", 0.0)),
    ),
    max_size=40,
)


async def run_schedule(steps: list[tuple[str, float]]) -> None:
    clock = FakeClock()
    snapshot, refreshes = HealthSnapshot(clock), Refreshes(clock)
    requests: list[tuple[float, asyncio.Future]] = []
    for kind, seconds in steps:
        if kind == "wait":
            clock.now += seconds
        elif kind == "end a refresh":
            refreshes.end_one()
        else:
            young = snapshot.latest is not None and clock.now - snapshot.latest.taken_at <= MAX_AGE_S
            requests.append((clock.now, asyncio.ensure_future(snapshot.reply(refreshes))))
            await settle()
            assert requests[-1][1].done() or not young, "a request that found a young snapshot waited for a refresh"
        await settle()
    while not all(answer.done() for _, answer in requests):
        refreshes.end_one()
        await settle()
    for arrived, answer in requests:
        taken_at = refreshes.started[int(answer.result()[2])]
        assert arrived - taken_at <= MAX_AGE_S, f"a request at {arrived} got the snapshot of {taken_at}"
    assert refreshes.most_at_once <= 1, "two refreshes ran at once"
    gaps = [later - earlier for earlier, later in zip(refreshes.started, refreshes.started[1:], strict=False)]
    assert all(gap >= REFRESH_EVERY_S for gap in gaps), f"refreshes began {gaps} s apart"


@hypothesis_settings(max_examples=300, deadline=None)
@given(steps=STEPS)
def test_no_answer_is_older_than_a_second_and_only_a_stale_snapshot_makes_a_request_wait(steps):
    """Whatever the requests, the clock and the refreshes do: every answer was taken at most a second before its
    request came; a request that found a snapshot that young was answered at once, even while a refresh ran; one
    refresh at a time, at most one per half second."""
    asyncio.run(run_schedule(steps))


# --- PooledDjango in-process, over the test database ---------------------------------------------------------------


class DatabaseWatch:
    """Counts every query on the connections opened after it is installed (the pool threads'), and makes each fail
    as an unreachable database's would while `down` is set."""

    def __init__(self) -> None:
        self.queries = 0
        self.down = False
        self.lock = threading.Lock()

    def __call__(self, execute, sql, params, many, context):
        with self.lock:
            self.queries += 1
        if self.down:
            raise OperationalError("unable to open database file")
        return execute(sql, params, many, context)

    def watch(self, sender, connection, **kwargs) -> None:
        connection.execute_wrappers.append(self)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def database(transactional_db) -> DatabaseWatch:
    """A watch on every connection opened during the test, taken off again before the test database is flushed."""
    watch = DatabaseWatch()
    connection_created.connect(watch.watch)
    yield watch
    connection_created.disconnect(watch.watch)
    watch.down = False
    # this thread's connection, if the test opened it again
    connection.execute_wrappers[:] = [each for each in connection.execute_wrappers if each is not watch]


@pytest.fixture
def app(clock, database, work_root):
    """Bridge's HTTP app, with new pool threads (so new, watched connections) and the fake clock."""
    served = PooledDjango(get_wsgi_application(), workers=1, clock=clock)
    yield served
    served.pool.shutdown(wait=True)


async def ask(app: PooledDjango, method: str, host: str) -> tuple[int, dict[bytes, bytes], bytes]:
    scope = {
        **ASGI_HTTP_SCOPE,
        "method": method,
        "path": "/health",
        "raw_path": b"/health",
        "headers": [(b"host", host.encode("latin-1"))],
    }
    communicator = ApplicationCommunicator(app, scope)
    await communicator.send_input({"type": "http.request", "body": b""})
    start = await communicator.receive_output(30)
    body = (await communicator.receive_output(30))["body"]
    await communicator.wait(30)
    return start["status"], dict(start["headers"]), body


def get(app: PooledDjango, method: str = "GET", host: str = ALLOWED_HOST) -> tuple[int, dict[bytes, bytes], bytes]:
    """One request, answered before it returns (with the fake clock standing, no refresh is left running)."""
    return asyncio.run(ask(app, method, host))


def pending(answer: tuple[int, dict, bytes]) -> int:
    return json.loads(answer[2])["pending_permissions"]


def test_a_change_shows_within_a_second_and_not_before_half_of_one(app, clock):
    before = pending(get(app))
    PermissionRequest.objects.create(task=make_task("say hi"), request_id="r1", tool_name="Bash")
    clock.now += 0.45
    assert pending(get(app)) == before, "a snapshot younger than half a second is served as it is"
    clock.now += 0.56
    assert pending(get(app)) == before + 1, "a snapshot over a second old was served"


def test_a_fresh_snapshot_answers_with_at_most_one_query(app, clock, database):
    get(app)  # the first request takes the snapshot: the view's queries
    assert database.queries > 1, "the watch sees the pool's queries"
    for _ in range(10):
        clock.now += 0.04
        before = database.queries
        status, _, _ = get(app)
        assert status == 200 and database.queries - before <= 1, f"{database.queries - before} queries"


def test_the_fast_answer_is_the_views_field_by_field(app):
    make_task("say hi")
    status, headers, body = get(app)
    view = Client().get("/health", HTTP_HOST=ALLOWED_HOST)
    fast, fresh = json.loads(body), view.json()
    assert status == view.status_code == 200
    assert sorted(fast) == sorted(fresh)
    for field in fresh:
        assert fast[field] == fresh[field], field
    assert headers[b"content-type"].decode() == view["Content-Type"]
    head_status, head_headers, _ = get(app, "HEAD")
    assert (head_status, head_headers) == (status, headers), "HEAD: GET's status and headers (Twisted drops the body)"
    assert Client().head("/health", HTTP_HOST=ALLOWED_HOST).status_code == 200


HOSTS = st.one_of(
    st.sampled_from(["127.0.0.1", "localhost", "[::1]", "127.0.0.1:8800", "localhost:1", "evil.example", "", ":80"]),
    st.text(st.sampled_from("abc.-:[]1_@ "), max_size=12),
)


@hypothesis_settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(host=HOSTS)
def test_a_host_django_refuses_is_refused_the_same_while_the_snapshot_is_fresh(app, host):
    assert get(app)[0] == 200  # a fresh snapshot, which a refused Host must not get
    status, _, body = get(app, host=host)
    view = Client().get("/health", HTTP_HOST=host)
    assert status == view.status_code, host
    if status == 400:
        assert json.loads(body) == view.json() and view.json()["code"] == "bad_request"


def test_an_unreachable_database_is_a_503_within_a_second_in_the_views_shape(app, clock, database):
    healthy = json.loads(get(app)[2])
    database.down = True
    clock.now += 0.45
    assert get(app)[0] == 200, "the snapshot, taken before, is served as it is"
    clock.now += 0.56
    status, _, body = get(app)
    with connection.execute_wrapper(database):
        view = Client().get("/health", HTTP_HOST=ALLOWED_HOST)
    assert status == view.status_code == 503
    assert json.loads(body) == view.json() and sorted(view.json()) == sorted(healthy)
    assert view.json()["status"] == "degraded" and view.json()["database"] == "error (details in the server log)"


# --- through runbridge ---------------------------------------------------------------------------------------------


def test_runbridge_answers_get_and_head_from_the_snapshot_and_refuses_a_bad_host(tmp_path, fake_agent):
    with BridgeServer(tmp_path / "bridge", "http://127.0.0.1:9", claude=str(fake_agent)) as bridge:
        got = bridge.client.get("/health")
        head = bridge.client.head("/health")
        refused = bridge.client.get("/health", headers={"Host": "evil.example"})
    assert got.status_code == 200 and got.json()["database"] == "ok"
    assert head.status_code == 200 and head.content == b""
    assert head.headers["content-length"] == got.headers["content-length"]
    assert refused.status_code == 400 and refused.json()["code"] == "bad_request", refused.text
    assert "evil.example" in refused.json()["error"]
