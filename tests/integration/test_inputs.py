"""Odd text and numbers from outside get a clear 4xx naming the field, never a 500: generated inputs."""

import asyncio
import json
import random

import pytest
from django.db import transaction
from django.test import Client as DjangoClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mcp import Client

from jobs import actions
from jobs.core.errors import BridgeError, Conflict, InvalidInput, NotFound, Refused
from jobs.core.inputs import MAX_INT, check_int, check_json, check_path_text, check_text
from jobs.core.paths import resolve_cwd, resolve_readable
from jobs.mcp.server import get_server
from jobs.models import Task

ODD = ["\x00", "a\x00b", "\ud800", "x\udfffy", "\udc80", "\U0010ffff", "é", "\u202e", "\n", "\t", " "]


def odd_texts(seed: int, count: int) -> list[str]:
    """Strings built from the characters that break storage or encoding, mixed with ordinary ones."""
    rng = random.Random(seed)
    pieces = [*ODD, "abc", "/", "..", "~", "%00", "\\"]
    return ["".join(rng.choice(pieces) for _ in range(rng.randint(1, 8))) for _ in range(count)]


@pytest.mark.parametrize("text", odd_texts(seed=1, count=200))
def test_text_is_taken_only_if_it_can_be_stored(text):
    storable = "\x00" not in text and not any(0xD800 <= ord(c) <= 0xDFFF for c in text)
    if storable:
        assert check_text("prompt", text) == text
    else:
        with pytest.raises(InvalidInput, match="^prompt "):
            check_text("prompt", text)


@pytest.mark.parametrize("value", [-1, MAX_INT + 1, 10**40, True, False, 1.5, "3", None])
def test_numbers_out_of_range_or_of_the_wrong_kind_are_refused(value):
    with pytest.raises(InvalidInput, match="^limit must be a whole number"):
        check_int("limit", value, 0, MAX_INT)


@pytest.mark.parametrize("name_bytes", [255, 256, 1000])
def test_path_names_longer_than_a_file_system_allows_are_refused(name_bytes):
    path = "/tmp/" + "n" * name_bytes
    if name_bytes <= 255:
        assert check_path_text("cwd", path) == path
    else:
        with pytest.raises(InvalidInput, match="^cwd has a name of"):
            check_path_text("cwd", path)


@pytest.mark.parametrize("raw", odd_texts(seed=2, count=100) + ["/" + "x" * 300, "/" + "a/" * 3000])
def test_any_cwd_or_read_path_is_refused_in_words_or_resolved(work_root, raw):
    """Whatever the text, confinement answers with a refusal naming the field, or a real path inside the roots."""
    for resolve, name in ((resolve_cwd, "cwd"), (resolve_readable, "path")):
        try:
            resolved = resolve(raw)
        except (InvalidInput, Refused, NotFound) as exc:
            assert exc.message.startswith((name, "path")), exc.message
        else:
            assert resolved == work_root or work_root in resolved.parents


# --- generated text and numbers through the service layer every interface calls --------------------------------------
# REST, MCP and the pages build a TaskSpec or call these actions, so text generated here stands for any of them: each
# is either refused with InvalidInput naming its field (a 400 on REST, an MCP error with the reason), or stored and
# read back unchanged. Never a database error (a 500).

ANY_TEXT = st.text(st.characters(codec=None), max_size=300)  # NUL and lone surrogates included
GENERATED = settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck), database=None)
SPEC_FIELDS = {  # how each field is given, and where the stored task keeps it
    "prompt": (lambda text: {"prompt": text}, lambda task: task.prompt),
    "target": (lambda text: {"target": text}, lambda task: task.target),
    "model": (lambda text: {"options": {"model": text}}, lambda task: task.options.get("model")),
    "allowed_tools": (lambda text: {"options": {"allowed_tools": [text]}}, lambda t: t.options["allowed_tools"][0]),
}


def storable(text: str) -> bool:
    return "\x00" not in text and not any(0xD800 <= ord(c) <= 0xDFFF for c in text)


