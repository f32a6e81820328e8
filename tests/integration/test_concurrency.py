"""Bridge under concurrent load, raced with real processes against one database: an identical job is queued once,
the queue cap is exact, and a burst is answered in JSON (200, 429, or 503 database_busy with Retry-After), never a 500.

Runs on the database of the run (SQLite by default, PostgreSQL with DATABASE_URL); on SQLite the last test runs this
file again on PostgreSQL, where the races are real (several connections writing at once).
"""

import asyncio
import copy
import dataclasses
import json
import os
import queue
import sqlite3
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import httpx
import pytest
from django.contrib.sessions.middleware import SessionMiddleware
from django.db import OperationalError, connection, transaction
from django.test import AsyncClient, Client
from django.utils import timezone
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from jobs import actions
from jobs.actions import permissions, runs
from jobs.actions.workers import serves
from jobs.core.errors import Conflict
from jobs.core.vocabulary import Agent, DecidedVia, PermissionStatus, Status
from jobs.mcp import replies
from jobs.models import AgentSession, PermissionRequest, Task, Worker
from tests.support import REPO, WebProcess, at_once, database_url, make_task, postgres_or_skip, rerun_on_postgres

RACERS = 8
ROUNDS = 20
BURST = 200
MAX_QUEUED = 50
SERVER_POOL = 5
SERVER_APP = "bridge-burst-test-server"

# One racer: Django set up on the test database, then one create_or_join_task per line on stdin, at the time it names.
RACER = r"""
import json, sys, time
import django
django.setup()
from django.db import connection
from jobs import actions
print("ready", flush=True)
for line in sys.stdin:
    job = json.loads(line)
    time.sleep(max(0.0, job["at"] - time.time()))
    spec = actions.TaskSpec(prompt=job["prompt"], cwd=job["cwd"], options={"model": "m", "allowed_tools": ["Read"]})
    try:
        task, created = actions.create_or_join_task(spec)
        print(json.dumps({"id": str(task.public_id), "created": created}), flush=True)
    except Exception as exc:
        print(json.dumps({"error": f"{type(exc).__name__}: {exc}"}), flush=True)
connection.close()
"""


def child_env(settings, tmp_path: Path, work_root: Path, **extra: str) -> dict[str, str]:
    """A Bridge process on this test's database, with its own data dir and no outer Redis."""
    data = tmp_path / "child-data"
    data.mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "DJANGO_SECRET_KEY")}
    env.update(
        {
            "DATABASE_URL": database_url(settings.DATABASES["default"]),
            "DJANGO_SETTINGS_MODULE": "bridge.settings",
            "BRIDGE_DATA_DIR": str(data),
            "BRIDGE_ALLOWED_ROOTS": str(work_root),
            "PYTHONUNBUFFERED": "1",
            **extra,
        }
    )
    return env


class Lines:
    """A child's stdout lines, read by a thread, so the test can wait for them with a deadline."""

    def __init__(self, proc: subprocess.Popen) -> None:
        self.lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, args=(proc,), daemon=True).start()

    def _read(self, proc: subprocess.Popen) -> None:
        for line in proc.stdout:
            self.lines.put(line.rstrip("\n"))

    def next(self, timeout: float) -> str:
        return self.lines.get(timeout=timeout)


@pytest.fixture
def racers(settings, tmp_path, work_root):
    env = child_env(settings, tmp_path, work_root, BRIDGE_DB_POOL_SIZE="2")
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", RACER],
            cwd=REPO,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        for _ in range(RACERS)
    ]
    outputs = [Lines(proc) for proc in procs]
    try:
        for out in outputs:
            assert out.next(timeout=60) == "ready"
        yield list(zip(procs, outputs, strict=True))
    finally:
        for proc in procs:
            proc.stdin.close()
        for proc in procs:
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)


