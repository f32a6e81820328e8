"""The REST API without a supervisor: shapes, auth, and every kind of bad input getting a clear answer."""

import base64
import importlib
import json
import os

import pytest
from django.core.management import call_command
from django.test import Client
from django.utils import timezone
from hypothesis import given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from jobs import actions
from jobs.actions import create_token
from jobs.core.hints import manage_command
from jobs.core.vocabulary import Status
from jobs.models import ApiToken, PermissionRequest, Task

pytestmark = pytest.mark.django_db


@pytest.fixture
def token(db) -> str:
    return create_token("tests")[1]


@pytest.fixture
def api(token, work_root):
    client = Client(HTTP_AUTHORIZATION=f"Bearer {token}")

    def call(method: str, path: str, body=None, **headers):
        if method == "get":
            return client.get(path, body or {}, headers=headers)
        data = body if isinstance(body, str) else json.dumps(body)
        return client.post(path, data, content_type="application/json", headers=headers)

    return call


def create(api, **body):
    return api("post", "/v1/task/create", {"prompt": "say hi", **body})


def test_health_is_open_and_says_little(client, db):
    response = client.get("/health")
    assert response.status_code == 200
    assert response.json()["status"] == "ok" and response.json()["database"] == "ok"


@pytest.mark.parametrize(
    ("header", "reason", "words"),
    [
        (None, "missing", "authentication required"),
        ("Bearer brg_wrong-token-that-is-long-enough", "no_such_token", "no such token"),
        ("Bearer ", "malformed", "neither 'Bearer <token>'"),
        ("Basic !!!", "malformed", "neither 'Bearer <token>'"),
        ("Token abc", "malformed", "neither 'Bearer <token>'"),
    ],
)
def test_missing_or_wrong_token_is_401_saying_which(client, token, header, reason, words):
    headers = {"Authorization": header} if header else {}
    response = client.get("/v1/tasks", headers=headers)
    assert response.status_code == 401 and response["WWW-Authenticate"].startswith("Bearer")
    body = response.json()
    assert (body["code"], body["reason"]) == ("unauthenticated", reason) and words in body["error"]
    assert manage_command("token", "create", "NAME") in body["error"] or reason == "no_such_token"
    assert client.get("/v1/task/output/stream?task_id=x", headers=headers).status_code == 401


@hypothesis_settings(max_examples=150, deadline=None)
@given(secret=st.text(max_size=80) | st.text(max_size=80).map(lambda text: "brg_" + text))
def test_any_text_sent_as_a_token_is_a_401_not_an_error(secret):
    """NUL bytes, surrogates and other alphabets, whether sent as Bearer or as a Basic password, are refused before
    they reach a query (PostgreSQL refuses NUL in text with an error)."""
    basic = base64.b64encode(f"hermes:{secret}".encode(errors="surrogatepass")).decode()
    for header in (f"Bearer {secret}", f"Basic {basic}"):
        response = Client().get("/v1/tasks", headers={"Authorization": header})
        assert response.status_code == 401, (header, response.content)
        assert response.json()["reason"] in {"malformed", "no_such_token"}


def test_basic_auth_with_the_token_as_password(client, token):
    basic = base64.b64encode(f"hermes:{token}".encode()).decode()
    assert client.get("/v1/tasks", headers={"Authorization": f"Basic {basic}"}).status_code == 200


def test_revoked_token_stops_working(client, token):
    assert client.get("/v1/tasks", headers={"Authorization": f"Bearer {token}"}).status_code == 200
    ApiToken.objects.update(revoked_at=timezone.now())
    assert client.get("/v1/tasks", headers={"Authorization": f"Bearer {token}"}).status_code == 401


def test_tokens_are_long_random_and_stored_hashed(db):
    row, token = create_token("a")
    assert len(token) >= 4 + 43  # prefix + 32 random bytes in url-safe base64: 256 bits
    assert token not in (row.hash, row.prefix) and len(row.hash) == 64
    assert create_token("b")[1] != token


