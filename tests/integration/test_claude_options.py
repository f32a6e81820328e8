"""Claude Code's options as people use them with `claude -p` (permission_mode acceptEdits and plan, disallowed_tools,
append_system_prompt, add_dirs): one check in the service layer, the same answers on REST, MCP and the new-task form,
part of what makes two tasks the same job, and on the command line of the agent the supervisor starts."""

import asyncio
import json
import os
import threading
from pathlib import Path

import pytest
from django.db import transaction
from django.test import Client as DjangoClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mcp import Client

from jobs import actions
from jobs.actions.tasks import MAX_ADD_DIRS, MAX_SYSTEM_PROMPT_CHARS
from jobs.core.errors import BridgeError, InvalidInput, Refused
from jobs.core.vocabulary import CLAUDE_PERMISSION_MODES, PermissionMode
from jobs.mcp.server import get_server
from jobs.models import Task
from tests.support import make_task, wait_for

ANY_TEXT = st.text(st.characters(codec=None), max_size=300)  # NUL and lone surrogates included
NOT_TEXT = (
    st.integers()
    | st.booleans()
    | st.floats()
    | st.lists(st.text(max_size=3), max_size=2)
    | st.dictionaries(st.text(max_size=2), st.integers(), max_size=1)
)
GENERATED = settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck), database=None)
CLAUDE_OPTIONS = ("disallowed_tools", "append_system_prompt", "add_dirs")
OFFERED_MODES = ("approve", "bypass", "acceptEdits", "plan")  # `skip` comes with skip_permissions only


def storable(text: str) -> bool:
    return "\x00" not in text and not any(0xD800 <= ord(c) <= 0xDFFF for c in text)


def queued(work_root: Path, options: dict | None = None, **fields) -> Task:
    """Create (or join) a Claude task in its own savepoint, so a refusal leaves the test's transaction usable."""
    spec = actions.TaskSpec(prompt="hi", cwd=str(work_root), options=options or {}, **fields)
    with transaction.atomic():
        return actions.create_or_join_task(spec)[0]


@pytest.fixture
def tree(work_root, tmp_path) -> dict[str, Path]:
    """Inside the root: folders, a file, a symlink to a folder inside and one to a folder outside the root."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (work_root / "a" / "b").mkdir(parents=True)
    (work_root / "f").write_text("a file")
    (work_root / "in-link").symlink_to(work_root / "a")
    (work_root / "out-link").symlink_to(outside)
    return {"root": work_root, "outside": outside}


# --- the one check, on generated input --------------------------------------------------------------------------


@pytest.mark.django_db
@GENERATED
@given(text=ANY_TEXT | st.integers(MAX_SYSTEM_PROMPT_CHARS - 2, MAX_SYSTEM_PROMPT_CHARS + 2).map(lambda n: "é" * n))
def test_any_text_for_the_system_prompt_is_refused_naming_it_or_stored_as_sent(work_root, text):
    try:
        task = queued(work_root, {"append_system_prompt": text})
    except InvalidInput as refused:
        assert refused.detail["field"] == "append_system_prompt", refused.as_dict()
        assert not storable(text) or not text.strip() or len(text) > MAX_SYSTEM_PROMPT_CHARS
        return
    task.refresh_from_db()
    assert storable(text) and text.strip() and len(text) <= MAX_SYSTEM_PROMPT_CHARS
    assert task.options["append_system_prompt"] == text


def is_tool_name(text: str) -> bool:
    """What goes on the CLI's command line as one entry: storable, one line of at most 200 characters, not a flag."""
    name = text.strip()
    one_line = not any(ord(c) < 32 for c in name)
    return storable(text) and bool(name) and not name.startswith("-") and len(name) <= 200 and one_line