@pytest.mark.django_db(transaction=True)
def test_identical_jobs_from_many_processes_at_once_make_one_task(racers, work_root):
    started = time.monotonic()
    for round_no in range(ROUNDS):
        prompt = f"race round {round_no}"
        job = json.dumps({"prompt": prompt, "cwd": str(work_root), "at": time.time() + 0.15}) + "\n"
        for proc, _ in racers:
            proc.stdin.write(job)
            proc.stdin.flush()
        answers = [json.loads(out.next(timeout=30)) for _, out in racers]
        assert not [a for a in answers if "error" in a], f"round {round_no}: {answers}"
        assert len({a["id"] for a in answers}) == 1, f"round {round_no}: several tasks for one job: {answers}"
        assert sum(a["created"] for a in answers) == 1, f"round {round_no}: {answers}"
        assert Task.objects.filter(prompt=prompt).count() == 1
    assert Task.objects.exclude(dedupe_key="").values("dedupe_key").distinct().count() == ROUNDS
    print(f"\n{RACERS} processes x {ROUNDS} rounds on {connection.vendor}: {time.monotonic() - started:.1f} s")


@pytest.mark.django_db(transaction=True)
def test_only_create_or_join_dedupes_and_an_ended_task_frees_its_key(work_root):
    spec = actions.TaskSpec(prompt="same job", cwd=str(work_root))
    plain = [actions.create_task(spec), actions.create_task(spec)]
    assert plain[0].pk != plain[1].pk and plain[0].dedupe_key == plain[1].dedupe_key == ""
    first, created = actions.create_or_join_task(spec)
    assert created and first.pk not in {t.pk for t in plain}, "a task from a plain create is never joined"
    assert len(first.dedupe_key) == 64
    assert actions.create_or_join_task(spec) == (first, False)
    reordered = actions.TaskSpec(prompt="same job", cwd=str(work_root), options={"max_turns": 3, "model": "m"})
    other, created = actions.create_or_join_task(reordered)
    assert created and other.pk != first.pk, "other options are another job"
    assert actions.create_or_join_task(
        actions.TaskSpec(prompt="same job", cwd=str(work_root), options={"model": "m", "max_turns": 3})
    ) == (other, False), "the options' order does not matter"
    actions.request_cancel(first)
    again, created = actions.create_or_join_task(spec)
    assert created and again.pk != first.pk, "an ended task is not joined: the job is queued anew"


@pytest.mark.django_db(transaction=True)
def test_the_same_job_for_another_target_is_another_job(work_root):
    on = {target: actions.TaskSpec(prompt="same job", cwd=str(work_root), target=target) for target in ("a", "b", "")}
    tasks = {target: actions.create_or_join_task(spec) for target, spec in on.items()}
    assert all(created for _, created in tasks.values())
    assert len({task.pk for task, _ in tasks.values()}) == 3 and [t.target for t, _ in tasks.values()] == ["a", "b", ""]
    assert actions.create_or_join_task(on["a"]) == (tasks["a"][0], False), "the same job on the same target is joined"


def ran_session_on(worker_name: str | None, work_root, *, other_machines: bool = True) -> Task:
    """A finished task whose agent session ran on a supervisor registered here (named, or by default host:pid:…),
    while a supervisor on another machine was live too (unless not `other_machines`)."""
    if other_machines:
        another_machine(name="peer-elsewhere")
    worker = actions.register_worker(1, name=worker_name, labels=[])
    task = actions.create_task(actions.TaskSpec(prompt="first", cwd=str(work_root)))
    session = AgentSession.objects.create(agent="claude", session_id=f"s-{worker.pk}", cwd=str(work_root))
    Task.objects.filter(pk=task.pk).update(worker=worker, session=session, status=Status.DONE)
    actions.stop_worker(worker)
    return actions.get_task(task.public_id)


def another_machine(name: str) -> Worker:
    """A supervisor row as one on another machine (its own data dir) leaves it."""
    return Worker.objects.create(
        name=name,
        host=f"{name}-host",
        machine=f"{name}-machine",
        pid=1,
        process_create_time=0,
        capacity=1,
        heartbeat_at=timezone.now(),
    )