def test_token_command_prints_the_token_alone_on_the_last_line(db, capsys, client):
    call_command("token", "create", "cli")
    token = capsys.readouterr().out.strip().splitlines()[-1]
    assert client.get("/v1/tasks", headers={"Authorization": f"Bearer {token}"}).status_code == 200
    call_command("token", "revoke", "cli")
    assert client.get("/v1/tasks", headers={"Authorization": f"Bearer {token}"}).status_code == 401


def test_create_returns_id_and_the_queued_task_is_visible(api, work_root):
    response = create(api, cwd=str(work_root), model="opus", max_turns=3)
    assert response.status_code == 200
    body = response.json()
    assert (body["status"], body["bridge_status"]) == ("created", "queued")  # hbridge's word, then Bridge's
    output = api("get", "/v1/task/output", {"task_id": body["task_id"]}).json()
    assert output == {
        "retrieval_status": "pending",
        "task": {
            "id": body["task_id"],
            "status": "running",  # hbridge's word for a task to keep waiting on
            "bridge_status": "queued",
            "result": "",
            "error": "",
            "exitCode": None,
            "usage": {
                "total_cost_usd": None,
                "input_tokens": None,
                "output_tokens": None,
                "cache_creation_input_tokens": None,
                "cache_read_input_tokens": None,
            },
        },
    }
    detail = api("get", "/v1/task", {"task_id": body["task_id"]}).json()
    assert detail["cwd"] == str(work_root) and detail["options"] == {"model": "opus", "max_turns": 3}
    assert detail["created_by"] == "token:tests" and detail["source"] == "api"
    listed = api("get", "/v1/tasks", {"status": "queued"}).json()
    assert [t["id"] for t in listed["tasks"]] == [body["task_id"]]
    assert api("get", "/v1/tasks", {"status": "done"}).json()["count"] == 0


def test_a_task_sets_how_long_its_permission_requests_wait(api, work_root, settings):
    settings.BRIDGE_PERMISSION_TIMEOUT_S = 600
    own = create(api, permission_timeout_s=45).json()["task_id"]
    default = create(api, prompt="say other").json()["task_id"]
    shown = [api("get", "/v1/task", {"task_id": tid}).json()["permission_timeout_s"] for tid in (own, default)]
    assert shown == [45, 600]
    task = Task.objects.get(public_id=own)
    perm = actions.record_permission_request(task, request_id="r1", tool_name="Bash", tool_input={"command": "ls"})
    [listed] = api("get", "/v1/permissions", {"task_id": own}).json()["permissions"]
    assert listed["expires_at"] == perm.expires_at.isoformat()
    assert create(api, permission_timeout_s=0).status_code == 422


def test_default_cwd_is_used_when_none_is_given(api, work_root):
    task_id = create(api).json()["task_id"]
    assert api("get", "/v1/task", {"task_id": task_id}).json()["cwd"] == str(work_root)


