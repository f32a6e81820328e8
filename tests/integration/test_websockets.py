"""Websockets: replay from a seq then live events, no gap when the channel layer drops rings, auth and Origin."""

import asyncio
import json
import logging
import os
import random
import shutil
import socket
import subprocess
import sys
from datetime import datetime

import pytest
from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.db import connection
from django.test import AsyncClient, Client
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from bridge.asgi import application
from bridge.settings import redis_channel_layer
from jobs import actions
from jobs.core import doorbell
from jobs.core.access import Caller
from jobs.core.hints import manage_command
from jobs.core.vocabulary import Status
from jobs.models import Task
from jobs.web.consumers import PROMPT_HEAD, TaskListConsumer
from tests.support import make_task, skip_or_fail

pytestmark = pytest.mark.django_db(transaction=True)
HOST = (b"host", b"127.0.0.1:8800")


def run(coroutine_function):
    """pytest has no asyncio plugin here: run one async test body on a fresh loop."""
    return async_to_sync(coroutine_function)()


@pytest.fixture
def token(transactional_db) -> str:
    return actions.create_token("ws-test")[1]


def communicator(path: str, *headers: tuple[bytes, bytes]) -> WebsocketCommunicator:
    return WebsocketCommunicator(application, path, headers=[HOST, *headers])


def bearer(token: str) -> tuple[bytes, bytes]:
    return (b"authorization", f"Bearer {token}".encode())


async def receive_events(ws: WebsocketCommunicator, count: int, timeout: float = 10) -> list[dict]:
    events = []
    while len(events) < count:
        message = await ws.receive_json_from(timeout=timeout)
        if message["type"] == "event":
            events.append(message)
    return events


async def drain(ws: WebsocketCommunicator, quiet_s: float = 0.5) -> list[dict]:
    """Everything the socket sends until it has been quiet for quiet_s (without timing out the consumer)."""
    messages = []
    while not await ws.receive_nothing(timeout=quiet_s):
        messages.append(await ws.receive_json_from(timeout=10))
    return messages


def append_texts(task, texts: list[str]) -> int:
    return actions.append_events(task, [("text", {"text": t}) for t in texts])


def test_replays_after_the_given_seq_then_streams_live(work_root, token):
    task = make_task("say hi")
    append_texts(task, [f"line {i}" for i in range(2, 11)])  # seqs 2..10 (1 is the queued status)

    async def body():
        ws = communicator(f"/ws/tasks/{task.public_id}/?since=4", bearer(token))
        connected, _ = await ws.connect(timeout=10)
        assert connected
        replayed = await receive_events(ws, 6)
        assert [e["seq"] for e in replayed] == [5, 6, 7, 8, 9, 10]
        assert replayed[0]["data"] == {"text": "line 5"}
        await database_sync_to_async(append_texts)(task, ["live 11", "live 12"])
        live = await receive_events(ws, 2)
        assert [(e["seq"], e["data"]["text"]) for e in live] == [(11, "live 11"), (12, "live 12")]
        await ws.disconnect()

    run(body)


def test_a_finished_task_replays_everything_and_ends(work_root, token):
    task = make_task("say hi")
    append_texts(task, ["a", "b"])
    actions.request_cancel(task, reason="test")

    async def body():
        ws = communicator(f"/ws/tasks/{task.public_id}/", bearer(token))
        assert (await ws.connect(timeout=10))[0]
        messages = []
        while not messages or messages[-1]["type"] != "end":
            messages.append(await ws.receive_json_from(timeout=10))
        seqs = [m["seq"] for m in messages if m["type"] == "event"]
        assert seqs == [1, 2, 3, 4]
        state = [m for m in messages if m["type"] == "state"][-1]
        assert state["status"] == "cancelled" and not state["has_session"]
        assert messages[-1] == {"type": "end", "status": "cancelled", "last_seq": 4}
        assert (await ws.receive_output(timeout=10))["type"] == "websocket.close"

    run(body)