@pytest.mark.django_db(transaction=True)
def test_on_one_machine_a_follow_up_is_not_pinned_to_a_host_name_the_network_may_change(work_root):
    """With no other machine seen lately, a follow-up may run on any supervisor: here one that registered after the
    laptop's host name changed. Once another machine is seen, it is pinned again."""
    task = ran_session_on(None, work_root, other_machines=False)
    Worker.objects.filter(pk=task.worker.pk).update(host="old-name.local", name="old-name.local:4242:abcdef")
    follow_up = actions.continue_task(task, "more")
    renamed = actions.register_worker(1, name=None, labels=[])
    assert follow_up.target == "" and serves(renamed, follow_up.cwd, follow_up.target, follow_up.agent)
    another_machine(name="desk")
    assert actions.continue_task(task, "again").target == "old-name.local"


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("name", ["gpu-box", None])
def test_a_follow_up_runs_where_its_session_ran_unless_told_otherwise(work_root, name):
    """The agent keeps its session on the host that ran it: a follow-up is pinned to that supervisor's declared name,
    or to its host when it has only the per-process default name; a target the caller names wins."""
    task = ran_session_on(name, work_root)
    home = name or task.worker.host
    assert actions.continue_task(task, "more").target == home
    assert actions.continue_task(task, "more", target="elsewhere").target == "elsewhere"
    resumed = actions.TaskSpec(prompt="again", cwd=str(work_root), resume_session_id=task.session.session_id)
    assert actions.create_task(resumed).target == home
    joined, created = actions.create_or_join_task(resumed)
    assert created and joined.target == home and actions.create_or_join_task(resumed) == (joined, False)
    fresh = actions.create_task(actions.TaskSpec(prompt="unrelated", cwd=str(work_root)))
    assert fresh.target == "", "a task that resumes nothing may run anywhere"


# --- a burst over HTTP against a real server ----------------------------------------------------------------------


@pytest.fixture
def bridge_server(settings, tmp_path, work_root):
    """`runbridge --no-supervisor` on the test database, a queue of 50, a pool of 5 (enough writers at once to overshoot
    the cap without its lock, few enough that a burst waits for connections) and a short wait for the database."""
    env = child_env(
        settings,
        tmp_path,
        work_root,
        BRIDGE_MAX_QUEUED=str(MAX_QUEUED),
        BRIDGE_DB_POOL_SIZE=str(SERVER_POOL),
        BRIDGE_DB_POOL_TIMEOUT_S="0.5",
        BRIDGE_DB_RETRY_AFTER_S="1",
        BRIDGE_WEB_PROCESSES="1",  # the pool is per process: one process, so its pool is the server's
        PGAPPNAME=SERVER_APP,  # its PostgreSQL connections are counted by this name
    )
    server = WebProcess(env, tmp_path / "runbridge.log")
    try:
        yield server.url, server.log_path
    finally:
        server.stop()


async def create_until_answered(client: httpx.AsyncClient, body: dict, seen: list[httpx.Response]) -> httpx.Response:
    """What a good client does: on 503, wait as long as Retry-After says, then send the same request again."""
    for _ in range(15):
        response = await client.post("/v1/task/create", json=body)
        seen.append(response)
        if response.status_code != 503:
            return response
        await asyncio.sleep(float(response.headers.get("Retry-After", "1")))
    return response


async def burst(url: str, token: str, cwd: str) -> tuple[list[httpx.Response], list[httpx.Response]]:
    seen: list[httpx.Response] = []
    limits = httpx.Limits(max_connections=BURST, max_keepalive_connections=BURST)
    headers = {"Authorization": f"Bearer {token}"}
    async with httpx.AsyncClient(base_url=url, headers=headers, limits=limits, timeout=30, trust_env=False) as client:
        jobs = [create_until_answered(client, {"prompt": f"burst {i}", "cwd": cwd}, seen) for i in range(BURST)]
        final = await asyncio.wait_for(asyncio.gather(*jobs), timeout=45)
    return final, seen