@pytest.mark.parametrize(
    ("body", "status", "words"),
    [
        ("{not json", 400, "not valid JSON"),
        ({}, 422, "prompt: Field required"),
        ({"prompt": "   "}, 400, "prompt is empty"),
        ({"prompt": 42}, 422, "prompt"),
        ({"prompt": "x", "permission_mode": "yolo"}, 422, "permission_mode"),
        ({"prompt": "x", "max_turns": "many"}, 422, "max_turns"),
        ({"prompt": "x", "timeout_s": 0}, 422, "timeout_s"),
        ({"prompt": "x", "surprise": 1}, 422, "surprise: Extra inputs are not permitted"),
        ({"prompt": "x", "agent": "gpt"}, 400, "unknown agent 'gpt'; this Bridge runs: claude, hermes, gemini"),
        ({"prompt": "x", "agent": "g" * 21}, 422, "agent: String should have at most 20 characters"),
        ({"prompt": ""}, 422, "prompt: String should have at least 1 character"),
        ({"prompt": "x", "max_turns": True}, 422, "max_turns: Input should be a valid integer"),
        ({"prompt": "x", "timeout_s": "60"}, 422, "timeout_s: Input should be a valid integer"),
        ({"prompt": "x", "skip_permissions": 1}, 422, "skip_permissions: Input should be a valid boolean"),
        ({"prompt": "x\u0000y"}, 400, "prompt contains a NUL character"),
        ({"prompt": "x\ud800"}, 422, "prompt: Input should be a valid string"),
        ({"prompt": "x", "target": "a\u0000"}, 400, "target contains a NUL character"),
        ({"prompt": "x", "model": "\udfff"}, 422, "model: Input should be a valid string"),
        ({"prompt": "x", "cwd": "relative/path"}, 400, "absolute path"),
    ],
)
def test_bad_create_requests(api, body, status, words):
    response = api("post", "/v1/task/create", body)
    assert response.status_code == status, response.content
    assert words in response.json()["error"]
    assert Task.objects.count() == 0


def test_prompt_over_the_size_cap(api, settings):
    # the schema's own cap is the setting as it was when jobs.web.api was imported: import it first, so that the
    # lowered setting is what the action checks (400), whatever ran before this test
    importlib.import_module("jobs.web.api")
    settings.BRIDGE_MAX_PROMPT_BYTES = 100
    response = create(api, prompt="x" * 101)
    assert response.status_code == 400 and "BRIDGE_MAX_PROMPT_BYTES" in response.json()["error"]


def test_cwd_confinement(api, work_root, tmp_path):
    (work_root / "project").mkdir()
    (work_root / "file.txt").write_text("x")
    outside = tmp_path / "outside"
    outside.mkdir()
    (work_root / "escape").symlink_to(outside)
    cases = {
        str(work_root / "missing"): (400, "does not exist"),
        str(work_root / "file.txt"): (400, "not a directory"),
        str(outside): (403, "outside the allowed roots"),
        str(work_root / "project" / ".." / ".." / "outside"): (403, "outside the allowed roots"),
        str(work_root / "escape"): (403, "outside the allowed roots"),
        "/": (403, "outside the allowed roots"),
    }
    for cwd, (status, words) in cases.items():
        response = create(api, cwd=cwd)
        assert response.status_code == status, cwd
        assert words in response.json()["error"], cwd
    assert create(api, cwd=str(outside)).json()["allowed_roots"] == [str(work_root)]
    assert create(api, cwd=str(work_root / "project")).status_code == 200
    assert Task.objects.count() == 1


def test_queue_full_is_429(api, settings):
    settings.BRIDGE_MAX_QUEUED = 2
    assert [create(api).status_code for _ in range(2)] == [200, 200]
    response = create(api)
    assert response.status_code == 429 and "BRIDGE_MAX_QUEUED=2" in response.json()["error"]


@pytest.mark.parametrize(
    ("task_id", "status", "words"),
    [
        ("not-a-uuid", 404, "no task 'not-a-uuid': task ids look like"),
        ("6f1c…", 404, "no task '6f1c…': task ids look like"),  # the README's placeholder, pasted
        ("00000000-0000-0000-0000-000000000000", 404, "no task 00000000"),
        ("", 422, "invalid request: task_id: String should have at least 1 character"),
        ("x" * 60_000, 422, "invalid request: task_id: String should have at most 64 characters"),
    ],
)
def test_unknown_or_malformed_task_id_is_a_clear_4xx(api, task_id, status, words):
    for path in ("/v1/task", "/v1/task/output", "/v1/task/events"):
        response = api("get", path, {"task_id": task_id})
        assert (response.status_code, response.json()["error"][: len(words)]) == (status, words), path
    assert api("post", "/v1/task/cancel", {"task_id": task_id}).status_code == status
    assert api("post", "/v1/task/permission", {"task_id": task_id, "behavior": "allow"}).status_code == status


