"""hbridge's protocol on Bridge: the translation in web/hbridge.py, then the SSE stream and REST replies that use it.

The unit tests feed generated transcripts to the translator; the stream tests read /v1/task/output/stream through
Django's async test client, in hbridge's named form (`event:` lines) and its unnamed form (only `data:` lines), for a
recorded transcript and for a live run of the fake agent. Waiting follows the stream, never sleeps.
"""

import asyncio
import base64
import json
import random
from datetime import datetime, timedelta

import pytest
from asgiref.sync import async_to_sync
from django.test import AsyncClient

from jobs import actions
from jobs.core.errors import InvalidInput
from jobs.core.vocabulary import TERMINAL_STATUSES, Status
from jobs.models import Task
from jobs.web import hbridge
from tests.support import make_task, wait_for

TASK = "0b4f8e2c-0000-4000-8000-000000000000"
T0 = datetime(2026, 1, 1, 12, 0, 0)


def event(seq: int, kind: str, data: dict, seconds: float = 0.0) -> dict:
    return {"seq": seq, "kind": kind, "data": data, "time": (T0 + timedelta(seconds=seconds)).isoformat()}


def feed(events: list[dict], translator: hbridge.StreamTranslator | None = None) -> list[hbridge.Frame]:
    translator = translator or hbridge.StreamTranslator(TASK)
    return [frame for e in events for frame in translator.translate(e)]


def chunks(frames: list[hbridge.Frame]) -> str:
    return "".join(payload["chunk"] for name, payload, _ in frames if name == "chunk")


def split_randomly(text: str, rng: random.Random) -> list[str]:
    cuts = sorted(rng.sample(range(1, len(text)), k=min(len(text) - 1, rng.randint(1, 6))))
    return [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True)]


# --- status words ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("status", list(Status))
@pytest.mark.parametrize("reason", ["", "why it ended"])
def test_every_status_has_one_hbridge_word_and_keeps_bridges(status, reason):
    fields = hbridge.status_fields(status, reason)
    word = fields["status"]
    assert word in hbridge.WORDS and word != hbridge.CREATED
    assert fields["bridge_status"] == status.value
    if status == Status.DONE:
        assert word == "done"
    elif status in TERMINAL_STATUSES:
        assert word == "failed", "every other end must be one an hbridge client stops polling on"
    else:
        assert word == "running", "a task not ended must be one an hbridge client keeps polling on"
    ended_badly = word == "failed"
    assert fields.get("reason") == (reason if ended_badly and reason else None)
    assert hbridge.status_word(status) == word


@pytest.mark.parametrize("status", [Status.CANCELLED, Status.TIMEOUT, Status.ORPHANED])
def test_cancelled_timeout_and_orphaned_read_failed_with_bridges_status_and_reason(status):
    assert hbridge.status_fields(status, "stopped") == {
        "status": "failed",
        "bridge_status": status,
        "reason": "stopped",
    }


def test_create_answers_created_with_bridges_status():
    assert hbridge.created_reply(TASK, Status.QUEUED) == {
        "task_id": TASK,
        "status": "created",
        "bridge_status": "queued",
    }


# --- taskTimeoutMs --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("timeout_s", "ms", "expected"),
    [
        (None, None, None),
        (None, 0, None),  # hbridge's default "no timeout": the server's default applies
        (30, 0, 30),
        (30, None, 30),
        (None, 1, 1),
        (None, 1000, 1),
        (None, 1001, 2),
        (None, 90_000, 90),
        (90, 90_000, 90),
        (2, 1500, 2),
    ],
)
def test_task_timeout_ms_becomes_whole_seconds_rounded_up(timeout_s, ms, expected):
    assert hbridge.timeout_seconds(timeout_s, ms) == expected


def test_task_timeout_ms_in_generated_values_never_shortens_the_limit():
    rng = random.Random(7)
    for ms in [rng.randint(1, 10**9) for _ in range(500)]:
        seconds = hbridge.timeout_seconds(None, ms)
        assert seconds * 1000 >= ms > (seconds - 1) * 1000
        assert hbridge.timeout_seconds(seconds, ms) == seconds