class ServerConnections:
    """Samples how many PostgreSQL connections the server holds, on a thread of its own, until stopped."""

    def __init__(self) -> None:
        self.most = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        try:
            while not self._stop.wait(0.02):
                with connection.cursor() as cursor:
                    cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", [SERVER_APP])
                    self.most = max(self.most, cursor.fetchone()[0])
        finally:
            connection.close()

    def __enter__(self) -> "ServerConnections":
        if connection.vendor == "postgresql":
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(5)


@pytest.mark.django_db(transaction=True)
def test_a_burst_of_creates_is_answered_in_json_and_fills_the_queue_exactly(bridge_server, work_root):
    url, log_path = bridge_server
    token = actions.create_token("burst")[1]
    started = time.monotonic()
    with ServerConnections() as server_connections:
        final, seen = asyncio.run(burst(url, token, str(work_root)))
    took = time.monotonic() - started
    assert server_connections.most <= SERVER_POOL, "the server held more connections than its pool has"
    after = httpx.get(f"{url}/v1/tasks", headers={"Authorization": f"Bearer {token}"}, timeout=10, trust_env=False)
    assert after.status_code == 200, "every connection went back to the pool: the server still serves"
    statuses = [r.status_code for r in seen]
    for response in seen:
        assert response.status_code in (200, 429, 503), f"{response.status_code}: {response.text[:300]}"
        assert response.headers["content-type"].startswith("application/json"), response.text[:300]
        body = response.json()
        if response.status_code == 503:
            assert body["code"] == "database_busy" and "database is busy" in body["error"], body
            assert response.headers["Retry-After"] == "1"
        elif response.status_code == 429:
            assert body["code"] == "queue_full", body
    assert [r.status_code for r in final].count(200) == MAX_QUEUED
    assert [r.status_code for r in final].count(429) == BURST - MAX_QUEUED
    assert Task.objects.filter(status=Status.QUEUED).count() == MAX_QUEUED
    assert "Traceback" not in log_path.read_text(errors="replace")
    print(
        f"\n{BURST} creates on {connection.vendor} in {took:.1f} s, {len(seen)} answers: "
        f"{statuses.count(200)} x 200, {statuses.count(429)} x 429, {statuses.count(503)} x 503"
        + (f"; at most {server_connections.most} connections" if connection.vendor == "postgresql" else "")
    )


# --- the answer to a busy database, on every interface ------------------------------------------------------------


def busy(message: str = "database is locked") -> OperationalError:
    return OperationalError(message)


def raising(error: Exception):
    """A stand-in for a function that touches the database, failing as a busy one does."""

    def fail(*args, **kwargs):
        raise error

    return fail


def assert_busy_answer(response, settings) -> None:
    assert response.status_code == 503, response.content[:300]
    assert response["Content-Type"].startswith("application/json")
    assert response["Retry-After"] == str(settings.BRIDGE_DB_RETRY_AFTER_S)
    body = response.json()
    assert body["code"] == "database_busy" and "database is busy" in body["error"]
    assert body["retry_after_s"] == settings.BRIDGE_DB_RETRY_AFTER_S


def pool_timeout() -> OperationalError:
    """What Django raises when no pooled connection came free: its OperationalError, from psycopg_pool's."""
    psycopg_pool = pytest.importorskip("psycopg_pool")
    try:
        try:
            raise psycopg_pool.PoolTimeout("couldn't get a connection after 5.00 sec")
        except psycopg_pool.PoolTimeout as exc:
            raise OperationalError(str(exc)) from exc
    except OperationalError as wrapped:
        return wrapped


@pytest.mark.django_db
@pytest.mark.parametrize(
    "error",
    [
        busy(),
        busy("connection failed: FATAL:  sorry, too many clients already"),
        busy("terminating connection due to administrator command"),
        busy("server closed the connection unexpectedly\n\tThis probably means the server terminated abnormally"),
        pytest.param("pool", id="pool-timeout"),
    ],
)
def test_rest_answers_a_busy_database_with_503_json(error, settings, monkeypatch):
    error = pool_timeout() if error == "pool" else error
    monkeypatch.setattr("jobs.web.auth.authenticate", raising(error))
    assert_busy_answer(Client().get("/v1/tasks"), settings)
    assert_busy_answer(Client().post("/v1/task/create", {}, content_type="application/json"), settings)