@pytest.mark.django_db
@GENERATED
@given(names=st.lists(ANY_TEXT, max_size=4))
def test_any_list_of_tools_to_deny_is_refused_naming_it_or_stored_stripped(work_root, names):
    try:
        task = queued(work_root, {"disallowed_tools": names})
    except InvalidInput as refused:
        assert refused.detail["field"] == "an entry of disallowed_tools", refused.as_dict()
        assert not all(map(is_tool_name, names))
        return
    task.refresh_from_db()
    assert all(map(is_tool_name, names))
    assert task.options.get("disallowed_tools", []) == [name.strip() for name in names]


@pytest.mark.django_db
@GENERATED
@given(option=st.sampled_from(CLAUDE_OPTIONS), value=NOT_TEXT)
def test_a_claude_code_option_of_the_wrong_kind_is_refused_naming_it(work_root, option, value):
    listed = option != "append_system_prompt"
    if listed and isinstance(value, list):
        value = [7, *value]  # a list, but with an entry that is not text
    with pytest.raises(InvalidInput) as refused:
        queued(work_root, {option: value})
    assert refused.value.detail["field"] in (option, f"an entry of {option}"), refused.value.as_dict()
    assert refused.value.message.startswith((option, f"an entry of {option}"))


PIECES = ["a", "b", "f", "in-link", "out-link", "..", ".", "missing", "", "é", "x\x00y", "\udc80"]


@st.composite
def directory_texts(draw, root: Path) -> str:
    """Paths made of the tree's names, `..` and odd text: absolute below the root, relative, or from `~`."""
    parts = draw(st.lists(st.sampled_from(PIECES), min_size=0, max_size=4))
    start = draw(st.sampled_from([f"{root}/", f"{root}/", "", "~/", "/"]))
    return start + "/".join(parts)


def real_path_inside(text: str, root: Path) -> str | None:
    """What the cwd's rule makes of `text`: its real path when absolute, storable, a directory inside `root`."""
    if not storable(text) or not os.path.isabs(text):
        return None
    real = os.path.realpath(text)
    inside = real == str(root) or real.startswith(f"{root}/")
    return real if inside and os.path.isdir(real) else None


@pytest.mark.django_db
@GENERATED
@given(data=st.data())
def test_any_directory_to_add_is_refused_naming_add_dirs_or_stored_as_its_real_path_inside_the_roots(tree, data):
    root = tree["root"]
    texts = data.draw(st.lists(directory_texts(root), min_size=1, max_size=3))
    expected = [real_path_inside(text, root) for text in texts]
    try:
        task = queued(root, {"add_dirs": texts})
    except (InvalidInput, Refused) as refused:
        assert refused.message.startswith("add_dirs"), refused.as_dict()
        assert None in expected, (texts, refused.message)
        return
    task.refresh_from_db()
    assert task.options["add_dirs"] == expected, texts


def test_a_symlink_out_of_the_roots_is_refused_naming_the_field_and_where_it_leads(db, tree):
    with pytest.raises(Refused) as refused:
        queued(tree["root"], {"add_dirs": [str(tree["root"] / "out-link")]})
    assert refused.value.message.startswith(f"add_dirs entry {str(tree['root'] / 'out-link')!r} resolves to")
    assert str(tree["outside"]) in refused.value.message and "outside the allowed roots" in refused.value.message


@pytest.mark.parametrize(
    ("value", "words"),
    [
        ("/work", "add_dirs must be a list of absolute paths"),
        (["relative/dir"], "add_dirs entry must be an absolute path, got 'relative/dir'"),
        (["f"], "add_dirs entry must be an absolute path"),
        (["/" * 2 + "n" * 256], "add_dirs has a name of 256 bytes"),
    ],
)
def test_add_dirs_that_are_not_absolute_paths_in_a_list_are_refused_in_words(db, work_root, value, words):
    with pytest.raises(InvalidInput, match=words):
        queued(work_root, {"add_dirs": value})


def test_add_dirs_are_bounded_in_number(db, tree):
    most = [str(tree["root"] / "a")] * MAX_ADD_DIRS
    assert queued(tree["root"], {"add_dirs": most}).options["add_dirs"] == most
    with pytest.raises(InvalidInput, match=f"add_dirs has {MAX_ADD_DIRS + 1} entries, over the limit of 20"):
        queued(tree["root"], {"add_dirs": [*most, str(tree["root"])]})