@pytest.fixture
def queued(db, work_root):
    return actions.create_task(actions.TaskSpec(prompt="a task to cancel and ask about", cwd=str(work_root)))


@pytest.mark.django_db
@GENERATED
@given(field=st.sampled_from(sorted(SPEC_FIELDS)), text=ANY_TEXT)
def test_any_text_in_a_task_is_refused_naming_its_field_or_stored_as_sent(work_root, field, text):
    given_as, stored = SPEC_FIELDS[field]
    spec = actions.TaskSpec(**{"prompt": "hi", "cwd": str(work_root), **given_as(text)})
    try:
        with transaction.atomic():
            task = actions.create_or_join_task(spec)[0]
    except InvalidInput as refused:
        assert refused.detail.get("field") in (field, f"an entry of {field}"), refused.as_dict()
        return
    task.refresh_from_db()
    assert storable(text)
    assert stored(task) == (text if field == "prompt" else text.strip())


@pytest.mark.django_db
@GENERATED
@given(session_id=ANY_TEXT, agent=st.sampled_from(["claude", "hermes"]))
def test_any_session_id_to_resume_is_refused_naming_it_or_looked_up(work_root, session_id, agent):
    try:
        actions.known_session_id(agent, session_id, str(work_root))
    except InvalidInput as refused:
        assert refused.detail["field"] in ("session_id", "the session id"), refused.as_dict()
    except NotFound as unknown:  # storable, and Bridge knows no such session
        assert unknown.code == "no_such_session" and storable(session_id)


@pytest.mark.django_db
@GENERATED
@given(turns=st.integers() | st.booleans() | st.floats() | st.text(max_size=3))
def test_any_number_of_turns_is_refused_naming_it_or_taken_when_whole_and_in_range(work_root, turns):
    spec = actions.TaskSpec(prompt="hi", cwd=str(work_root), options={"max_turns": turns})
    try:
        with transaction.atomic():
            task = actions.create_or_join_task(spec)[0]
    except InvalidInput as refused:
        assert refused.detail["field"] == "max_turns"
        assert isinstance(turns, bool) or not isinstance(turns, int) or not 1 <= turns <= actions.MAX_TURNS
    else:
        assert task.options["max_turns"] == turns and type(turns) is int


@pytest.mark.django_db
@GENERATED
@given(reason=ANY_TEXT, message=ANY_TEXT, request_id=ANY_TEXT)
def test_any_reason_message_or_request_id_is_refused_naming_it_or_taken(queued, reason, message, request_id):
    try:
        actions.request_cancel(queued, reason=reason)
    except InvalidInput as refused:
        assert refused.detail["field"] == "reason" and not storable(reason), refused.message
    except Conflict as ended:  # taken: an earlier example cancelled this task already
        assert ended.code == "task_ended" and storable(reason)
    else:
        assert storable(reason)
    try:
        actions.decide_permission(queued, behavior="deny", request_id=request_id or None, message=message)
    except InvalidInput as refused:
        assert refused.detail["field"] in ("message", "request_id"), refused.message
        assert not storable(message) or not storable(request_id), refused.message
    except BridgeError as answered:  # storable: looked up, and this task has no such request
        assert answered.code in ("no_such_request", "nothing_pending"), answered.as_dict()


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | ANY_TEXT,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(ANY_TEXT, inner, max_size=4),
    max_leaves=12,
)


@GENERATED
@given(value=st.dictionaries(ANY_TEXT, JSON_VALUES, max_size=4))
def test_any_edited_tool_input_is_refused_naming_it_or_storable(value):
    try:
        check_json("updatedInput", value, 1024 * 1024)
    except InvalidInput as refused:
        assert refused.detail["field"] == "updatedInput" and refused.message.startswith("updatedInput ")
    else:
        json.dumps(value, ensure_ascii=False, allow_nan=False).encode("utf-8")  # finite, and every string encodes
        assert "\\u0000" not in json.dumps(value)