def test_no_event_is_lost_when_the_channel_layer_drops_rings(work_root, token, settings, monkeypatch):
    """Rings come only through a layer with room for 2 messages, 5 per write: most are dropped, yet every event
    arrives, in order, once. (The test rings the layer itself, on its own loop, as another process would.)"""
    settings.CHANNEL_LAYERS = {
        "default": {"BACKEND": "channels.layers.InMemoryChannelLayer", "CONFIG": {"capacity": 2}}
    }
    settings.BRIDGE_POLL_S = 0.2
    monkeypatch.setattr(doorbell, "layer_spans_processes", lambda: True)  # the socket listens on the layer
    monkeypatch.setattr(doorbell, "ring_now", lambda key: None)  # no in-process shortcut
    monkeypatch.setattr(doorbell, "announce", lambda key: None)  # the test rings the layer itself, below
    layer = doorbell.get_channel_layer()
    task = make_task("burst")
    group = doorbell.group_name(str(task.public_id))
    bursts, per_burst, rings_per_burst = 200, 3, 5
    dropped = 0

    async def body():
        nonlocal dropped
        ws = communicator(f"/ws/tasks/{task.public_id}/?since=1", bearer(token))
        assert (await ws.connect(timeout=10))[0]
        for i in range(bursts):
            await database_sync_to_async(append_texts)(task, [f"{i}.{j}" for j in range(per_burst)])
            for _ in range(rings_per_burst):
                queued = sum(q.qsize() for q in layer.channels.values())
                await layer.group_send(group, {"type": doorbell.RING_MESSAGE_TYPE})
                dropped += sum(q.qsize() for q in layer.channels.values()) == queued
        events = await receive_events(ws, bursts * per_burst, timeout=20)
        assert [e["seq"] for e in events] == list(range(2, 2 + bursts * per_burst))
        assert [e["data"]["text"] for e in events[:4]] == ["0.0", "0.1", "0.2", "1.0"]
        assert "event" not in [m["type"] for m in await drain(ws)], "an event came twice"
        await ws.disconnect()

    run(body)
    assert dropped > bursts, f"only {dropped} rings were dropped: the test must overflow the layer to prove anything"


@pytest.mark.parametrize(
    ("credentials", "words"),
    [
        ([], "authentication required"),
        ([(b"authorization", b"Bearer brg_not-a-real-token-at-all-xxxxxxxx")], "no such token"),
    ],
)
def test_no_session_or_token_is_refused_in_words(work_root, credentials, words):
    """The same words as REST's 401: what was wrong with what was sent, and the command that makes a token."""
    task = make_task("say hi")

    async def body():
        for path in (f"/ws/tasks/{task.public_id}/", "/ws/tasks/"):
            ws = communicator(path, *credentials)
            assert (await ws.connect(timeout=10))[0]
            message = await ws.receive_json_from(timeout=10)
            assert message["type"] == "error" and words in message["message"]
            assert manage_command("token", "create", "NAME") in message["message"]
            assert message["code"] == "unauthenticated"
            assert (await ws.receive_output(timeout=10))["code"] == 4401

    run(body)


def test_a_logged_in_session_is_accepted(work_root, django_user_model):
    task = make_task("say hi")
    client = Client()
    client.force_login(django_user_model.objects.create_user("alice"))
    cookie = f"sessionid={client.cookies['sessionid'].value}".encode()

    async def body():
        ws = communicator(f"/ws/tasks/{task.public_id}/", (b"cookie", cookie), (b"origin", b"http://127.0.0.1:8800"))
        assert (await ws.connect(timeout=10))[0]
        first = await ws.receive_json_from(timeout=10)
        assert first["type"] == "event" and first["seq"] == 1
        await ws.disconnect()

    run(body)


def test_a_page_on_another_origin_cannot_open_the_socket(work_root, token):
    task = make_task("say hi")

    async def body():
        for origin in (b"http://evil.example", b"http://127.0.0.1:9999", b"null"):
            ws = communicator(f"/ws/tasks/{task.public_id}/", bearer(token), (b"origin", origin))
            connected, code = await ws.connect(timeout=10)
            assert not connected, origin
        ws = communicator(f"/ws/tasks/{task.public_id}/", bearer(token), (b"origin", b"http://127.0.0.1:8800"))
        assert (await ws.connect(timeout=10))[0]
        await ws.disconnect()
        rebound = WebsocketCommunicator(
            application,
            f"/ws/tasks/{task.public_id}/",
            headers=[(b"host", b"evil.example:8800"), (b"origin", b"http://evil.example:8800"), bearer(token)],
        )
        assert not (await rebound.connect())[0], "a Host outside ALLOWED_HOSTS is refused (DNS rebinding)"

    run(body)