@pytest.mark.django_db
@GENERATED
@given(mode=ANY_TEXT | st.sampled_from(OFFERED_MODES + ("skip", "default", "bypassPermissions")))
def test_any_permission_mode_is_refused_naming_it_or_one_of_the_words_offered(work_root, mode):
    try:
        task = queued(work_root, permission_mode=mode)
    except InvalidInput as refused:
        assert refused.detail["field"] == "permission_mode" and mode not in OFFERED_MODES
        return
    assert task.permission_mode == mode and mode in OFFERED_MODES


@pytest.mark.parametrize("mode", sorted(CLAUDE_PERMISSION_MODES))
def test_claude_codes_own_modes_do_not_go_with_skip_permissions(db, work_root, mode):
    with pytest.raises(InvalidInput, match=f"permission_mode '{mode}' does not: give one or the other") as refused:
        queued(work_root, permission_mode=mode, skip_permissions=True)
    assert refused.value.detail["field"] == "skip_permissions"


@pytest.mark.parametrize(
    ("fields", "words"),
    [
        *[
            ({"options": {option: value}}, f"hermes tasks take no '{option}' option (it is Claude Code's: give it to")
            for option, value in (("disallowed_tools", ["Bash"]), ("append_system_prompt", "x"), ("add_dirs", ["/"]))
        ],
        *[
            ({"permission_mode": mode}, f"permission_mode '{mode}' is Claude Code's (give it to a claude task)")
            for mode in sorted(CLAUDE_PERMISSION_MODES)
        ],
    ],
)
def test_claude_codes_options_given_to_a_hermes_task_are_refused_saying_claude_takes_them(db, work_root, fields, words):
    with pytest.raises(InvalidInput, match=words.replace("(", r"\(").replace(")", r"\)")):
        queued(work_root, agent="hermes", **fields)
    assert not Task.objects.exists()


# --- the same job, and a follow-up -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "change",
    [
        {"permission_mode": PermissionMode.ACCEPT_EDITS},
        {"permission_mode": PermissionMode.PLAN},
        {"options": {"disallowed_tools": ["WebFetch"]}},
        {"options": {"append_system_prompt": "Be brief."}},
        {"options": {"add_dirs": ["a"]}},  # made absolute below the root by the test
    ],
)
def test_tasks_that_differ_only_in_a_claude_code_option_are_different_jobs(db, tree, change):
    if "add_dirs" in change.get("options", {}):
        change = {"options": {"add_dirs": [str(tree["root"] / "a")]}}
    first = queued(tree["root"])
    other = queued(tree["root"], **change)
    assert other.pk != first.pk
    assert queued(tree["root"], **change).pk == other.pk  # sent again: the same job, joined


def test_a_follow_up_keeps_claude_codes_mode_and_options(db, tree):
    options = {"disallowed_tools": ["WebFetch"], "append_system_prompt": "Be brief.", "add_dirs": [str(tree["root"])]}
    task = queued(tree["root"], options, permission_mode=PermissionMode.PLAN)
    actions.link_session(task, "session-1")
    follow_up = actions.continue_task(task, "and then")
    assert (follow_up.permission_mode, follow_up.options) == (PermissionMode.PLAN, options)


# --- REST, MCP and the form: one rule ----------------------------------------------------------------------------


CASES = {  # what is sent, by name: each interface refuses it in the service layer's words
    "outside the roots": {"add_dirs": lambda tree: [str(tree["outside"])]},
    "a symlink out": {"add_dirs": lambda tree: [str(tree["root"] / "out-link")]},
    "a relative path": {"add_dirs": lambda tree: ["a/b"]},
    "a missing folder": {"add_dirs": lambda tree: [str(tree["root"] / "missing")]},
    "a file": {"add_dirs": lambda tree: [str(tree["root"] / "f")]},
    "a tool that looks like a flag": {"disallowed_tools": lambda tree: ["--help"]},
}


