"""GET /v1/task/transcript: a task's raw transcript as NDJSON, resumable after any row, followed until the task ends
(woken by its doorbell, or by the sweep when a ring is lost), read with the scope and roots of every read of a task;
and, end to end through `runbridge`, the fake agent's transcript is what it wrote on stdout."""

import asyncio
import base64
import json
import sys
from pathlib import Path

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from django.test import AsyncClient, Client
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from jobs import actions
from jobs.core import doorbell
from jobs.core.access import Scope
from jobs.core.inputs import MAX_INT
from jobs.core.vocabulary import Status
from jobs.models import Task
from jobs.web.watching import Sweep
from tests.bridge_server import BridgeServer
from tests.support import FAKES, make_task

pytestmark = pytest.mark.django_db(transaction=True)

PATH = "/v1/task/transcript"
ODD_LINES = [b"", b"\r", b"\x00", b"\xff\xfe not UTF-8", "\u2028 h\u00e9 \U0001f600".encode(), b'{"type": "x"}']
line_texts = st.one_of(st.binary(max_size=60).map(lambda line: line.replace(b"\n", b"")), st.sampled_from(ODD_LINES))


@pytest.fixture
def token(work_root) -> str:
    return actions.create_token("transcripts", Scope.READ)[1]


def bearer(token: str) -> dict:
    return {"Authorization": f"Bearer {token}"}


def ended_task(texts: list[bytes]) -> Task:
    """A task that ran, wrote these lines, and ended."""
    task = make_task("say hi")
    claimed = actions.claim_next_task(actions.register_worker(1))
    assert claimed is not None and claimed.pk == task.pk
    actions.append_lines(claimed, 1, [text + b"\n" for text in texts])
    actions.finish_task(claimed, status=Status.DONE, claim=claimed.claim)
    return claimed


async def read_stream(response, timeout: float = 30) -> list[bytes]:
    """The whole body of a streamed answer, chunk by chunk."""
    assert response.status_code == 200 and response["Content-Type"] == "application/x-ndjson", response
    chunks = []
    async with asyncio.timeout(timeout):
        async for chunk in response.streaming_content:
            chunks.append(chunk)
    return chunks


def rows_of(body: bytes) -> list[dict]:
    """Each line of an NDJSON body, parsed; every line is ASCII and ends with a newline."""
    assert body.isascii() and (body == b"" or body.endswith(b"\n"))
    return [json.loads(line) for line in body.split(b"\n")[:-1]]


def line_bytes(row: dict) -> bytes:
    return base64.b64decode(row["base64"]) if "base64" in row else row["line"].encode()


def transcript(token: str, task: Task, **params) -> list[dict]:
    async def body() -> list[bytes]:
        query = {"task_id": str(task.public_id), **params}
        return await read_stream(await AsyncClient().get(PATH, query, headers=bearer(token)))

    return rows_of(b"".join(async_to_sync(body)()))


@hypothesis_settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(texts=st.lists(line_texts, max_size=12), data=st.data())
def test_a_transcript_resumes_after_any_row(token, texts, data):
    task = ended_task(texts)
    after = data.draw(st.integers(0, len(texts) + 2), label="after")
    rows = transcript(token, task, after=str(after))
    assert [row["n"] for row in rows] == list(range(after + 1, len(texts) + 1))
    assert [line_bytes(row) for row in rows] == texts[after:]


def test_a_running_task_is_streamed_until_it_ends(supervisor, token, settings, tmp_path):
    settings.BRIDGE_CLAUDE_BIN, stdout = teeing_agent(tmp_path)
    task = make_task("say one\nsleep 1\nnonjson not JSON\nsay two")

    async def body() -> tuple[list[bytes], str]:
        response = await AsyncClient().get(PATH, {"task_id": str(task.public_id)}, headers=bearer(token))
        content = aiter(response.streaming_content)
        first = await asyncio.wait_for(anext(content), 30)
        status_then = await sync_to_async(lambda: Task.objects.get(pk=task.pk).status)()
        return [first, *[chunk async for chunk in content]], status_then

    chunks, status_at_first_row = async_to_sync(body)()
    assert status_at_first_row == Status.RUNNING, "the stream began while the task ran"
    assert Task.objects.get(pk=task.pk).status == Status.DONE
    rows = rows_of(b"".join(chunks))
    assert [line_bytes(row) for row in rows] == stdout.read_bytes().split(b"\n")[:-1]
    assert [row["n"] for row in rows] == list(range(1, actions.last_line(task) + 1))