def test_cancel_queued_then_again(api):
    task_id = create(api).json()["task_id"]
    response = api("post", "/v1/task/cancel", {"task_id": task_id, "reason": "no longer needed"})
    assert response.status_code == 200
    assert (response.json()["status"], response.json()["bridge_status"]) == ("failed", "cancelled")
    again = api("post", "/v1/task/cancel", {"task_id": task_id})
    assert again.status_code == 409 and "already ended (cancelled)" in again.json()["error"]
    output = api("get", "/v1/task/output", {"task_id": task_id}).json()
    assert output["retrieval_status"] == "success" and output["task"]["error"] == "no longer needed"


def running_task_with_requests(n: int) -> Task:
    task = actions.create_task(actions.TaskSpec(prompt="say hi"))
    Task.objects.filter(pk=task.pk).update(status=Status.RUNNING, worker=actions.register_worker(1))
    for i in range(n):
        actions.record_permission_request(task, request_id=f"r{i}", tool_name="Bash", tool_input={"command": f"c{i}"})
    return task


def test_permission_decisions(api):
    task = running_task_with_requests(3)
    task_id = str(task.public_id)
    pending = api("get", "/v1/permissions", {"task_id": task_id}).json()["permissions"]
    assert [p["request_id"] for p in pending] == ["r0", "r1", "r2"]
    assert [p["request_id"] for p in api("get", "/v1/task", {"task_id": task_id}).json()["pending_permissions"]] == [
        "r0",
        "r1",
        "r2",
    ]

    bad = api("post", "/v1/task/permission", {"task_id": task_id, "behavior": "maybe"})
    assert bad.status_code == 422 and "behavior" in bad.json()["error"]
    bad_input = api("post", "/v1/task/permission", {"task_id": task_id, "behavior": "allow", "updatedInput": [1]})
    assert bad_input.status_code == 422

    by_id = api("post", "/v1/task/permission", {"task_id": task_id, "behavior": "deny", "request_id": "r2"}).json()
    assert (by_id["request_id"], by_id["status"], by_id["decided_via"]) == ("r2", "denied", "api")
    oldest = api(
        "post", "/v1/task/permission", {"task_id": task_id, "behavior": "allow", "updatedInput": {"command": "safe"}}
    ).json()
    assert (oldest["request_id"], oldest["updated_input"]) == ("r0", {"command": "safe"})

    twice = api("post", "/v1/task/permission", {"task_id": task_id, "behavior": "allow", "request_id": "r0"})
    assert twice.status_code == 409 and "already allowed" in twice.json()["error"]
    unknown = api("post", "/v1/task/permission", {"task_id": task_id, "behavior": "allow", "request_id": "zz"})
    assert unknown.status_code == 404
    assert PermissionRequest.objects.get(request_id="r0").updated_input == {"command": "safe"}


def test_decision_on_a_finished_task_is_409(api):
    task = running_task_with_requests(1)
    actions.finish_task(task, status=Status.DONE, exit_code=0)
    assert PermissionRequest.objects.get(task=task).status == "cancelled"
    response = api("post", "/v1/task/permission", {"task_id": str(task.public_id), "behavior": "allow"})
    assert response.status_code == 409 and "has ended" in response.json()["error"]


def test_events_since(api):
    task = running_task_with_requests(2)
    body = api("get", "/v1/task/events", {"task_id": str(task.public_id), "since": 1}).json()
    assert [e["seq"] for e in body["events"]] == [2, 3] and body["last_seq"] == 3
    assert [e["kind"] for e in body["events"]] == ["permission_request", "permission_request"]
    assert api("get", "/v1/task/events", {"task_id": str(task.public_id), "since": -1}).status_code == 422