@pytest.mark.parametrize(("timeout_s", "ms"), [(30, 60_000), (1, 1001), (90, 89_000)])
def test_disagreeing_timeouts_are_refused(timeout_s, ms):
    with pytest.raises(InvalidInput, match="disagree") as refused:
        hbridge.timeout_seconds(timeout_s, ms)
    assert refused.value.http_status == 400 and refused.value.code == "conflicting_timeouts"


# --- the stream's translation ---------------------------------------------------------------------------------


def test_every_frame_names_its_type_and_task_and_bridges_own_keep_their_seq():
    events = [
        event(1, "status", {"status": "queued"}),
        event(2, "status", {"status": "running", "worker": "w"}),
        event(3, "init", {"session_id": "s"}),
        event(4, "text_delta", {"message_id": "m1", "text": "Hi"}),
        event(5, "text", {"message_id": "m1", "text": "Hi"}),
        event(6, "tool_use", {"message_id": "m2", "id": "t1", "name": "Bash", "input": {"command": "ls"}}),
        event(7, "permission_request", {"request_id": "r1", "tool_name": "Bash", "input": {}, "status": "pending"}),
        event(8, "tool_result", {"tool_use_id": "t1", "is_error": False, "content": "a"}),
        event(9, "error", {"message": "broken pipe"}),
        event(10, "status", {"status": "failed", "exit_code": 1, "error": "it broke"}),
    ]
    translator = hbridge.StreamTranslator(TASK)
    frames = [translator.opened(Status.QUEUED), *feed(events, translator), *translator.ending("failed", 1, "x", 10)]
    for name, payload, frame_id in frames:
        assert payload["type"] == name and payload["task_id"] == TASK, (name, payload)
        if "seq" in payload:
            assert frame_id == payload["seq"] and payload["kind"] == name
        else:
            assert frame_id is None
    assert [f[2] for f in frames if f[2] is not None] == list(range(1, 11)), "each Bridge event exactly once"
    assert [f[0] for f in frames][-2:] == ["end", "done"]


def test_generated_claude_transcripts_stream_each_text_once():
    """Claude records each message's text as deltas and again as a whole block: deltas win, and a message that
    came without deltas (partial messages off, or the CLI's synthetic error message) comes whole."""
    rng = random.Random(11)
    for _ in range(200):
        events, expected, seq = [], "", 0
        for m in range(rng.randint(1, 5)):
            text = "".join(rng.choice("abc xyz.") for _ in range(rng.randint(2, 40)))
            message_id = f"msg_{m}"
            if rng.random() < 0.7:
                for piece in split_randomly(text, rng):
                    seq += 1
                    events.append(event(seq, "text_delta", {"message_id": message_id, "index": 0, "text": piece}))
            seq += 1
            events.append(event(seq, "text", {"message_id": message_id, "text": text}))
            expected += text
        assert chunks(feed(events)) == expected


def test_generated_acp_transcripts_stream_each_text_once():
    """ACP deltas carry no message id; the whole message follows as `text` at the next tool call or the end."""
    rng = random.Random(12)
    for _ in range(200):
        events, expected, seq = [], "", 0
        for n in range(rng.randint(1, 4)):
            text = "".join(rng.choice("de fgh!") for _ in range(rng.randint(2, 30)))
            for piece in split_randomly(text, rng):
                seq += 1
                events.append(event(seq, "text_delta", {"text": piece}))
            seq += 1
            events.append(event(seq, "text", {"text": text.strip()}))
            seq += 1
            events.append(event(seq, "tool_use", {"id": f"call_{n}", "name": "terminal: ls", "input": {}}))
            expected += text
        assert chunks(feed(events)) == expected


def test_plain_output_lines_are_chunks_with_their_newline():
    frames = feed([event(1, "output", {"text": "One-shot answer."}), event(2, "stdout", {"text": "not json"})])
    assert chunks(frames) == "One-shot answer.\nnot json\n"
    [(name, payload, _)] = [f for f in frames if f[0] == "chunk"][:1]
    assert payload == {"type": "chunk", "task_id": TASK, "chunk": "One-shot answer.\n", "text": "One-shot answer.\n"}