def rest_create(body: dict) -> tuple[int, str]:
    token = actions.create_token("options")[1]
    response = DjangoClient(HTTP_AUTHORIZATION=f"Bearer {token}").post(
        "/v1/task/create", json.dumps(body), content_type="application/json"
    )
    return response.status_code, response.json().get("error", "")


def mcp_run(arguments: dict) -> tuple[bool, str]:
    async def call() -> tuple[bool, str]:
        async with Client(get_server()) as client:
            result = await client.call_tool("claude_run", {**arguments, "wait_s": 0})
        return bool(result.is_error), "\n".join(c.text for c in result.content if c.type == "text")

    return asyncio.run(call())


def form_post(browser: DjangoClient, fields: dict) -> tuple[int, list[str]]:
    as_text = {
        key: ", ".join(value) if key == "disallowed_tools" else "\n".join(value) if key == "add_dirs" else value
        for key, value in fields.items()
    }
    response = browser.post("/tasks/new", {"agent": "claude", "permission_mode": "approve", **as_text})
    errors = list(response.context["form"].non_field_errors()) if response.status_code == 200 else []
    return response.status_code, errors


@pytest.fixture
def browser(django_user_model) -> DjangoClient:
    client = DjangoClient()
    client.force_login(django_user_model.objects.create_superuser("alice", password="pw-alice-123"))
    return client


def action_words(fields: dict) -> BridgeError:
    options = {k: v for k, v in fields.items() if k not in ("prompt", "cwd", "permission_mode", "agent")}
    spec = actions.TaskSpec(prompt=fields["prompt"], cwd=fields["cwd"], options=options)
    with pytest.raises(BridgeError) as refused:
        actions.create_task(spec)
    return refused.value


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("case", sorted(CASES))
def test_rest_mcp_and_the_form_refuse_the_same_options_in_the_same_words(tree, browser, case):
    fields = {"prompt": "say hi", "cwd": str(tree["root"])}
    fields |= {key: make(tree) for key, make in CASES[case].items()}
    refusal = action_words(fields)

    status, rest_error = rest_create(fields)
    is_error, mcp_text = mcp_run({"task": fields["prompt"], **{k: v for k, v in fields.items() if k != "prompt"}})
    form_status, form_errors = form_post(browser, fields)

    assert (status, rest_error) == (refusal.http_status, refusal.message)
    assert is_error and f"ERROR: {refusal.message}" in mcp_text.splitlines(), mcp_text
    assert (form_status, form_errors) == (200, [refusal.message])
    assert not Task.objects.exists()


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(("option", "value"), [("add_dirs", ["/"]), ("disallowed_tools", ["Bash"])])
def test_rest_and_the_form_refuse_claude_codes_options_for_hermes_in_the_same_words(tree, browser, option, value):
    fields = {"prompt": "say hi", "cwd": str(tree["root"]), "agent": "hermes", option: value}
    with pytest.raises(InvalidInput) as refused:
        actions.create_task(
            actions.TaskSpec(prompt="say hi", cwd=str(tree["root"]), agent="hermes", options={option: value})
        )
    assert rest_create(fields) == (400, refused.value.message)
    assert form_post(browser, fields) == (200, [refused.value.message])