def test_openapi_schema_is_served(api):
    schema = api("get", "/v1/openapi.json").json()
    assert "/v1/task/create" in schema["paths"] and "/v1/task/permission" in schema["paths"]


def test_secret_key_is_not_in_the_child_environment_by_default(settings, monkeypatch):
    from jobs.agents.executors import child_env

    monkeypatch.setenv("DJANGO_SECRET_KEY", "s")
    monkeypatch.setenv("LC_ALL", "C.UTF-8")
    monkeypatch.setenv("CLAUDE_CODE_X", "1")
    env = child_env()
    assert "DJANGO_SECRET_KEY" not in env and env["LC_ALL"] == "C.UTF-8" and env["CLAUDE_CODE_X"] == "1"
    assert env["PATH"] == os.environ["PATH"]


def test_api_docs_need_a_token_and_are_served_offline(client, token):
    assert client.get("/v1/docs").status_code == 401
    assert client.get("/v1/openapi.json").status_code == 401
    browser = client.get("/v1/docs", headers={"Accept": "text/html,application/xhtml+xml"})
    assert browser.status_code == 302 and browser["Location"] == "/login/?next=/v1/docs", "a browser is sent to log in"
    page = client.get("/v1/docs", headers={"Authorization": f"Bearer {token}"})
    assert page.status_code == 200
    assert b"/static/ninja/swagger-ui-bundle.js" in page.content and b"cdn" not in page.content.lower()


@pytest.mark.parametrize(
    ("body", "words"),
    [
        ({"sessionId": "--dangerously-skip-permissions"}, "not starting with '-'"),
        ({"model": "-x"}, "not starting with '-'"),
        ({"allowed_tools": ["Read", "--help"]}, "not starting with '-'"),
        ({"skills": ["a"]}, "claude tasks take no 'skills' option"),
        ({"agent": "hermes", "allowed_tools": ["Read"]}, "hermes tasks take no 'allowed_tools' option"),
        ({"model": "two\nlines"}, "one line"),
    ],
)
def test_values_that_reach_the_agents_argv_are_checked(api, body, words):
    response = create(api, **body)
    assert response.status_code == 400, response.content
    assert words in response.json()["error"]
    assert Task.objects.count() == 0


def test_decision_and_cancel_texts_are_bounded(api):
    task = running_task_with_requests(1)
    task_id = str(task.public_id)
    long = api("post", "/v1/task/permission", {"task_id": task_id, "behavior": "deny", "message": "x" * 10_001})
    assert long.status_code == 422 and "message: String should have at most 10000" in long.json()["error"]
    huge = {"command": "x" * (1024 * 1024)}
    edited = api("post", "/v1/task/permission", {"task_id": task_id, "behavior": "allow", "updatedInput": huge})
    assert edited.status_code == 400 and "updatedInput is 1048591 bytes as JSON" in edited.json()["error"]
    cancel = api("post", "/v1/task/cancel", {"task_id": task_id, "reason": "r" * 2001})
    assert cancel.status_code == 422 and "reason: String should have at most 2000" in cancel.json()["error"]
    odd = [("message", {"message": "\u0000"}), ("updatedInput", {"updatedInput": {"k": "\u0000"}})]
    for field, body in [*odd, ("updatedInput", {"updatedInput": {"\ud800": 1}})]:
        refused = api("post", "/v1/task/permission", {"task_id": task_id, "behavior": "allow", **body})
        assert refused.status_code in (400, 422) and field in refused.json()["error"], refused.json()
    unstorable = api("post", "/v1/task/cancel", {"task_id": task_id, "reason": "\u0000"})
    assert unstorable.status_code == 400 and unstorable.json()["field"] == "reason"
    assert PermissionRequest.objects.get(task=task).status == "pending"