@pytest.mark.django_db
def test_sse_and_pages_answer_a_busy_database_with_503_json(settings, monkeypatch, django_user_model):
    monkeypatch.setattr("jobs.web.auth.authenticate", raising(busy()))
    assert_busy_answer(Client().get("/v1/task/output/stream", {"task_id": "x"}), settings)
    # through Django's ASGI handler too, which runs the sync-only middleware chain adapted
    assert_busy_answer(asyncio.run(AsyncClient().get("/v1/task/output/stream", {"task_id": "x"})), settings)
    assert_busy_answer(asyncio.run(AsyncClient().get("/v1/tasks")), settings)
    client = Client()
    client.force_login(django_user_model.objects.create_user("ann"))
    monkeypatch.setattr("jobs.actions.settle_running_tasks", raising(busy()))
    assert_busy_answer(client.get("/"), settings)


@pytest.mark.django_db
def test_a_busy_database_in_a_middleware_is_503_too(settings, monkeypatch):
    """Raised after the view (a session being saved): Django has made it a 500 already; it is replaced."""

    monkeypatch.setattr(SessionMiddleware, "process_response", raising(busy()))
    assert_busy_answer(Client(raise_request_exception=False).get("/login/"), settings)


@pytest.mark.django_db
def test_other_database_errors_stay_internal_errors(monkeypatch):
    monkeypatch.setattr("jobs.web.auth.authenticate", raising(busy("no such table: x")))
    client = Client(raise_request_exception=False)
    for path in ("/v1/tasks", "/v1/task/output/stream?task_id=x"):
        response = client.get(path)
        assert response.status_code == 500 and "Retry-After" not in response
        assert response.json()["code"] == "internal_error", "a bug is answered in the API's shape, never HTML"


def request_in_new_thread(token: str, send) -> tuple[object, float]:
    """`send(client)` on a thread of its own, so it needs a database connection of its own, as a server's requests do.
    Returns the response and how long it took."""
    result: list = []

    def run() -> None:
        started = time.monotonic()
        try:
            result.append((send(Client(HTTP_AUTHORIZATION=f"Bearer {token}")), time.monotonic() - started))
        finally:
            connection.close()

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(60)
    assert result, "the request did not finish"
    return result[0]


@pytest.mark.django_db(transaction=True)
def test_a_request_that_gets_no_pooled_connection_in_time_is_503(settings, monkeypatch):
    if connection.vendor != "postgresql":
        pytest.skip("the connection pool is PostgreSQL's")
    psycopg_pool = pytest.importorskip("psycopg_pool")
    token = actions.create_token("pool")[1]
    pool = connection.pool
    monkeypatch.setattr(pool, "timeout", 0.3)
    held = []
    try:
        while True:  # take every connection the pool has, as a burst would
            held.append(pool.getconn(timeout=0.2))
    except psycopg_pool.PoolTimeout:
        pass
    try:
        response, took = request_in_new_thread(token, lambda client: client.get("/v1/tasks"))
    finally:
        for conn in held:
            pool.putconn(conn)
    assert_busy_answer(response, settings)
    assert took < 3
    response, _ = request_in_new_thread(token, lambda client: client.get("/v1/tasks"))
    assert response.status_code == 200, "connections back in the pool: served again"