def test_a_stream_whose_rings_are_lost_is_woken_by_the_sweep(token, settings, monkeypatch):
    settings.BRIDGE_POLL_S = 0.1
    task = make_task("say hi")
    running = actions.claim_next_task(actions.register_worker(1))
    assert running is not None and running.pk == task.pk
    monkeypatch.setattr(doorbell, "ring", lambda key: None)

    def write_a_line() -> None:
        with_lines = Task.objects.get(pk=task.pk)
        actions.append_events(with_lines, [("output", {"text": "late"})])
        actions.append_lines(with_lines, 1, [b"late\n"])

    async def body() -> tuple[bytes, list[bytes]]:
        response = await AsyncClient().get(PATH, {"task_id": str(task.public_id)}, headers=bearer(token))
        content = aiter(response.streaming_content)
        reading = asyncio.ensure_future(anext(content))
        async with asyncio.timeout(10):  # until the stream has read (nothing yet) and waits: it has no event of its own
            while not any(watch.seen is not None for watch in Sweep.of_running_loop().watches):
                await asyncio.sleep(0.01)
        assert not reading.done()
        await sync_to_async(write_a_line)()  # nothing rings for it
        first = await asyncio.wait_for(reading, 10)
        await sync_to_async(lambda: actions.finish_task(Task.objects.get(pk=task.pk), status=Status.DONE))()
        return first, [chunk async for chunk in content]

    first, rest = async_to_sync(body)()
    assert rows_of(first) == [{"n": 1, "line": "late"}] and rest == []


# --- who may read it, and what is refused --------------------------------------------------------------------------


def test_a_token_limited_to_roots_reads_only_the_transcripts_of_tasks_under_them(work_root):
    mine, theirs = work_root / "mine", work_root / "theirs"
    mine.mkdir()
    theirs.mkdir()
    token = actions.create_token("mine", Scope.READ, [str(mine)])[1]
    own, other = make_task("say hi", cwd=str(mine)), make_task("say hi", cwd=str(theirs))
    seen = Client().get(PATH, {"task_id": str(own.public_id)}, headers=bearer(token))
    assert (seen.status_code, seen["Content-Type"]) == (200, "application/x-ndjson")
    refused = Client().get(PATH, {"task_id": str(other.public_id)}, headers=bearer(token))
    assert (refused.status_code, refused.json()["code"]) == (403, "outside_token_roots")


def test_a_transcript_is_not_read_without_a_token(work_root):
    task = ended_task([b"secret"])
    refused = Client().get(PATH, {"task_id": str(task.public_id)})
    assert refused.status_code == 401 and "secret" not in refused.content.decode()


@pytest.mark.parametrize(
    ("query", "status", "code"),
    [
        ({"task_id": "no-such-task"}, 404, "no_such_task"),
        ({"task_id": None}, 422, "invalid_request"),
        ({"after": "-1"}, 422, "invalid_request"),
        ({"after": "x"}, 422, "invalid_request"),
        ({"after": str(MAX_INT + 1)}, 422, "invalid_request"),
        ({"since": "3"}, 422, "invalid_request"),
    ],
)
def test_refusals_are_json_errors_before_the_stream(token, query, status, code):
    task = ended_task([b"one"])
    query = {name: value for name, value in {"task_id": str(task.public_id), **query}.items() if value is not None}
    answer = Client().get(PATH, query, headers=bearer(token))
    assert (answer.status_code, answer.json()["code"]) == (status, code)
    assert answer["Content-Type"].startswith("application/json")


# --- end to end -------------------------------------------------------------------------------------------------


def teeing_agent(directory: Path) -> tuple[str, Path]:
    """The fake agent with its stdout copied byte for byte to a file (the transcript's reference), and that file."""
    stdout, script = directory / "agent-stdout", directory / "teeing-claude"
    fake = f'"{sys.executable}" "{FAKES / "fake_claude.py"}" "$@"'
    script.write_text(f'#!/bin/sh\ncase " $* " in *" --version "*) exec {fake};; esac\n{fake} | tee "{stdout}"\n')
    script.chmod(0o755)
    return str(script), stdout


def test_a_fake_agents_transcript_through_runbridge_is_what_it_wrote_on_stdout(tmp_path):
    agent, stdout = teeing_agent(tmp_path)
    prompt = "say h\u00e9llo\nnonjson plain text \u00e9 \u2028 \U0001f600\nstderr not stdout\nbigline 5000\nsay after"
    with BridgeServer(tmp_path / "bridge", "http://127.0.0.1:9", agent, {"BRIDGE_MAX_LINE_BYTES": "2048"}) as bridge:
        task_id = bridge.create_task(prompt, bridge.work)
        with bridge.client.stream("GET", PATH, params={"task_id": task_id}) as response:
            assert response.headers["content-type"] == "application/x-ndjson"
            rows = [json.loads(line) for line in response.iter_lines()]
        assert bridge.task(task_id)["bridge_status"] == "done", "the stream ended with the task"
    written = stdout.read_bytes().split(b"\n")[:-1]
    assert [row["n"] for row in rows] == list(range(1, len(written) + 1))
    for row, line in zip(rows, written, strict=True):
        if len(line) > 2048:
            assert (
                line_bytes(row) == line[:2048]
                and row["bytes"] == len(line) + 1
                and "BRIDGE_MAX_LINE_BYTES" in row["cut"]
            )
        else:
            assert line_bytes(row) == line and "cut" not in row
    assert [line for line in written if len(line) > 2048], "the big line was written, and cut"
    assert [line for line in written if line.startswith(b"plain text")], "the line that is not JSON too"
