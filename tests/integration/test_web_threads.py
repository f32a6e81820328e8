"""bridge/asgi.py: HTTP requests run on a fixed pool of threads that keep their database connections, one hand-off
each, with the request's body read whole (and no further than Django would take it); the SSE stream's coroutine
then streams from the event loop, until the task ends or its client leaves."""

import asyncio
import json
import threading

import pytest
from asgiref.testing import ApplicationCommunicator
from django.core.signals import request_started
from django.db.backends.signals import connection_created
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from jobs.actions import create_token
from jobs.models import Task
from jobs.web.webserver import read_body
from tests.support import ASGI_HTTP_SCOPE, make_task

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def token() -> str:
    return create_token("web")[1]


async def get(app, path: str, query: str, token: str) -> tuple[int, bytes]:
    scope = {
        **ASGI_HTTP_SCOPE,
        "method": "GET",
        "path": path,
        "raw_path": path.encode(),
        "query_string": query.encode(),
        "headers": [(b"host", b"127.0.0.1"), (b"authorization", f"Bearer {token}".encode())],
    }
    communicator = ApplicationCommunicator(app, scope)
    await communicator.send_input({"type": "http.request", "body": b""})
    start = await communicator.receive_output(10)
    body = b""
    while True:
        message = await communicator.receive_output(10)
        body += message.get("body", b"")
        if not message.get("more_body"):
            break
    await communicator.wait(10)
    return start["status"], body


def test_plain_requests_reuse_a_few_threads_and_their_connections(settings, work_root):
    """Twenty reads, four at a time, open at most BRIDGE_WEB_THREADS database connections: one per pool thread, kept
    (Django's ASGI handler made a thread, and so opened a connection, per request)."""
    from bridge.asgi import application

    token = create_token("threads")[1]
    task = make_task("say hi")
    threads: set[int] = set()
    opened: list[int] = []

    def on_request(**kwargs) -> None:
        threads.add(threading.get_ident())

    def on_connection(connection, **kwargs) -> None:
        opened.append(threading.get_ident())

    request_started.connect(on_request)
    connection_created.connect(on_connection)
    try:

        async def twenty_reads() -> list[tuple[int, bytes]]:
            answers = []
            for _ in range(5):
                batch = [get(application, "/v1/task", f"task_id={task.public_id}", token) for _ in range(4)]
                answers += await asyncio.gather(*batch)
            return answers

        answers = asyncio.run(twenty_reads())
    finally:
        request_started.disconnect(on_request)
        connection_created.disconnect(on_connection)
    assert all(status == 200 and json.loads(body)["id"] == str(task.public_id) for status, body in answers)
    assert threads and len(opened) <= settings.BRIDGE_WEB_THREADS < len(answers), (
        f"{len(opened)} database connections opened for {len(answers)} requests: one per pool thread, kept"
    )


def chunked(body: bytes, cuts: list[int]) -> list[dict]:
    """`body` as the http.request messages of a client that sent it in pieces cut at `cuts`."""
    edges = [0, *sorted({min(cut, len(body)) for cut in cuts}), len(body)]
    pieces = [body[a:b] for a, b in zip(edges, edges[1:], strict=False)] or [b""]
    return [{"type": "http.request", "body": p, "more_body": n < len(pieces) - 1} for n, p in enumerate(pieces)]


@hypothesis_settings(max_examples=60, deadline=None)
@given(body=st.binary(max_size=300), cuts=st.lists(st.integers(0, 300), max_size=6), limit=st.integers(0, 320))
def test_a_body_in_any_pieces_is_read_whole_up_to_one_byte_past_the_limit(body, cuts, limit):
    messages = chunked(body, cuts)

    async def receive() -> dict:
        return messages.pop(0)

    assert asyncio.run(read_body(receive, limit)) == body[: limit + 1]
    assert messages == [], "every message of the request is read, also past the limit"


def test_a_client_that_leaves_mid_request_is_not_answered():
    messages = [{"type": "http.request", "body": b"{", "more_body": True}, {"type": "http.disconnect"}]

    async def receive() -> dict:
        return messages.pop(0)

    assert asyncio.run(read_body(receive, 100)) is None


