"""bridge/asgi.py: plain HTTP requests run on a fixed pool of threads that keep their database connections; only
the SSE stream takes Django's ASGI handler."""

import asyncio
import json
import threading

import pytest
from asgiref.testing import ApplicationCommunicator
from django.core.signals import request_started
from django.db.backends.signals import connection_created

from jobs.actions import create_token
from tests.support import make_task

pytestmark = pytest.mark.django_db(transaction=True)


async def get(app, path: str, query: str, token: str) -> tuple[int, bytes]:
    scope = {
        "type": "http",
        "http_version": "1.1",
        "method": "GET",
        "path": path,
        "raw_path": path.encode(),
        "root_path": "",
        "scheme": "http",
        "query_string": query.encode(),
        "headers": [(b"host", b"127.0.0.1"), (b"authorization", f"Bearer {token}".encode())],
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8800),
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