@pytest.mark.parametrize(
    "path, code, words",
    [
        ("/ws/tasks/{task}/?since=-1", 4400, "since must be a whole number"),
        ("/ws/tasks/{task}/?since=abc", 4400, "since must be a whole number"),
        ("/ws/tasks/?since=x", 4400, "since must be a whole number"),
        ("/ws/tasks/0b4f8e2c-0000-4000-8000-000000000000/", 4404, "no task"),
        ("/ws/tasks/not-a-uuid/", 4404, "task ids look like"),
    ],
)
def test_bad_seq_or_unknown_task_is_refused_in_words(work_root, token, path, code, words):
    task = make_task("say hi")

    async def body():
        ws = communicator(path.format(task=task.public_id), bearer(token))
        assert (await ws.connect(timeout=10))[0]
        message = await ws.receive_json_from(timeout=10)
        assert message["type"] == "error" and words in message["message"], message
        assert message["code"] == {4400: "invalid_input", 4404: "no_such_task"}[code]
        assert (await ws.receive_output(timeout=10))["code"] == code

    run(body)


def test_the_task_list_follows_new_and_changed_tasks(work_root, token):
    old = make_task("an older task")
    cursor = actions.events_since(old)[-1].pk

    async def body():
        ws = communicator(f"/ws/tasks/?since={cursor}", bearer(token))
        assert (await ws.connect(timeout=10))[0]
        first = await ws.receive_json_from(timeout=10)  # at once: the counts and the cursor, rows or not
        assert (first["type"], first["cursor"], first["counts"]["queued"]) == ("tasks", cursor, 1)
        task = await database_sync_to_async(make_task)("a brand new task")
        message = await ws.receive_json_from(timeout=10)
        assert message["type"] == "tasks" and message["cursor"] > cursor
        row = {r["id"]: r for r in message["tasks"]}[str(task.public_id)]
        assert row["status"] == "queued"
        assert "a brand new task" in row["html"] and message["counts"]["queued"] == 2
        await database_sync_to_async(actions.request_cancel)(task)
        while True:  # the list may coalesce; wait for the row that says cancelled
            message = await ws.receive_json_from(timeout=10)
            rows = {r["id"]: r for r in message["tasks"]}
            if rows.get(str(task.public_id), {}).get("status") == "cancelled":
                break
        await ws.disconnect()

    run(body)


def test_the_task_list_without_a_cursor_starts_at_the_newest_event(work_root, token):
    """A page that shows no rows (every page's title count, static/bridge/notify.js) connects without `since`: its
    first message comes at once with the newest cursor and no rows, not every task there ever was."""
    old = make_task("an older task")
    newest = actions.events_since(old)[-1].pk

    async def body():
        ws = communicator("/ws/tasks/", bearer(token))
        assert (await ws.connect(timeout=10))[0]
        first = await ws.receive_json_from(timeout=10)
        assert (first["type"], first["cursor"], first["tasks"]) == ("tasks", newest, [])
        assert (first["pending_permissions"], first["pending"], first["counts"]["queued"]) == (0, [], 1)
        task = await database_sync_to_async(make_task)("a brand new task")
        message = await ws.receive_json_from(timeout=10)
        assert message["cursor"] > newest and str(task.public_id) in {row["id"] for row in message["tasks"]}
        await ws.disconnect()

    run(body)


def asking_task(prompt: str, cwd: str) -> Task:
    """A task that runs (on a supervisor this process registers) and waits for an answer about Bash."""
    task = make_task(prompt, cwd=cwd)
    Task.objects.filter(pk=task.pk).update(status=Status.RUNNING, worker=actions.register_worker(1))
    actions.record_permission_request(task, request_id="r1", tool_name="Bash", tool_input={"command": "ls"})
    return task