def test_a_resumed_stream_primed_with_what_it_sent_does_not_repeat_text():
    events = [
        event(1, "text_delta", {"message_id": "m", "text": "Hel"}),
        event(2, "text_delta", {"message_id": "m", "text": "lo"}),
    ]
    resumed = hbridge.StreamTranslator(TASK)
    resumed.prime(events)
    assert chunks(feed([event(3, "text", {"message_id": "m", "text": "Hello"})], resumed)) == ""


def test_tool_progress_names_the_tool_and_its_elapsed_time():
    frames = feed(
        [
            event(1, "tool_use", {"id": "t1", "name": "Bash", "input": {"command": "make"}}, seconds=0),
            event(2, "tool_update", {"tool_use_id": "t1", "status": "in_progress", "content": ""}, seconds=1.25),
            event(
                3, "raw", {"type": "tool_progress", "tool_use_id": "t1", "tool_name": "Bash", "elapsed_time_seconds": 2}
            ),
            event(4, "tool_result", {"tool_use_id": "t1", "is_error": True, "content": "boom"}, seconds=2.5),
            event(5, "raw", {"type": "something_else"}),
        ]
    )
    progress = [(p["tool_name"], p["elapsed_time_seconds"], p["phase"]) for n, p, _ in frames if n == "tool_progress"]
    assert progress == [
        ("Bash", 0, "started"),
        ("Bash", 1.25, "running"),
        ("Bash", 2, "running"),
        ("Bash", 2.5, "failed"),
    ]


def test_shared_names_carry_both_shapes_in_one_event():
    perm = {
        "request_id": "r7",
        "tool_name": "Write",
        "input": {"file_path": "a"},
        "tool_use_id": "t",
        "status": "pending",
    }
    frames = feed(
        [
            event(1, "permission_request", perm),
            event(2, "status", {"status": "cancelled", "reason": "not needed", "by": "token:x"}),
        ]
    )
    (name, asked, seq), (_, status, _), (error_name, error, error_id) = frames
    assert (name, seq, asked["data"]) == ("permission_request", 1, perm)
    assert {k: asked[k] for k in ("task_id", "request_id", "tool_name", "input")} == {
        "task_id": TASK,
        "request_id": "r7",
        "tool_name": "Write",
        "input": {"file_path": "a"},
    }
    assert (status["status"], status["bridge_status"], status["reason"]) == ("failed", "cancelled", "not needed")
    assert status["data"]["status"] == "cancelled", "Bridge's own data is unchanged"
    assert (error_name, error["error"], error["bridge_status"], error_id) == ("error", "not needed", "cancelled", None)


def test_a_done_task_sends_no_error_and_done_has_the_exit_code():
    translator = hbridge.StreamTranslator(TASK)
    frames = feed([event(1, "status", {"status": "done", "exit_code": 0, "error": "", "result": "ok"})], translator)
    assert [f[0] for f in frames] == ["status"] and frames[0][1]["status"] == "done"
    end, done = translator.ending(Status.DONE, 0, "", 1)
    assert end[1] == {"type": "end", "task_id": TASK, "status": "done", "last_seq": 1}
    assert done[1] == {"type": "done", "task_id": TASK, "status": "done", "bridge_status": "done", "exitCode": 0}


# --- the stream and REST, through Django ----------------------------------------------------------------------


def run(coroutine_function):
    """pytest has no asyncio plugin here: run one async test body on a fresh loop."""
    return async_to_sync(coroutine_function)()


def basic(token: str) -> dict:
    return {"Authorization": "Basic " + base64.b64encode(f"bridge:{token}".encode()).decode()}


class AuthedClient:
    """Django's AsyncClient with HTTP Basic auth on every request (its constructor's headers miss ASGI requests)."""

    def __init__(self, token: str) -> None:
        self.client, self.headers = AsyncClient(), basic(token)

    async def get(self, path: str, params: dict):
        return await self.client.get(path, params, headers=self.headers)

    async def post(self, path: str, body: dict):
        return await self.client.post(path, body, content_type="application/json", headers=self.headers)


