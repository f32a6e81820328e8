"""Every reply the Hermes skill shows (`# -> {...}` under a curl line) against what the API really returns, so the
skill cannot drift from it: each key it shows is there, each value has the real value's type, and each status word is
one that field can hold."""

import json
import re

import pytest
from django.test import Client

from jobs import actions
from jobs.actions import create_token
from jobs.core.errors import MEANINGS, ErrorCode
from jobs.core.vocabulary import PermissionStatus, Status
from jobs.management.commands.install_hermes_skill import render_skill
from jobs.models import Task
from jobs.web import hbridge
from tests.support import wait_for

BRIDGE_WORDS = {str(s) for s in Status}
HBRIDGE_WORDS = set(hbridge.WORDS)
PERMISSION_WORDS = {str(s) for s in PermissionStatus}
# The words each status field of each example's reply can hold: (endpoint, where in the reply) -> words.
VOCABULARY = {
    ("/v1/task/create", "status"): {hbridge.CREATED},
    ("/v1/task/create", "bridge_status"): BRIDGE_WORDS,
    ("/v1/task/events", "status"): BRIDGE_WORDS,
    ("/v1/task/events", "events.data.status"): BRIDGE_WORDS,
    ("/v1/permissions", "permissions.status"): {PermissionStatus.PENDING},
    ("/v1/task/permission", "status"): PERMISSION_WORDS,
    ("/v1/task/output", "retrieval_status"): {"success", "pending"},
    ("/v1/task/output", "task.status"): HBRIDGE_WORDS - {hbridge.CREATED},
    ("/v1/task/output", "task.bridge_status"): BRIDGE_WORDS,
    ("/v1/task/cancel", "status"): HBRIDGE_WORDS - {hbridge.CREATED},
    ("/v1/task/cancel", "bridge_status"): BRIDGE_WORDS,
    ("/v1/task/changes", "files.status"): {"added", "modified", "deleted", "renamed"},
}
STATUS_KEYS = ("status", "bridge_status", "retrieval_status")
ASKS = 'ask Bash {"command": "true"}\nsay all done'


def skill_examples(text: str) -> dict[str, list]:
    """endpoint -> the replies shown after its curl lines, as JSON (`, ...` stands for more and is dropped)."""
    examples: dict[str, list] = {}
    endpoint, reply = "", []
    for line in [*text.splitlines(), ""]:
        if reply and not line.startswith("#     "):
            shown = re.sub(r",\s*\.\.\.(?=\s*[\]}])", "", " ".join(reply))
            examples.setdefault(endpoint, []).append(json.loads(shown))
            reply = []
        if line.startswith("curl "):
            endpoint = re.search(r"\$B(/v1/[\w/]+)", line)[1]
        elif line.startswith("# -> "):
            reply = [line.removeprefix("# -> ")]
        elif reply:
            reply.append(line.removeprefix("#     "))
    return examples


def is_placeholder(value: object) -> bool:
    return isinstance(value, str) and "..." in value


def differences(shown: object, real: object, endpoint: str, where: str = "") -> list[str]:
    """How an example differs from a real reply; [] when it shows only what is there, typed as it is."""
    at = where or "the reply"
    if isinstance(shown, dict):
        if not isinstance(real, dict):
            return [f"{at}: the skill shows an object, the API returns {real!r}"]
        found = []
        for key, value in shown.items():
            inner = f"{where}.{key}" if where else key
            if key not in real:
                found.append(f"{inner}: shown by the skill, not in the API's reply {sorted(real)}")
                continue
            found += differences(value, real[key], endpoint, inner)
        return found
    if isinstance(shown, list):
        if not isinstance(real, list) or len(real) < len(shown):
            return [f"{at}: the skill shows {len(shown)} items, the API returns {real!r}"]
        return [problem for s, r in zip(shown, real, strict=False) for problem in differences(s, r, endpoint, where)]
    if where.rsplit(".", 1)[-1] in STATUS_KEYS:
        words = VOCABULARY.get((endpoint, where))
        if words is None:
            return [f"{endpoint} {at}: a status word this test has no vocabulary for (add it to VOCABULARY)"]
        if shown not in words:
            return [f"{endpoint} {at}: the skill shows {shown!r}, which is not one of {sorted(words)}"]
    number = (int, float)
    if isinstance(shown, number) and not isinstance(shown, bool) and isinstance(real, number):
        return []
    if is_placeholder(shown) and isinstance(real, str):
        return []
    if type(shown) is not type(real):
        return [f"{endpoint} {at}: the skill shows {shown!r}, the API returns {real!r}"]
    return []