def test_the_task_list_names_the_requests_waiting_and_a_token_sees_only_its_roots(work_root, token):
    """What a notification of a request says (the task, the tool, the prompt's head, when it was asked), and of a
    task's end (its prompt's head, when it finished); a token limited to roots is told only of its tasks'
    requests, nor counts any other."""
    (work_root / "mine").mkdir()
    (work_root / "theirs").mkdir()
    mine = asking_task("x" * (PROMPT_HEAD + 50), str(work_root / "mine"))
    theirs = asking_task("their task", str(work_root / "theirs"))
    limited = actions.create_token("mine-only", "read", [str(work_root / "mine")])[1]

    async def first_message(credential: str) -> dict:
        ws = communicator("/ws/tasks/?since=0", bearer(credential))
        assert (await ws.connect(timeout=10))[0]
        message = await ws.receive_json_from(timeout=10)
        await ws.disconnect()
        return message

    async def body():
        everything = await first_message(token)
        asked = {(r["task_id"], r["tool"], r["prompt"], r["request_id"]) for r in everything["pending"]}
        assert asked == {
            (str(mine.public_id), "Bash", "x" * PROMPT_HEAD, "r1"),
            (str(theirs.public_id), "Bash", "their task", "r1"),
        }
        assert all(datetime.fromisoformat(r["asked_at"]) > mine.created_at for r in everything["pending"])
        assert everything["pending_permissions"] == 2
        rows = {row["id"]: row for row in everything["tasks"]}
        assert (rows[str(mine.public_id)]["prompt"], rows[str(mine.public_id)]["finished_at"]) == (
            "x" * PROMPT_HEAD,
            None,
        )
        only_mine = await first_message(limited)
        assert [r["task_id"] for r in only_mine["pending"]] == [str(mine.public_id)]
        # nor counted: neither the requests waiting elsewhere nor the tasks there
        assert only_mine["pending_permissions"] == 1, only_mine
        assert only_mine["counts"]["running"] == 1 and everything["counts"]["running"] == 2
        await database_sync_to_async(actions.decide_permission)(mine, behavior="allow")
        await database_sync_to_async(actions.finish_task)(mine, status=Status.DONE, exit_code=0)
        after = await first_message(token)
        assert [r["task_id"] for r in after["pending"]] == [str(theirs.public_id)]
        assert {row["id"]: row for row in after["tasks"]}[str(mine.public_id)]["finished_at"] is not None

    run(body)


@hypothesis_settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    prompt=st.text(
        st.characters(exclude_categories=("Cs",), exclude_characters="\x00"),
        min_size=PROMPT_HEAD - 10,
        max_size=2 * PROMPT_HEAD,
    ).filter(str.strip)  # a prompt of spaces alone is refused
)
def test_a_waiting_requests_prompt_head_is_its_first_characters_whatever_they_are(work_root, prompt):
    """The database cuts the prompt (so the list never reads a long one whole): by characters, as Python does, for
    any alphabet, astral characters and line breaks included."""
    task = asking_task(prompt, str(work_root))
    listing = TaskListConsumer()
    listing.caller = Caller(name="user:test")
    [named] = [r for r in listing.pending_requests() if r["task_id"] == str(task.public_id)]
    assert named["prompt"] == prompt[:PROMPT_HEAD]


# --- across processes: a separate writer reaches the socket through Redis ---------------------------------------

WRITER = """
import django, sys
django.setup()
from jobs import actions
task = actions.get_task(sys.argv[1])
for i in range(3):
    actions.append_events(task, [("text", {"text": f"from another process {i}"})])
"""


REDIS_URL = os.environ.get("BRIDGE_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")


@pytest.fixture
def redis_url(tmp_path):
    """The running Redis (as on CI), else a private redis-server, else skip (fail on CI)."""
    import redis

    try:
        redis.Redis.from_url(REDIS_URL, socket_connect_timeout=2).ping()
        yield REDIS_URL
        return
    except redis.RedisError:
        pass
    server = shutil.which("redis-server")
    if server is None:
        skip_or_fail(f"Redis is not reachable at {REDIS_URL} (set BRIDGE_TEST_REDIS_URL) and redis-server is missing")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [
            server,
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(tmp_path),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        for line in proc.stdout:
            if "Ready to accept connections" in line:
                break
        else:
            pytest.fail("redis-server did not start")
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        proc.terminate()
        proc.wait(10)


def test_a_separate_process_rings_through_redis(work_root, token, settings, redis_url):
    """The consumer's own poll is set to 60 s, so only a ring through Redis can deliver these events in time."""
    settings.CHANNEL_LAYERS = {
        "default": redis_channel_layer(redis_url)  # with the socket timeout a blocking read needs (redis-py 8)
    }
    settings.BRIDGE_POLL_S = 60
    task = make_task("say hi")
    env = {
        **os.environ,
        "REDIS_URL": redis_url,
        "DATABASE_URL": f"sqlite:///{connection.settings_dict['NAME']}",
        "DJANGO_SETTINGS_MODULE": "bridge.settings",
    }

    async def body():
        ws = communicator(f"/ws/tasks/{task.public_id}/?since=1", bearer(token))
        assert (await ws.connect(timeout=10))[0]
        writer = await asyncio.create_subprocess_exec(sys.executable, "-c", WRITER, str(task.public_id), env=env)
        assert await writer.wait() == 0
        events = await receive_events(ws, 3, timeout=10)
        assert [e["data"]["text"] for e in events] == [f"from another process {i}" for i in range(3)]
        await ws.disconnect()

    run(body)


# --- bad input before and after the handshake: an answer in words, never a 500 or a traceback ---------------------


def odd_paths(seed: int, count: int) -> list[str]:
    """Paths no route serves, generated: unknown words, deep nesting, odd characters, very long ones."""
    rng = random.Random(seed)
    alphabet = "abcxyz019-_.~%"
    paths = ["/ws/", "/ws", "/ws/tasks", "/ws/tasks/x/y/", "/ws/admin/", "/elsewhere/", "/ws/" + "a" * 5000 + "/"]
    for _ in range(count):
        parts = ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 12))) for _ in range(rng.randint(1, 4))]
        paths.append("/ws/" + "/".join(parts) + rng.choice(["", "/"]))
    return paths