@hypothesis_settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    prompt=st.text(
        st.characters(exclude_categories=("Cs",), exclude_characters="\x00"), min_size=1, max_size=200
    ).filter(
        str.strip  # a blank prompt is refused, whole or not
    ),
    cuts=st.lists(st.integers(0, 400), max_size=5),
)
def test_a_create_sent_in_pieces_arrives_whole(work_root, token, prompt, cuts):
    """Through the ASGI app runbridge serves: the JSON body in any pieces, the answer one response. (work_root and
    the token are only read, so one of each serves every example.)"""
    from bridge.asgi import application

    body = json.dumps({"prompt": prompt, "cwd": str(work_root)}).encode()
    scope = {
        **ASGI_HTTP_SCOPE,
        "method": "POST",
        "path": "/v1/task/create",
        "raw_path": b"/v1/task/create",
        "headers": [
            (b"host", b"127.0.0.1"),
            (b"authorization", f"Bearer {token}".encode()),
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
        ],
    }

    async def create() -> tuple[dict, dict]:
        communicator = ApplicationCommunicator(application, scope)
        for message in chunked(body, cuts):
            await communicator.send_input(message)
        start = await communicator.receive_output(10)
        answer = await communicator.receive_output(10)
        await communicator.wait(10)
        return start, answer

    start, answer = asyncio.run(create())
    assert start["status"] == 200, answer
    assert (
        not answer.get("more_body")
        and Task.objects.get(public_id=json.loads(answer["body"])["task_id"]).prompt == prompt
    )


def test_a_body_over_the_limit_is_refused_413(settings, work_root, token):
    from bridge.asgi import application

    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1000
    body = json.dumps({"prompt": "x" * 5000, "cwd": str(work_root)}).encode()
    scope = {
        **ASGI_HTTP_SCOPE,
        "method": "POST",
        "path": "/v1/task/create",
        "raw_path": b"/v1/task/create",
        "headers": [(b"authorization", f"Bearer {token}".encode()), (b"content-length", str(len(body)).encode())],
    }

    async def create() -> tuple[dict, dict]:
        communicator = ApplicationCommunicator(application, scope)
        for message in chunked(body, [700, 1400]):
            await communicator.send_input(message)
        start, answer = await communicator.receive_output(10), await communicator.receive_output(10)
        await communicator.wait(10)
        return start, answer

    start, answer = asyncio.run(create())
    assert start["status"] == 413 and json.loads(answer["body"])["code"] == "too_large"
    assert not Task.objects.exists()


@pytest.mark.parametrize("events_read", [1, 3])
def test_a_stream_whose_client_leaves_ends_at_once(settings, token, events_read):
    """The stream's coroutine waits on the doorbell between reads; a client that leaves cancels it there, instead of
    its noticing at its next write (a heartbeat, BRIDGE_SSE_HEARTBEAT_S later) or never holding anything again."""
    from bridge.asgi import application

    settings.BRIDGE_SSE_HEARTBEAT_S = settings.BRIDGE_POLL_S = 600
    task = make_task("say hi")  # queued: its stream waits for news
    query = f"task_id={task.public_id}".encode()
    path = "/v1/task/output/stream"
    scope = {**ASGI_HTTP_SCOPE, "method": "GET", "path": path, "raw_path": path.encode(), "query_string": query}
    scope["headers"] = [(b"authorization", f"Bearer {token}".encode())]

    async def leave_after_reading() -> tuple[int, bytes, bool]:
        communicator = ApplicationCommunicator(application, scope)
        await communicator.send_input({"type": "http.request", "body": b""})
        start = await communicator.receive_output(10)
        body = b""
        while body.count(b"\n\n") < events_read:
            body += (await communicator.receive_output(10))["body"]
        await communicator.send_input({"type": "http.disconnect"})
        ended, _ = await asyncio.wait({communicator.future}, timeout=10)
        await communicator.wait(0)  # the app's own error, if it failed; cancelled if it is still going
        return start["status"], body, bool(ended)

    status, body, ended = asyncio.run(leave_after_reading())
    assert status == 200 and b"event: connected" in body
    assert ended, "the stream went on waiting after its client left"