@pytest.fixture
def api(supervisor):
    client = Client(HTTP_AUTHORIZATION=f"Bearer {create_token('skill-examples')[1]}")

    def call(path: str, body: dict | None = None, **query) -> dict:
        if body is None:
            response = client.get(path, query)
        else:
            response = client.post(path, json.dumps(body), content_type="application/json")
        assert response.status_code == 200, response.content
        return response.json()

    return call


def real_replies(api, work_root) -> dict[str, dict]:
    """One reply of each endpoint the skill shows, from a task that asks a permission and one that is cancelled."""
    replies = {"/v1/task/create": api("/v1/task/create", {"prompt": ASKS, "cwd": str(work_root)})}
    task = Task.objects.get(public_id=replies["/v1/task/create"]["task_id"])
    wait_for(task, lambda t: bool(actions.pending_permissions(t)))
    replies["/v1/permissions"] = api("/v1/permissions", task_id=str(task.public_id))
    request_id = replies["/v1/permissions"]["permissions"][0]["request_id"]
    decision = {"task_id": str(task.public_id), "request_id": request_id, "behavior": "allow"}
    replies["/v1/task/permission"] = api("/v1/task/permission", decision)
    wait_for(task)
    replies["/v1/task/events"] = api("/v1/task/events", task_id=str(task.public_id), since=0)
    replies["/v1/task/output"] = api("/v1/task/output", task_id=str(task.public_id))
    (work_root / "edited.txt").write_text("one\n")
    edits = api(
        "/v1/task/create", {"prompt": "write edited.txt two", "cwd": str(work_root), "permission_mode": "bypass"}
    )
    wait_for(Task.objects.get(public_id=edits["task_id"]))
    replies["/v1/task/changes"] = api("/v1/task/changes", task_id=edits["task_id"])

    slow = api("/v1/task/create", {"prompt": "sleep 30", "cwd": str(work_root), "permission_mode": "bypass"})
    wait_for(Task.objects.get(public_id=slow["task_id"]), lambda t: t.status == Status.RUNNING)
    replies["/v1/task/cancel"] = api("/v1/task/cancel", {"task_id": slow["task_id"]})
    wait_for(Task.objects.get(public_id=slow["task_id"]))
    return replies


def test_every_reply_the_skill_shows_matches_the_api(api, work_root):
    examples = skill_examples(render_skill("http://127.0.0.1:8800"))
    replies = real_replies(api, work_root)

    problems = [
        problem
        for endpoint, shown in examples.items()
        for example in shown
        for problem in differences(example, replies.get(endpoint), endpoint)
    ]
    assert problems == []
    assert set(examples) == set(replies), "every example is compared with a real reply, and each endpoint is shown"


def test_the_comparison_catches_what_the_skill_once_said():
    """The two mistakes the skill made (issue 13) are each caught."""
    real_output = {"retrieval_status": "success", "task": {"status": "done", "error": ""}}
    real_create = {"task_id": "abc", "status": "created", "bridge_status": "queued"}

    null_error = {"retrieval_status": "success", "task": {"status": "done", "error": None}}
    assert differences(null_error, real_output, "/v1/task/output") != []
    assert differences({"task_id": "6f1c...", "status": "queued"}, real_create, "/v1/task/create") != []
    assert differences({"task_id": "6f1c...", "status": "created"}, real_create, "/v1/task/create") == []
    assert differences({"missing": 1}, real_create, "/v1/task/create") != []