def test_unknown_websocket_paths_are_refused_in_words(work_root, token, caplog):
    async def body():
        for path in odd_paths(seed=11, count=20):
            ws = communicator(path, bearer(token))
            assert (await ws.connect(timeout=10))[0], path
            message = await ws.receive_json_from(timeout=10)
            assert message["type"] == "error" and message["code"] == "no_such_socket", (path, message)
            assert (await ws.receive_output(timeout=10))["code"] == 4404

    run(body)
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], "a refusal is not an error in the log"


def odd_frames(seed: int, count: int) -> list[dict]:
    rng = random.Random(seed)
    frames = [{"text_data": "not json"}, {"text_data": "{"}, {"text_data": '{"type": "x"}'}, {"text_data": " "}]
    frames += [{"bytes_data": b"\x00\xff binary"}, {"bytes_data": b"\x00"}, {"text_data": "[" * 10000}]
    for _ in range(count):
        if rng.random() < 0.5:
            frames.append({"bytes_data": bytes(rng.randrange(256) for _ in range(rng.randint(1, 300)))})
        else:
            frames.append({"text_data": "".join(chr(rng.randint(32, 0x2FFF)) for _ in range(rng.randint(1, 300)))})
    return frames


def test_any_frame_a_client_sends_is_answered_and_the_socket_stays_open(work_root, token, caplog):
    task = make_task("say hi")

    async def body():
        ws = communicator(f"/ws/tasks/{task.public_id}/", bearer(token))
        assert (await ws.connect(timeout=10))[0]
        await drain(ws)
        for frame in odd_frames(seed=5, count=30):
            await ws.send_to(**frame)
            answer = await ws.receive_json_from(timeout=5)
            assert answer["type"] == "error" and answer["code"] == "read_only", (frame, answer)
        await ws.disconnect()

    run(body)
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], "no traceback for a client's odd frame"


@pytest.mark.parametrize("since", [4, 5, 50])
def test_the_end_reports_the_real_last_seq_whatever_since_said(work_root, token, since):
    """Issue 13.12: a `since` past the end was echoed back as `last_seq`; websocket and SSE both give the real one."""
    task = make_task("say hi")
    append_texts(task, ["a", "b"])
    actions.request_cancel(task, reason="test")  # seqs 1..4

    async def body():
        ws = communicator(f"/ws/tasks/{task.public_id}/?since={since}", bearer(token))
        assert (await ws.connect(timeout=10))[0]
        messages = []
        while not messages or messages[-1]["type"] != "end":
            messages.append(await ws.receive_json_from(timeout=10))
        assert messages[-1] == {"type": "end", "status": "cancelled", "last_seq": 4}
        assert not [m for m in messages if m["type"] == "event"]
        response = await AsyncClient().get(
            "/v1/task/output/stream", {"task_id": str(task.public_id), "since": since}, headers=auth_header(token)
        )
        stream = b"".join([chunk async for chunk in response.streaming_content]).decode()
        [end] = [json.loads(line[6:]) for line in stream.splitlines() if line.startswith('data: {"type": "end"')]
        assert end["last_seq"] == 4

    run(body)