def test_every_refusal_carries_a_stable_code(api, client):
    """Clients branch on `code`, not on the wording: each kind of refusal names its own."""
    task = running_task_with_requests(1)
    task_id = str(task.public_id)
    api("post", "/v1/task/permission", {"task_id": task_id, "behavior": "allow", "request_id": "r0"})
    refusals = {
        "no_such_task": api("get", "/v1/task", {"task_id": "6f1c-not-a-task"}),
        "invalid_json": api("post", "/v1/task/create", "{not json"),
        "invalid_request": api("post", "/v1/task/create", {"prompt": "hi", "surprise": 1}),
        "invalid_input": api("post", "/v1/task/create", {"prompt": "   "}),
        "already_decided": api(
            "post", "/v1/task/permission", {"task_id": task_id, "behavior": "deny", "request_id": "r0"}
        ),
        "no_such_request": api(
            "post", "/v1/task/permission", {"task_id": task_id, "behavior": "deny", "request_id": "x"}
        ),
        "nothing_pending": api("post", "/v1/task/permission", {"task_id": task_id, "behavior": "deny"}),
        "unauthenticated": client.get("/v1/tasks"),
    }
    for code, response in refusals.items():
        body = response.json()
        assert response.status_code >= 400 and body["code"] == code and body["error"], (code, body)
    actions.finish_task(task, status=Status.DONE)
    ended = api("post", "/v1/task/cancel", {"task_id": task_id})
    assert (ended.status_code, ended.json()["code"]) == (409, "task_ended")


def test_the_schema_documents_every_answer_and_what_the_server_enforces(api):
    schema = api("get", "/v1/openapi.json").json()
    for path, item in schema["paths"].items():
        for method, operation in item.items():
            answers = operation["responses"]
            assert {"200", "400", "401", "422", "500", "503"} <= set(answers), (method, path)
            for status, answer in answers.items():
                if not status.startswith("2"):  # 2xx: the operation's own answer (202: a merge still under way)
                    assert answer["content"]["application/json"]["schema"]["$ref"].endswith("/ErrorOut")
    assert {"413", "429", "403"} <= set(schema["paths"]["/v1/task/create"]["post"]["responses"])
    create = schema["components"]["schemas"]["CreateTaskIn"]["properties"]
    assert create["prompt"]["minLength"] == 1 and create["prompt"]["maxLength"] > 0
    assert create["max_turns"]["anyOf"][0] == {"type": "integer", "minimum": 1, "maximum": 10_000}
    assert create["skip_permissions"]["type"] == "boolean" and create["agent"]["maxLength"] == 20
    assert schema["components"]["schemas"]["ErrorOut"]["required"] == ["error", "code"]