def test_the_error_the_skill_shows_is_the_one_the_api_sends_for_an_unknown_task(db):
    [shown] = re.findall(r"Errors are JSON `(\{.*?\})`", render_skill("http://127.0.0.1:8800"))
    client = Client(HTTP_AUTHORIZATION=f"Bearer {create_token('skill-errors')[1]}")

    response = client.get("/v1/task", {"task_id": "no-such-task"})

    assert response.status_code == 404
    assert set(json.loads(shown)) <= set(response.json()), response.json()
    assert json.loads(shown)["code"] == response.json()["code"], "the code the skill shows is the one sent"


# An HTTP status and the codes named after it: "404 `no_such_task` or `no_such_request`".
STATUS_AND_CODES = re.compile(r"\b([1-5]\d\d)\s+((?:`[a-z_]+`(?:,?\s+or\s+|,\s+)?)+)")


def named_codes(text: str) -> list[tuple[int | None, str]]:
    """(HTTP status or None, code) for every error code the skill names: after a status, or as a JSON `"code"`."""
    after_status = [
        (int(status), code)
        for status, codes in STATUS_AND_CODES.findall(text)
        for code in re.findall(r"`([a-z_]+)`", codes)
    ]
    return after_status + [(None, code) for code in re.findall(r'"code": "([^"]*)"', text)]


def test_every_error_code_the_skill_names_is_one_the_server_sends_with_that_status():
    named = named_codes(render_skill("http://127.0.0.1:8800"))

    assert len(named) >= 10, "the Errors section names the usual codes after their statuses"
    unknown = [code for _, code in named if code not in set(ErrorCode)]
    assert unknown == [], f"codes the server never sends (jobs/core/errors.py ErrorCode): {unknown}"
    wrong = [(status, code) for status, code in named if status and MEANINGS[ErrorCode(code)].http_status != status]
    assert wrong == [], "codes named after an HTTP status they are not sent with"


def code_in_order(text: str) -> list[str]:
    """The skill's shell, in the order a reader meets it: each ```sh block, and each inline `code` span outside them."""
    pieces = []
    for block, inline in re.findall(r"```sh\n(.*?)```|`([^`\n]+)`", text, flags=re.S):
        pieces.append(block or inline)
    return pieces


def undefined_variables(text: str, environment: set[str]) -> list[str]:
    """Shell variables used before any example defines them, other than the environment's and those with a
    default (`${NAME:-…}`)."""
    defined, undefined = set(environment), []
    for piece in code_in_order(text):
        for line in piece.splitlines():
            for braced, default, bare in re.findall(r"\$(?:\{([A-Za-z_]\w*)(:?-)?|([A-Za-z_]\w*))", line):
                name = braced or bare
                if name not in defined and not default:
                    undefined.append(f"${name} in {line.strip()!r}")
            defined |= set(re.findall(r"^\s*(?:export\s+)?([A-Za-z_]\w*)=", line))
    return undefined


def test_the_skills_shell_examples_define_every_variable_before_using_it():
    text = render_skill("http://127.0.0.1:8800")
    environment = set(re.findall(r"^  - name: (\w+)$", text, flags=re.M))

    assert environment == {"BRIDGE_TOKEN"}, "the variables the skill asks Hermes to set"
    assert undefined_variables(text, environment) == []


def test_the_variable_check_catches_a_use_before_the_definition():
    before = 'Check it with `curl -s "$B/health"`.\n```sh\nB=http://x\n```\n'
    after = '```sh\nB=http://x\n```\nCheck it with `curl -s "$B/health"`.\n'

    assert undefined_variables(before, set()) == ["$B in 'curl -s \"$B/health\"'"]
    assert undefined_variables(after, set()) == []
    assert undefined_variables("`${BRIDGE_URL:-http://x}`", set()) == []
    assert undefined_variables("`$B-x ${B}`", set()) == ["$B in '$B-x ${B}'", "$B in '$B-x ${B}'"]