def test_the_state_says_where_a_task_runs_or_why_it_waits(work_root, token):
    """Issue 10: the task's target, why a queued task waits (no live supervisor serves it) and, once claimed, the
    supervisor that runs it; a changed reason is sent without any new event."""
    task = make_task("say hi", target="gpu-box")

    async def body():
        ws = communicator(f"/ws/tasks/{task.public_id}/", bearer(token))
        assert (await ws.connect(timeout=10))[0]
        state = await next_state(ws, lambda s: s["wait_reason"])
        assert state["target"] == "gpu-box" and state["worker"] is None
        assert "no live supervisor is running" in state["wait_reason"]
        await database_sync_to_async(claim_by_a_new_worker)(task)
        state = await next_state(ws, lambda s: s["worker"])
        assert state["status"] == "running" and state["wait_reason"] == ""
        assert state["worker"] == {"name": "gpu-box", "host": socket.gethostname()}
        await ws.disconnect()

    run(body)


async def next_state(ws: WebsocketCommunicator, wanted, timeout: float = 10) -> dict:
    while True:
        message = await ws.receive_json_from(timeout=timeout)
        if message["type"] == "state" and wanted(message):
            return message


def claim_by_a_new_worker(task) -> None:
    worker = actions.register_worker(1, name="gpu-box")
    claimed = actions.claim_next_task(worker)
    assert claimed is not None and claimed.pk == task.pk


def auth_header(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def test_the_state_follows_questions_the_session_and_a_supervisor_that_died(work_root, token, settings):
    """The state's counters are read again only when they may have changed: the pending count after a permission
    event, the session id once linked; and a supervisor that dies without a word (it rings no more) is noticed
    when the socket's wait times out, as the task turns orphaned."""
    settings.BRIDGE_POLL_S = 0.1
    task = make_task("say hi")
    worker = actions.register_worker(1, name="mortal")
    assert actions.claim_next_task(worker).pk == task.pk

    def ask():
        actions.record_permission_request(task, request_id="r1", tool_name="Edit", tool_input={"file_path": "f"})

    def answer_and_link():
        actions.decide_permission(task, behavior="allow")
        actions.link_session(task, "the-agent-session")

    def die_silently():
        type(worker).objects.filter(pk=worker.pk).update(pid=worker.pid + 10_000_000)

    async def body():
        ws = communicator(f"/ws/tasks/{task.public_id}/", bearer(token))
        assert (await ws.connect(timeout=10))[0]
        state = await next_state(ws, lambda s: s["status"] == "running")
        assert state["pending_permissions"] == 0 and state["session_id"] is None
        await database_sync_to_async(ask)()
        assert (await next_state(ws, lambda s: s["pending_permissions"] == 1))["status"] == "running"
        await database_sync_to_async(answer_and_link)()
        state = await next_state(ws, lambda s: s["session_id"] is not None)
        assert state["session_id"] == "the-agent-session" and state["pending_permissions"] == 0
        await database_sync_to_async(die_silently)()
        state = await next_state(ws, lambda s: s["status"] == "orphaned")
        assert "mortal" in state["error"]
        await ws.disconnect()

    run(body)


def test_a_state_frame_is_sent_when_the_state_changes_not_after_every_batch(work_root, token):
    """Events carry their seqs, so a batch of events alone sends no state frame; a change the page shows does."""
    task = make_task("say hi")

    async def next_message(ws) -> dict:
        return await ws.receive_json_from(timeout=10)

    async def body():
        ws = communicator(f"/ws/tasks/{task.public_id}/", bearer(token))
        assert (await ws.connect(timeout=10))[0]
        assert [(await next_message(ws))["type"] for _ in range(2)] == ["event", "state"]
        for batch in range(5):
            await database_sync_to_async(append_texts)(task, [f"batch {batch} line {i}" for i in range(3)])
            assert [(await next_message(ws))["type"] for _ in range(3)] == ["event"] * 3
        await database_sync_to_async(actions.request_cancel)(task, "enough")
        message = await next_message(ws)
        while message["type"] == "event":
            message = await next_message(ws)
        assert message["type"] == "state" and message["status"] == "cancelled", "no state frame came before it"
        assert message["last_seq"] == 17  # queued, 15 lines, cancelled
        await ws.disconnect()

    run(body)