class SseReader:
    """Reads an SSE response block by block as it arrives; each event as {"id", "event", "data"}."""

    def __init__(self, response) -> None:
        assert response.status_code == 200, response
        self.content = aiter(response.streaming_content)
        self.buffer = ""

    async def next(self, timeout: float = 20) -> dict | None:
        while True:
            while "\n\n" not in self.buffer:
                try:
                    chunk = await asyncio.wait_for(anext(self.content), timeout)
                except StopAsyncIteration:
                    return None
                self.buffer += chunk.decode()
            block, self.buffer = self.buffer.split("\n\n", 1)
            parsed = parse_block(block)
            if parsed is not None:
                return parsed

    async def rest(self) -> list[dict]:
        events = []
        while (e := await self.next()) is not None:
            events.append(e)
        return events


def parse_block(block: str) -> dict | None:
    fields = {"id": None, "event": "message", "data": []}
    for line in block.split("\n"):
        name, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if name == "data":
            fields["data"].append(value)
        elif name in ("id", "event"):
            fields[name] = value
    if not fields["data"]:
        return None  # retry: / heartbeat comment
    return {**fields, "id": int(fields["id"]) if fields["id"] else None, "data": json.loads("\n".join(fields["data"]))}


@pytest.fixture
def token(transactional_db) -> str:
    return actions.create_token("hbridge-test")[1]


def recorded_task() -> Task:
    """A task with a transcript like Claude's: deltas and the whole block, a tool, a permission, then cancelled."""
    task = make_task("do it")
    claimed = actions.claim_next_task(actions.register_worker(1))
    assert claimed.pk == task.pk
    actions.append_events(
        task,
        [
            ("text_delta", {"message_id": "m1", "index": 0, "text": "Writing "}),
            ("text_delta", {"message_id": "m1", "index": 0, "text": "a.txt"}),
            ("text", {"message_id": "m1", "text": "Writing a.txt"}),
            ("tool_use", {"message_id": "m2", "id": "t1", "name": "Write", "input": {"file_path": "a.txt"}}),
        ],
    )
    actions.record_permission_request(task, request_id="r1", tool_name="Write", tool_input={"file_path": "a.txt"})
    actions.finish_task(task, status=Status.CANCELLED, exit_code=143, error="stopped by test")
    return task


def test_recorded_stream_in_named_and_unnamed_form(work_root, token):
    task = recorded_task()

    async def body():
        client = AsyncClient()
        response = await client.get("/v1/task/output/stream", {"id": str(task.public_id)}, headers=basic(token))
        return await SseReader(response).rest()

    events = run(body)
    task_id = str(task.public_id)
    named = [(e["event"], e["data"]) for e in events]
    unnamed = [e["data"] for e in events]  # a client that ignores `event:` lines
    assert all(d["type"] == name and d["task_id"] == task_id for name, d in named)
    assert named[0][0] == "connected" and named[0][1]["taskId"] == task_id
    assert [name for name, _ in named][-2:] == ["end", "done"]
    assert "".join(d["chunk"] for d in unnamed if d["type"] == "chunk") == "Writing a.txt"
    [asked] = [d for d in unnamed if d["type"] == "permission_request"]
    assert (asked["request_id"], asked["tool_name"], asked["input"]) == ("r1", "Write", {"file_path": "a.txt"})
    statuses = [(d["status"], d["bridge_status"]) for d in unnamed if d["type"] == "status"]
    assert statuses == [("running", "queued"), ("running", "running"), ("failed", "cancelled")]
    [error] = [d for d in unnamed if d["type"] == "error"]
    assert error["error"] == "stopped by test"
    done = unnamed[-1]
    assert (done["status"], done["bridge_status"], done["exitCode"], done["reason"]) == (
        "failed",
        "cancelled",
        143,
        "stopped by test",
    )
    task.refresh_from_db()
    own = [e for e in events if e["id"] is not None]
    assert [e["id"] for e in own] == list(range(1, task.last_seq + 1)), "every Bridge event, in order, once"
    assert all(e["data"]["seq"] == e["id"] and e["data"]["kind"] == e["event"] for e in own)