@pytest.mark.django_db(transaction=True)
def test_a_web_request_waits_briefly_for_sqlites_write_lock(settings, work_root):
    if connection.vendor != "sqlite":
        pytest.skip("SQLite's write lock")
    settings.BRIDGE_DB_POOL_TIMEOUT_S = 0.3
    token = actions.create_token("lock")[1]
    holder = sqlite3.connect(settings.DATABASES["default"]["NAME"], timeout=0, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # another writer holds the lock (the supervisors' busy timeout is 20 s)
    try:
        response, took = request_in_new_thread(
            token, lambda client: client.post("/v1/task/create", {"prompt": "x"}, content_type="application/json")
        )
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert_busy_answer(response, settings)
    assert took < 5, f"answered after {took:.1f} s"
    assert not Task.objects.exists(), "nothing was done"


# --- races a single SQLite writer hides: dedupe, decisions, claims -------------------------------------------------

JOB_TEXT = st.text(st.characters(codec="utf-8", exclude_characters="\x00"), min_size=1, max_size=200).filter(str.strip)


@st.composite
def identical_jobs(draw, cwds: list[str], target: str) -> actions.TaskSpec:
    """One job as a planner may send it: any agent, prompt, cwd, permission mode, options and target (this one or
    none)."""
    agent = draw(st.sampled_from(list(Agent)))
    names = st.lists(st.sampled_from(["Read", "Bash", "Edit", "web", "code"]), max_size=3)
    options = {
        "model": draw(st.none() | st.sampled_from(["sonnet", "opus", "hermes-4"])),
        "max_turns": draw(st.none() | st.integers(1, 50)),
        ("allowed_tools" if agent == Agent.CLAUDE else "skills"): draw(st.none() | names),
    }
    return actions.TaskSpec(
        prompt=draw(JOB_TEXT),
        cwd=draw(st.sampled_from(cwds)),
        agent=agent,
        permission_mode=draw(st.sampled_from(["approve", "bypass"])),
        skip_permissions=draw(st.booleans()),
        options=options,
        target=draw(st.sampled_from(["", target])),
    )


@hypothesis_settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_an_identical_job_sent_while_its_twin_runs_joins_the_running_task(db, work_root, data):
    """create_or_join_task (README, `hermes_run`: "an identical one already running in the same cwd is joined, and
    the reply says so"; docs/architecture.md, "Database": one queued-or-running task per dedupe key): a planner that
    re-sends a job it lost track of while a supervisor already runs it gets that running task, not a second run and
    not an error. Every other dedupe test joined a queued twin; here the twin has been claimed first. Each example is
    rolled back, so generated jobs never meet another example's."""
    (work_root / "sub" / "dir").mkdir(parents=True, exist_ok=True)
    with transaction.atomic():
        worker = actions.register_worker(1, name="twin-runner", labels=[])
        spec = data.draw(identical_jobs([str(work_root), str(work_root / "sub" / "dir")], worker.name), label="job")
        first, created = actions.create_or_join_task(spec)
        assert created and first.dedupe_key
        running = actions.claim_next_task(worker)
        assert running is not None and running.pk == first.pk and running.status == Status.RUNNING
        joined, created = actions.create_or_join_task(dataclasses.replace(spec))  # the same job, sent again
        assert (joined.pk, created) == (first.pk, False), "the running twin is joined"
        assert (joined.status, joined.worker_id) == (Status.RUNNING, worker.pk)
        assert Task.objects.filter(dedupe_key=first.dedupe_key).count() == 1, "no second task was made"
        events = [(e.kind, e.data.get("status")) for e in actions.events_since(first)]
        assert events == [("status", Status.QUEUED), ("status", Status.RUNNING)], "joining wrote nothing"
        assert "already running" in replies.joined_existing(joined)
        transaction.set_rollback(True)


DECIDERS = st.lists(
    st.tuples(st.sampled_from(["allow", "deny"]), st.sampled_from([DecidedVia.API, DecidedVia.WEB, DecidedVia.MCP])),
    min_size=2,
    max_size=4,
)


def decide_at_once(task: Task, request_id: str, deciders: list[tuple[str, str]]) -> list[object]:
    """Each (behavior, via) answers `request_id` on a thread (and database connection) of its own, all let go at
    once by a barrier; returns what each got: the decided request, or the exception it raised."""
    barrier = threading.Barrier(len(deciders), timeout=10)
    outcomes: list[object] = [None] * len(deciders)

    def decide(i: int, behavior: str, via: str) -> None:
        try:
            mine = Task.objects.get(pk=task.pk)
            barrier.wait()
            outcomes[i] = actions.decide_permission(
                mine, behavior=behavior, request_id=request_id, by=f"decider-{i}", via=via
            )
        except Exception as exc:  # noqa: BLE001 - the test looks at what each decider got
            outcomes[i] = exc
        finally:
            connection.close()

    threads = [threading.Thread(target=decide, args=(i, *d)) for i, d in enumerate(deciders)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert not any(thread.is_alive() for thread in threads), "a decider never returned"
    return outcomes


@pytest.mark.parametrize("reads", ["live", "stale"])
@hypothesis_settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(deciders=DECIDERS)
def test_of_deciders_answering_one_request_at_once_exactly_one_wins(
    transactional_db, work_root, monkeypatch, reads, deciders
):
    """decide_permission ("Exactly one answer ever wins"; docs/architecture.md: a second answer is refused as
    already_decided, so a retry is safe): deciders let go at once on one pending request (threads, each with its own
    connection): one wins, every other gets Conflict already_decided, one permission_decision event is recorded, and
    the stored answer, the event and the one answer to pass on to the agent are the winner's.

    `live`: the code as it runs. SQLite's IMMEDIATE transactions make the deciders take turns there, so the read that
    finds the request already answered refuses the losers. `stale`: each decider acts on the request as it read it
    before any answer (what happens on PostgreSQL, where reads do not wait for a writer), so only the conditional
    UPDATE stands between them, on every database."""
    task = make_task("ask me something")
    assert actions.claim_next_task(actions.register_worker(1)).pk == task.pk
    perm = actions.record_permission_request(task, request_id="toolu_1", tool_name="Bash", tool_input={"command": "ls"})
    if reads == "stale":
        monkeypatch.setattr(permissions, "request_to_decide", lambda task, request_id: copy.copy(perm))
    outcomes = decide_at_once(task, "toolu_1", deciders)
    won = [i for i, got in enumerate(outcomes) if isinstance(got, PermissionRequest)]
    assert len(won) == 1, f"{len(won)} deciders won: {outcomes}"
    lost = [got for got in outcomes if not isinstance(got, PermissionRequest)]
    assert all(isinstance(got, Conflict) and got.code == "already_decided" for got in lost), outcomes
    if reads == "stale":  # refused by the conditional UPDATE, not by a read that saw the answer
        assert all("answered meanwhile" in got.message for got in lost), outcomes
    [winner] = won
    behavior, via = deciders[winner]
    answer = PermissionStatus.ALLOWED if behavior == "allow" else PermissionStatus.DENIED
    stored = PermissionRequest.objects.get(pk=perm.pk)
    assert (stored.status, stored.decided_by, stored.decided_via) == (answer, f"decider-{winner}", via)
    decisions = [e.data for e in actions.events_since(task) if e.kind == "permission_decision"]
    assert [(d["status"], d["decided_by"], d["decided_via"]) for d in decisions] == [
        (answer, f"decider-{winner}", via)
    ], "one decision event, the winner's"
    assert [p.pk for p in actions.undelivered_decisions(task)] == [perm.pk], "one answer for the agent"


def running_claims(task: Task) -> list[str]:
    """The supervisors named by the task's status events that say it started running: one per claim."""
    return [
        e.data["worker"] for e in actions.events_since(task) if e.kind == "status" and e.data["status"] == "running"
    ]


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    "then", [Status.RUNNING, Status.DONE, Status.FAILED, Status.CANCELLED, Status.TIMEOUT, Status.ORPHANED]
)
def test_a_task_one_supervisor_claimed_is_never_taken_by_another(work_root, monkeypatch, then):
    """The claim's conditional UPDATE (runs._take: `WHERE pk = … AND status = 'queued'`; docs/architecture.md, "Task
    status": exactly one writer wins, a terminal status never changes): supervisor B, which read the task as queued
    before A's claim (a stale read), cannot take it, whether A still runs it or it has ended since. The row keeps A,
    its status and start time, and one claim is recorded. B's claim through claim_next_task, given the same stale
    read, takes nothing and records nothing."""
    sup_a = actions.register_worker(1, name="sup-a", labels=[])
    sup_b = actions.register_worker(1, name="sup-b", labels=[])
    task = make_task("claimed once", cwd=str(work_root))
    assert actions.claim_next_task(sup_a).pk == task.pk
    if then == Status.ORPHANED:
        actions.mark_orphaned(task, "its supervisor died")
    elif then != Status.RUNNING:
        actions.finish_task(task, status=then)
    before = Task.objects.get(pk=task.pk)
    assert before.status == then
    assert runs._take(task.pk, sup_b) is False, "B took a task A had claimed"
    monkeypatch.setattr(runs, "_queued_for", lambda worker: [(task.pk, task.cwd, task.target, task.agent)])
    assert actions.claim_next_task(sup_b) is None
    after = Task.objects.get(pk=task.pk)
    assert (after.status, after.worker_id, after.started_at) == (then, sup_a.pk, before.started_at)
    assert running_claims(task) == ["sup-a"]


@pytest.mark.parametrize("reads", ["live", "stale"])
@hypothesis_settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), claimers=st.integers(2, 5), queued=st.integers(1, 12))
def test_concurrent_claimers_take_each_queued_task_exactly_once(
    transactional_db, work_root, monkeypatch, reads, data, claimers, queued
):
    """claim_next_task ("several supervisors never take one task"): N supervisors claiming at once (threads, each
    with its own connection, let go by a barrier) over M queued tasks take every task, each exactly once, and each
    task's row and its one claim event name the supervisor that got it.

    `live`: the claim as it runs (on SQLite the claimers take turns; on PostgreSQL they race, under SKIP LOCKED).
    `stale`: every claimer works from the queue as it was before anyone claimed, in an order of its own, so each tries
    every task and only the claim's conditional UPDATE decides who takes it."""
    workers = [actions.register_worker(1) for _ in range(claimers)]
    tasks = [make_task(f"claim me {i}", cwd=str(work_root)) for i in range(queued)]
    if reads == "stale":
        seen = [(t.pk, t.cwd, t.target, t.agent) for t in tasks]
        views = {w.pk: data.draw(st.permutations(seen), label=f"queue as {w.name} read it") for w in workers}
        monkeypatch.setattr(runs, "_queued_for", lambda worker: [views[worker.pk].pop()] if views[worker.pk] else [])
    claims: list[tuple[int, str]] = []
    misses: list[str] = []

    def claim(worker: Worker) -> None:
        for _ in range(queued if reads == "stale" else queued + 1):
            task = actions.claim_next_task(worker)
            if task is not None:
                claims.append((task.pk, worker.name))
                continue
            misses.append(worker.name)
            if reads == "live":
                return

    at_once(claim, workers)
    taken = Counter(pk for pk, _ in claims)
    assert sorted(taken) == sorted(t.pk for t in tasks) and set(taken.values()) == {1}, f"claims per task: {taken}"
    if reads == "stale":  # every claimer tried every task: all but one try at each lost to the conditional UPDATE
        assert len(misses) == (claimers - 1) * queued, (len(misses), claimers, queued)
    by = dict(claims)
    for task in tasks:
        row = Task.objects.select_related("worker").get(pk=task.pk)
        assert (row.status, row.worker.name) == (Status.RUNNING, by[task.pk])
        assert running_claims(task) == [by[task.pk]]


def test_the_races_on_postgresql():
    """Run this file again on PostgreSQL, where several connections really write at once."""
    if os.environ.get("DATABASE_URL", "").startswith("postgres"):
        pytest.skip("this run is on PostgreSQL already")
    run = rerun_on_postgres(postgres_or_skip(), "-s", __file__, timeout=300)
    print(run.stdout[-1500:])