@pytest.mark.django_db(transaction=True)
def test_rest_mcp_and_the_form_store_the_same_options_the_same_way(tree, browser):
    sent = {
        "permission_mode": "acceptEdits",
        "disallowed_tools": ["Bash(git push:*)", "WebFetch"],
        "append_system_prompt": "Answer in French.\nBe brief.",
        "add_dirs": [str(tree["root"] / "in-link"), str(tree["root"] / "a" / "b")],
    }
    stored = {
        "disallowed_tools": sent["disallowed_tools"],
        "append_system_prompt": sent["append_system_prompt"],
        "add_dirs": [str(tree["root"] / "a"), str(tree["root"] / "a" / "b")],  # the real paths that were checked
    }
    assert rest_create({"prompt": "via REST", "cwd": str(tree["root"]), **sent})[0] == 200
    assert not mcp_run({"task": "via MCP", "cwd": str(tree["root"]), **sent})[0]
    assert form_post(browser, {"prompt": "via the form", "cwd": str(tree["root"]), **sent})[0] == 302
    tasks = Task.objects.order_by("id")
    assert [(t.prompt, t.permission_mode, t.options) for t in tasks] == [
        (prompt, "acceptEdits", stored) for prompt in ("via REST", "via MCP", "via the form")
    ]


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("body", "words"),
    [
        ({"add_dirs": ["/a"] * (MAX_ADD_DIRS + 1)}, f"add_dirs: List should have at most {MAX_ADD_DIRS} items"),
        ({"append_system_prompt": "x" * (MAX_SYSTEM_PROMPT_CHARS + 1)}, "append_system_prompt: String should have at"),
        ({"disallowed_tools": "Bash"}, "disallowed_tools: Input should be a valid list"),
        ({"permission_mode": "bypassPermissions"}, "permission_mode: Input should be 'approve', 'bypass', 'acceptEd"),
    ],
)
def test_rest_states_the_limits_in_its_schema(work_root, body, words):
    status, error = rest_create({"prompt": "say hi", "cwd": str(work_root), **body})
    assert status == 422 and words in error, error


# --- on the agent's command line ---------------------------------------------------------------------------------


def test_the_options_reach_the_agents_command_line(supervisor, work_root):
    (work_root / "extra").mkdir()
    options = {
        "disallowed_tools": ["Bash(git push:*)", "WebFetch"],
        "append_system_prompt": "-Answer in French.\nBe brief.",
        "add_dirs": [str(work_root / "extra")],
    }
    task = wait_for(make_task("argv", cwd=str(work_root), permission_mode="acceptEdits", options=options))
    assert task.status == "done", task.error
    [printed] = [event.data["text"] for event in actions.events_since(task) if event.kind == "text"]
    argv = json.loads(printed)
    assert argv[argv.index("--permission-mode") + 1] == "acceptEdits"
    assert argv[argv.index("--permission-prompt-tool") + 1] == "stdio"
    assert argv[argv.index("--disallowedTools") + 1] == "Bash(git push:*),WebFetch"
    assert "--append-system-prompt=-Answer in French.\nBe brief." in argv
    assert f"--add-dir={work_root / 'extra'}" in argv


# --- where the rule must hold too: at the claim and the spawn, and for a token limited to roots ---------------------


def test_an_added_directory_swapped_for_a_symlink_out_is_refused_before_the_agent_starts(
    transactional_db, work_root, fake_agent, tmp_path
):
    from jobs.supervision.supervisor import Supervisor

    extra = work_root / "extra"
    extra.mkdir()
    task = make_task("argv", cwd=str(work_root), options={"add_dirs": [str(extra)]})
    extra.rmdir()
    (tmp_path / "outside").mkdir()
    extra.symlink_to(tmp_path / "outside")
    supervisor = Supervisor()
    thread = threading.Thread(target=supervisor.run, daemon=True)
    thread.start()
    try:
        task = wait_for(task)
    finally:
        supervisor.request_stop()
        thread.join(30)
    assert task.status == "failed" and "add_dirs" in task.error and "outside the allowed roots" in task.error


@pytest.mark.django_db
def test_a_token_limited_to_roots_reaches_no_directory_past_them_with_add_dirs(work_root):
    (work_root / "mine").mkdir()
    (work_root / "theirs").mkdir()
    token = actions.create_token("limited", roots=[str(work_root / "mine")])[1]
    body = {"prompt": "say hi", "cwd": str(work_root / "mine"), "add_dirs": [str(work_root / "theirs")]}
    response = DjangoClient(HTTP_AUTHORIZATION=f"Bearer {token}").post(
        "/v1/task/create", json.dumps(body), content_type="application/json"
    )
    assert response.status_code == 403 and response.json()["code"] == "outside_token_roots", response.content