def test_resume_after_the_deltas_does_not_repeat_their_text(work_root, token):
    task = recorded_task()
    last_delta = max(e.seq for e in actions.events_since(task) if e.kind == "text_delta")  # then the whole block

    async def body():
        client = AsyncClient()
        headers = {**basic(token), "Last-Event-ID": str(last_delta)}
        response = await client.get("/v1/task/output/stream", {"task_id": str(task.public_id)}, headers=headers)
        return await SseReader(response).rest()

    events = run(body)
    assert [e["id"] for e in events if e["id"] is not None][0] == last_delta + 1
    assert [e for e in events if e["event"] == "chunk"] == []


def test_live_run_answered_from_the_permission_request_event(supervisor, token, work_root):
    """An hbridge client: create with taskTimeoutMs, follow the stream, answer the question from the event alone."""
    prompt = 'say starting\nask Bash {"command": "touch answered.txt"}\nsay finished'

    async def body():
        client = AuthedClient(token)
        created = await client.post("/v1/task/create", {"prompt": prompt, "taskTimeoutMs": 60_000})
        reply = created.json()
        assert (reply["status"], reply["bridge_status"]) == ("created", "queued"), reply
        stream = SseReader(await client.get("/v1/task/output/stream", {"id": reply["task_id"]}))
        seen = []
        while (e := await stream.next()) is not None:
            seen.append(e["data"])
            if e["data"]["type"] == "permission_request":
                answer = {"task_id": e["data"]["task_id"], "request_id": e["data"]["request_id"], "behavior": "allow"}
                decided = await client.post("/v1/task/permission", answer)
                assert decided.status_code == 200, decided.content
        output = (await client.get("/v1/task/output", {"task_id": reply["task_id"]})).json()
        return reply["task_id"], seen, output

    task_id, seen, output = run(body)
    assert (work_root / "answered.txt").exists()
    assert "".join(d["chunk"] for d in seen if d["type"] == "chunk") == "startingfinished"
    assert seen[-1] == {"type": "done", "task_id": task_id, "status": "done", "bridge_status": "done", "exitCode": 0}
    assert (output["retrieval_status"], output["task"]["status"], output["task"]["result"]) == (
        "success",
        "done",
        "finished",
    )
    assert Task.objects.get(public_id=task_id).timeout_s == 60


def test_stream_refusals_are_json_before_the_stream(work_root, token):
    async def body():
        client = AuthedClient(token)
        missing = await client.get("/v1/task/output/stream", {"id": "not-a-task"})
        anonymous = await AsyncClient().get("/v1/task/output/stream", {"id": "x"})
        return missing, anonymous

    missing, anonymous = run(body)
    assert missing.status_code == 404 and missing.json()["code"] == "no_such_task"
    assert anonymous.status_code == 401


# --- REST: create's timeouts and the status words ---------------------------------------------------------------


def post_create(client, **body):
    return client.post("/v1/task/create", json.dumps({"prompt": "say hi", **body}), content_type="application/json")


@pytest.fixture
def rest(token, work_root):
    from django.test import Client

    return Client(headers=basic(token))


def test_create_takes_task_timeout_ms(rest):
    ok = post_create(rest, taskTimeoutMs=1500)
    assert ok.status_code == 200 and Task.objects.get(public_id=ok.json()["task_id"]).timeout_s == 2
    both = post_create(rest, timeout_s=2, taskTimeoutMs=1500)
    assert both.status_code == 200
    conflict = post_create(rest, timeout_s=30, taskTimeoutMs=60_000)
    assert conflict.status_code == 400 and conflict.json()["code"] == "conflicting_timeouts"
    assert post_create(rest, taskTimeoutMs=-1).status_code == 422
    too_long = post_create(rest, taskTimeoutMs=(actions.MAX_TIMEOUT_S + 1) * 1000)
    assert too_long.status_code == 422, "the schema states the bound"
    assert Task.objects.count() == 2