def test_edited_input_that_json_cannot_carry_is_refused():
    for value in ({"n": float("nan")}, {"n": 10**5000}, {"deep": [[[[]]]] * 2}, {"set": {1}}):
        try:
            check_json("updatedInput", value, 1024)
        except InvalidInput as refused:
            assert refused.detail["field"] == "updatedInput"
        else:
            assert value == {"deep": [[[[]]]] * 2}
    deep: list = []
    for _ in range(100):
        deep = [deep]
    with pytest.raises(InvalidInput, match="nested more than"):
        check_json("updatedInput", {"x": deep}, 10**6)


@pytest.mark.parametrize("value", [-1, 0, 10_001, 2**63, True, 2.5, "3"])
def test_max_turns_out_of_range_or_not_a_whole_number_is_refused(value, db, work_root):
    with pytest.raises(InvalidInput, match="^max_turns must be a whole number from 1 to 10000"):
        actions.create_task(actions.TaskSpec(prompt="hi", cwd=str(work_root), options={"max_turns": value}))


@pytest.mark.parametrize("value", [0, actions.MAX_TIMEOUT_S + 1, 10**30, True, 1.5])
def test_timeouts_out_of_range_or_not_whole_numbers_are_refused(value, db, work_root):
    with pytest.raises(InvalidInput, match="^timeout_s must be a whole number"):
        actions.create_task(actions.TaskSpec(prompt="hi", cwd=str(work_root), timeout_s=value))


@pytest.mark.django_db(transaction=True)
def test_mcp_refuses_unstorable_text_with_the_reason(work_root):
    """The MCP spot check: the tool calls the same action, and the reply names the field."""

    async def call() -> tuple[bool, str]:
        async with Client(get_server()) as client:
            result = await client.call_tool("claude_run", {"task": "a\x00b", "cwd": str(work_root), "wait_s": 0})
        return bool(result.is_error), "\n".join(c.text for c in result.content if c.type == "text")

    is_error, text = asyncio.run(call())
    assert is_error and "prompt contains a NUL character" in text, text
    assert Task.objects.count() == 0


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("query", "words"),
    [
        (
            {"task_id": "6f1c…"},
            "no task '6f1c…': task ids look like 0b4f8e2c-5d7a-4c1e-9f3b-2a6d8e1c4b70 (the task_id a create answered",
        ),
        ({"task_id": "x" * 60_000}, "task_id: String should have at most 64 characters"),
        ({"task_id": "\x00"}, "no task"),
    ],
)
def test_rest_answers_odd_task_ids_in_words(query, words, django_user_model):
    """The REST spot check: the README's placeholder and a 60,000-character id get a clear 4xx, never an empty one."""
    token = actions.create_token("inputs")[1]
    response = DjangoClient().get("/v1/task/output", query, headers={"Authorization": f"Bearer {token}"})
    assert response.status_code in (404, 422) and words in response.json()["error"], response.content[:300]


@given(st.integers(min_value=-(2**70), max_value=2**70))
def test_a_seq_from_a_client_is_taken_only_in_the_columns_range(value):
    """`since` / Last-Event-ID (SSE, websockets, MCP) reach an integer column: 2**31 there was a 500 on PostgreSQL."""
    if 0 <= value <= MAX_INT:
        assert actions.parse_seq(str(value)) == value
    else:
        with pytest.raises(InvalidInput, match=f"from 0 to {MAX_INT}"):
            actions.parse_seq(str(value))


@pytest.mark.django_db(transaction=True)  # the stream reads on threads of its own: what it reads must be committed
def test_sse_refuses_a_seq_past_the_columns_range_in_json(work_root):
    token = actions.create_token("seq")[1]
    task = actions.create_task(actions.TaskSpec(prompt="say hi", cwd=str(work_root)))
    response = DjangoClient(HTTP_AUTHORIZATION=f"Bearer {token}").get(
        "/v1/task/output/stream", {"task_id": str(task.public_id), "since": str(2**31)}
    )
    assert response.status_code == 400 and response.json()["code"] == "invalid_input"