def test_a_body_over_the_limit_is_413_in_json(api, settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1000
    response = api("post", "/v1/task/create", {"prompt": "x" * 2000})
    assert response.status_code == 413
    assert response.json()["code"] == "too_large" and response.json()["max_bytes"] == 1000


def test_unknown_query_parameters_paths_and_methods_get_json_answers(api):
    misspelt = api("get", "/v1/permissions", {"taskid": "x"})
    assert misspelt.status_code == 422 and "unknown query parameter 'taskid'" in misspelt.json()["error"]
    assert "task_id" in misspelt.json()["error"], "it names what the operation takes"
    twice = api("get", "/v1/tasks?cwd=/a&cwd=/b")
    assert twice.status_code == 422 and "'cwd' given more than once" in twice.json()["error"]
    nowhere = api("get", "/v1/no-such-thing")
    assert nowhere.status_code == 404 and nowhere.json()["code"] == "not_found"
    wrong = api("get", "/v1/task/create")
    assert wrong.status_code == 405 and wrong.json()["code"] == "method_not_allowed" and wrong["Allow"] == "POST"
    stream = api("post", "/v1/task/output/stream?task_id=x", {})
    assert stream.status_code == 405 and stream.json()["code"] == "method_not_allowed" and stream["Allow"] == "GET"


def test_a_bug_is_logged_with_its_traceback_and_answered_500_in_json(api, monkeypatch, caplog):
    def broken(*args, **kwargs):
        raise RuntimeError("a bug")

    monkeypatch.setattr(actions, "live_supervisors", broken)
    with caplog.at_level("ERROR"):
        response = api("get", "/v1/workers")
    assert response.status_code == 500 and response.json()["code"] == "internal_error"
    assert "a bug" not in response.json()["error"], "the details stay in the log"
    logged = [r for r in caplog.records if r.exc_info and "GET /v1/workers" in r.getMessage()]
    assert logged and "RuntimeError: a bug" in caplog.text


@pytest.mark.parametrize(
    ("params", "field"),
    [({"limit": 10**40}, "limit"), ({"offset": 2**31}, "offset"), ({"offset": -1}, "offset"), ({"cwd": "\x00"}, "cwd")],
)
def test_list_bounds_are_checked(api, params, field):
    response = api("get", "/v1/tasks", params)
    assert response.status_code in (400, 422) and field in response.json()["error"], response.json()


def test_events_since_beyond_what_the_database_counts_is_refused(api):
    task = running_task_with_requests(1)
    response = api("get", "/v1/task/events", {"task_id": str(task.public_id), "since": 2**31})
    assert response.status_code == 422 and "since" in response.json()["error"]


@pytest.mark.parametrize(
    ("raw", "status", "code"),
    [
        (b"GET /v1/task?task_id=" + b"a" * 70_000 + b" HTTP/1.1\r\n", 414, "uri_too_long"),
        ("GET /v1/task/output?task_id=6f1c… HTTP/1.1\r\nHost: x\r\n\r\n".encode(), 400, "bad_http_request"),
        (b"GET /health HTTP/1.1\r\nX-Big: " + b"b" * 70_000 + b"\r\n\r\n", 431, "headers_too_large"),
    ],
)
def test_requests_twisted_cannot_parse_get_a_json_answer_not_a_dropped_connection(raw, status, code):
    """runbridge's HTTP connection (webserver.HttpChannel) answers what never reaches Django in the API's shape; a
    60,000-character task_id is under its line limit and reaches Django (test_inputs.py checks that answer)."""
    from twisted.internet.task import Clock
    from twisted.internet.testing import StringTransport

    from jobs.web.webserver import MAX_REQUEST_LINE_BYTES, HttpChannel

    assert len("GET /v1/task?task_id=" + "a" * 60_000 + " HTTP/1.1") < MAX_REQUEST_LINE_BYTES
    channel, transport = HttpChannel(), StringTransport()
    channel.callLater = Clock().callLater  # no reactor: the connection's idle timer runs on a fake clock
    channel.makeConnection(transport)
    channel.dataReceived(raw)
    head, _, body = transport.value().partition(b"\r\n\r\n")
    assert head.startswith(f"HTTP/1.1 {status} ".encode()) and b"application/json" in head
    assert json.loads(body)["code"] == code and transport.disconnecting


def test_a_bug_in_a_middleware_is_logged_and_answered_500_in_json_under_v1(token, monkeypatch, caplog):
    from django.contrib.sessions.middleware import SessionMiddleware

    def broken(self, request, response):
        raise RuntimeError("a middleware bug")

    monkeypatch.setattr(SessionMiddleware, "process_response", broken)
    client = Client(raise_request_exception=False, HTTP_AUTHORIZATION=f"Bearer {token}")
    with caplog.at_level("ERROR", logger="django.request"):
        response = client.get("/v1/tasks")
    assert response.status_code == 500 and response.json()["code"] == "internal_error"
    assert any(r.exc_info and r.name == "django.request" for r in caplog.records), "logged with its traceback"
    page = client.get("/", headers={"Accept": "text/html"})
    assert page.status_code == 500 and page["Content-Type"].startswith("text/html"), "a browser's page stays HTML"