def test_no_operator_limit_means_tasks_without_one(rest, settings):
    settings.BRIDGE_TASK_TIMEOUT_S = 0
    for body in ({}, {"taskTimeoutMs": 0}):
        task_id = post_create(rest, **body).json()["task_id"]
        assert Task.objects.get(public_id=task_id).timeout_s is None
    explicit = post_create(rest, timeout_s=5).json()["task_id"]
    assert Task.objects.get(public_id=explicit).timeout_s == 5
    assert post_create(rest, timeout_s=actions.MAX_TIMEOUT_S + 1).status_code == 422


def test_a_task_with_no_limit_runs_to_its_end(supervisor, settings):
    settings.BRIDGE_TASK_TIMEOUT_S = 0
    task = wait_for(make_task("say working\nsleep 1.5\nsay done"))
    assert (task.timeout_s, task.status, task.result) == (None, Status.DONE, "done")


def test_timeout_from_task_timeout_ms_reads_failed_with_its_reason(supervisor, rest):
    task_id = post_create(rest, prompt="say working\nsleep 30", taskTimeoutMs=1000).json()["task_id"]
    wait_for(Task.objects.get(public_id=task_id))
    task = rest.get("/v1/task/output", {"task_id": task_id}).json()["task"]
    assert (task["status"], task["bridge_status"]) == ("failed", "timeout")
    assert "timeout of 1 s" in task["reason"]
    detail = rest.get("/v1/task", {"task_id": task_id}).json()
    assert (detail["status"], detail["bridge_status"], detail["reason"]) == ("failed", "timeout", task["reason"])


def test_orphaned_and_cancelled_read_failed_on_hbridges_endpoints(rest):
    orphan = make_task("say hi")
    actions.claim_next_task(actions.register_worker(1))
    actions.mark_orphaned(orphan, "its supervisor died")
    task = rest.get("/v1/task/output", {"task_id": str(orphan.public_id)}).json()["task"]
    assert (task["status"], task["bridge_status"], task["reason"]) == ("failed", "orphaned", "its supervisor died")

    queued = post_create(rest).json()["task_id"]
    assert rest.get("/v1/task/output", {"task_id": queued}).json()["task"]["status"] == "running"
    cancelled = rest.post("/v1/task/cancel", {"task_id": queued}, content_type="application/json").json()
    assert (cancelled["status"], cancelled["bridge_status"], cancelled["cancel_requested"]) == (
        "failed",
        "cancelled",
        True,
    )
    listed = rest.get("/v1/tasks").json()["tasks"]
    assert {t["status"] for t in listed} == {"orphaned", "cancelled"}, "Bridge's own list keeps Bridge's words"


@pytest.mark.parametrize("status", list(Status))
def test_get_task_gives_every_bridge_status_in_an_hbridge_word_that_ends_where_the_task_does(rest, status):
    """A client written from hbridge's docs polls GET /v1/task until `done` or `failed`: every status Bridge has (the
    list is read from Status, so one added later is held to this too) must read as a word it knows, an end as an end
    and anything else as `running`; Bridge's exact status rides along, as on hbridge's other replies."""
    task = make_task("say hi")
    alive = actions.register_worker(1)  # this process's supervisor row: a running task stays running
    Task.objects.filter(pk=task.pk).update(status=status, worker=alive, error="why it ended")

    detail = rest.get("/v1/task", {"task_id": str(task.public_id)}).json()

    assert detail["bridge_status"] == status
    assert detail["status"] in hbridge.TASK_WORDS
    assert (detail["status"] in ("done", "failed")) == (status in TERMINAL_STATUSES)
    assert (detail["status"] == "done") == (status == Status.DONE)
    output = rest.get("/v1/task/output", {"task_id": str(task.public_id)}).json()["task"]
    assert {k: detail.get(k) for k in ("status", "bridge_status", "reason")} == {
        k: output.get(k) for k in ("status", "bridge_status", "reason")
    }, "the same words as /v1/task/output"
    listed = rest.get("/v1/tasks").json()["tasks"]
    assert [t["status"] for t in listed] == [status], "Bridge's own list keeps Bridge's words"
