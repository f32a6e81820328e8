"""`manage.py import_legacy`: generated claude-hermes-bridge job folders and hbridge task files, with good records and
broken ones (malformed JSON, wrong kinds of values, a .log without its .json and the other way round, bytes that are
not UTF-8, logs over the output limit, repeated ids), imported into the database. Every good record must show in
`hermes_jobs`, the REST list and the dashboard, be found by its old id over REST, MCP and the task page; a second
import adds nothing, and a broken record leaves no row."""

import asyncio
import html
import json
import random
import re
import uuid
from dataclasses import dataclass, field
from io import StringIO
from pathlib import Path
from urllib.parse import quote

import pytest
from django.core.management import CommandError, call_command
from django.db import connection
from django.test import Client
from mcp import Client as McpClient

from jobs import actions
from jobs.actions import imports
from jobs.core.vocabulary import Source, Status
from jobs.mcp.server import get_server
from jobs.models import Task, TaskEvent
from tests.support import make_task

pytestmark = pytest.mark.django_db(transaction=True)  # the MCP tools read on threads of their own
SEEDS = [1, 2, 3]
OUTPUT_LIMIT = 8192  # BRIDGE_MAX_OUTPUT_BYTES for these tests: a "huge" log is a few times this
MCP_WORDS = ["ok", "error", "running", "cancelled", "timeout", "Completed", "exploded"]
PIECES = ["fix the tests", "añade un índice", "写一个函数", "line\twith tab", "emoji 🚀", 'quote " and \\']


@dataclass
class Generated:
    """Files as the older tools left them, and what an import must make of them."""

    mcp_jobs: Path
    hbridge_tasks: Path
    good: dict[str, str] = field(default_factory=dict)  # old id -> its task text
    broken: dict[str, str] = field(default_factory=dict)  # where -> why it is broken (its old id is never imported)
    broken_ids: set[str] = field(default_factory=set)


def text(rng: random.Random, words: int = 4) -> str:
    return " ".join(rng.choice(PIECES) for _ in range(rng.randint(1, words)))


def generate(root: Path, seed: int) -> Generated:
    rng = random.Random(seed)
    made = Generated(root / "jobs", root / "hbridge_tasks.jsonl")
    made.mcp_jobs.mkdir(parents=True)
    for number in range(rng.randint(6, 10)):
        write_mcp_job(made, rng, f"job-{seed}-{number}" + rng.choice(["", " b", "-ü"]))
    for number, (name, data) in enumerate(BROKEN_MCP_FILES):
        path = made.mcp_jobs / name.format(n=number)
        path.write_bytes(data)
        made.broken[str(path)] = "malformed"
        made.broken_ids.add(path.name.rpartition(".")[0])
    made.hbridge_tasks.write_bytes(b"".join(hbridge_lines(made, rng, seed)))
    return made


def write_mcp_job(made: Generated, rng: random.Random, old_id: str) -> None:
    """A job as the older MCP server left it: its .json, its .log, or both, the log sometimes not UTF-8 or huge."""
    kind = rng.choice(["both", "both", "both", "json_only", "log_only"])
    record = {"status": rng.choice(MCP_WORDS), "exit_code": rng.choice([0, 1, 130, None]), "task": text(rng)}
    record |= {"cwd": rng.choice([r"C:\Users\me\proj", "/srv/elsewhere", None]), "finished_at": "2025-02-03T04:05:06Z"}
    if kind != "log_only":
        (made.mcp_jobs / f"{old_id}.json").write_text(json.dumps({k: v for k, v in record.items() if v is not None}))
    if kind != "json_only":
        lines = [text(rng, 8) for _ in range(rng.randint(0, 20))]
        log = "\n".join(lines).encode() + rng.choice([b"", b"\n", b"\xff\xfe broken bytes\n"])
        if rng.random() < 0.2:
            log += b"x" * (OUTPUT_LIMIT * rng.randint(2, 4))
        (made.mcp_jobs / f"{old_id}.log").write_bytes(log)
    made.good[old_id] = record["task"] if kind != "log_only" else ""


BROKEN_MCP_FILES = [
    ("bad-{n}.json", b'{"status": "ok", "task": '),  # cut off
    ("list-{n}.json", b'["ok"]'),
    ("typed-{n}.json", b'{"status": "ok", "exit_code": "zero"}'),
    ("latin1-{n}.json", b'{"task": "caf\xe9"}'),
    ("esc\x1b[2J-{n}.log", b"an id a terminal would obey\n"),
]


def hbridge_lines(made: Generated, rng: random.Random, seed: int) -> list[bytes]:
    """Good lines (some ids twice: the last is imported), broken ones, and blank ones."""
    lines = [b"\n"]  # blank lines are no records
    for number in range(rng.randint(5, 9)):
        old_id = f"task_{uuid.UUID(int=rng.getrandbits(128))}"
        for _ in range(rng.choice([1, 1, 2])):
            prompt = text(rng)
            status = rng.choice(["done", "failed"])
            usage = rng.choice([None, {"total_cost_usd": 0.01 * number, "input_tokens": number, "output_tokens": 2}])
            line = {"id": old_id, "prompt": prompt, "status": status, "result": text(rng, 6)}
            line |= {"exitCode": 0 if status == "done" else 1, "usage": usage, "completedAt": 1738555506000 + number}
            lines.append(json.dumps(line).encode() + b"\n")
            made.good[old_id] = prompt
    for number, broken in enumerate(BROKEN_HBRIDGE_LINES):
        where = len(lines) + 1
        lines.append(broken.replace(b"{n}", str(number).encode()) + b"\n")
        made.broken[f"{made.hbridge_tasks} line {where}"] = "malformed"
        made.broken_ids.add(f"bad_{number}")
    return lines


BROKEN_HBRIDGE_LINES = [
    b"not json at all",
    b'{"prompt": "a line with no id"}',
    b'{"id": "bad_{n}", "exitCode": "1"}',
    b'{"id": "bad_{n}", "usage": {"input_tokens": -5}}',
    b'{"id": "bad_{n}", "prompt": "caf\xe9"}',
    b'{"id": "bad_{n}", "completedAt": "last tuesday"}',
]


@pytest.fixture
def generated(request, tmp_path, settings, data_dir) -> Generated:
    settings.BRIDGE_MAX_OUTPUT_BYTES = OUTPUT_LIMIT
    return generate(tmp_path / "legacy", request.param)


def import_them(made: Generated) -> imports.ImportReport:
    return actions.import_legacy(mcp_jobs=made.mcp_jobs, hbridge_tasks=made.hbridge_tasks)


def imported_tasks() -> dict[str, Task]:
    return {task.legacy_id: task for task in Task.objects.filter(source=Source.IMPORTED)}


def call_tool(tool: str, **arguments) -> str:
    async def call() -> str:
        async with McpClient(get_server()) as client:
            result = await client.call_tool(tool, arguments)
        assert not result.is_error, result
        return "\n".join(c.text for c in result.content if c.type == "text")

    return asyncio.run(call())


@pytest.fixture
def api() -> Client:
    return Client(HTTP_AUTHORIZATION=f"Bearer {actions.create_token('import')[1]}")


@pytest.fixture
def browser(django_user_model) -> Client:
    client = Client()
    client.force_login(django_user_model.objects.create_superuser("alice", password="pw-alice-123"))
    return client


@pytest.mark.parametrize("generated", SEEDS, indirect=True)
def test_every_good_record_shows_in_hermes_jobs_the_rest_list_and_the_dashboard(generated, api, browser):
    report = import_them(generated)
    tasks = imported_tasks()
    assert {old: task.prompt for old, task in tasks.items()} == generated.good
    assert sorted(o.legacy_id for o in report.imported) == sorted(generated.good)
    new_ids = {str(task.public_id) for task in tasks.values()}
    jobs = call_tool("hermes_jobs", limit=200)
    assert all(new_id in jobs for new_id in new_ids)
    listed = api.get("/v1/tasks", {"limit": 500}).json()["tasks"]
    assert {t["id"] for t in listed if t["source"] == Source.IMPORTED} == new_ids
    dashboard = browser.get("/").content.decode()
    assert all(f'id="task-{new_id}"' in dashboard for new_id in new_ids)


@pytest.mark.parametrize("generated", SEEDS, indirect=True)
def test_every_imported_task_is_found_by_its_old_id_over_rest_mcp_and_its_page(generated, api, browser):
    import_them(generated)
    for old_id, task in imported_tasks().items():
        assert api.get("/v1/task", {"task_id": old_id}).json()["id"] == str(task.public_id), old_id
        assert f"JOB_ID: {task.public_id}" in call_tool("hermes_status", job_id=old_id, wait_s=0)
        page = browser.get(f"/tasks/{quote(old_id, safe='')}/")
        assert page.status_code == 200 and str(task.public_id) in page.content.decode(), old_id


@pytest.mark.parametrize("generated", SEEDS, indirect=True)
def test_a_second_import_adds_nothing(generated):
    import_them(generated)
    before = (Task.objects.count(), TaskEvent.objects.count())
    again = import_them(generated)
    assert (Task.objects.count(), TaskEvent.objects.count()) == before
    assert again.imported == [] and sorted(o.legacy_id for o in again.already_there) == sorted(generated.good)


@pytest.mark.parametrize("generated", SEEDS, indirect=True)
def test_every_broken_record_is_reported_with_its_reason_and_leaves_no_row(generated):
    report = import_them(generated)
    reasons = {o.where: o.reason for o in report.skipped}
    for where in generated.broken:
        assert reasons.get(where, "").startswith("malformed: "), (where, reasons)
    assert not Task.objects.filter(legacy_id__in=generated.broken_ids).exists()
    assert Task.objects.count() == len(generated.good)


def test_a_record_whose_write_fails_midway_leaves_nothing_of_itself(tmp_path, data_dir):
    """The task, its output and its status event are one transaction: the database refusing the last of them (a
    trigger of the test's) takes the rest back too."""
    made = Generated(tmp_path / "jobs", tmp_path / "none.jsonl")
    made.mcp_jobs.mkdir()
    (made.mcp_jobs / "job-1.json").write_text(json.dumps({"status": "ok", "task": "hi"}))
    (made.mcp_jobs / "job-1.log").write_text("one\ntwo\n")
    with refusing_status_events():
        report = actions.import_legacy(mcp_jobs=made.mcp_jobs)
    assert [o.legacy_id for o in report.skipped] == ["job-1"] and "nothing of it was" in report.skipped[0].reason
    assert (Task.objects.count(), TaskEvent.objects.count()) == (0, 0)


class refusing_status_events:
    """A database trigger that refuses every `status` event while it is in place."""

    def __enter__(self) -> None:
        with connection.cursor() as cursor:
            if connection.vendor == "sqlite":
                cursor.execute(
                    "CREATE TRIGGER refuse_status BEFORE INSERT ON jobs_taskevent WHEN NEW.kind = 'status' "
                    "BEGIN SELECT RAISE(ABORT, 'refused by the test'); END"
                )
            else:
                cursor.execute(
                    "CREATE FUNCTION refuse_status() RETURNS trigger LANGUAGE plpgsql AS "
                    "$$ BEGIN RAISE EXCEPTION 'refused by the test'; END $$"
                )
                cursor.execute(
                    "CREATE TRIGGER refuse_status BEFORE INSERT ON jobs_taskevent FOR EACH ROW "
                    "WHEN (NEW.kind = 'status') EXECUTE FUNCTION refuse_status()"
                )

    def __exit__(self, *exc) -> None:
        with connection.cursor() as cursor:
            if connection.vendor == "sqlite":
                cursor.execute("DROP TRIGGER refuse_status")
            else:
                cursor.execute("DROP TRIGGER refuse_status ON jobs_taskevent")
                cursor.execute("DROP FUNCTION refuse_status()")


def test_a_huge_log_is_imported_up_to_the_output_limit_and_says_so(tmp_path, settings, data_dir):
    settings.BRIDGE_MAX_OUTPUT_BYTES = OUTPUT_LIMIT
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    (jobs / "big.log").write_bytes(b"0123456789abcde\n" * OUTPUT_LIMIT)
    report = actions.import_legacy(mcp_jobs=jobs)
    task = Task.objects.get(legacy_id="big")
    output = "".join(e.data["text"] + "\n" for e in task.events.filter(kind="output"))
    assert len(output.encode()) <= OUTPUT_LIMIT and output.startswith("0123456789abcde\n")
    assert task.events.filter(kind="truncated", data__bytes=16 * OUTPUT_LIMIT).exists()
    assert any("over BRIDGE_MAX_OUTPUT_BYTES" in note for note in report.imported[0].notes)


def test_an_imported_task_keeps_its_times_its_output_and_its_ending(tmp_path, data_dir):
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    record = {"status": "error", "exit_code": 2, "task": "build it", "cwd": "/nowhere/here"}
    record |= {"started_at": "2025-01-02T03:04:05+00:00", "finished_at": "2025-01-02T03:14:05+00:00"}
    (jobs / "j-7.json").write_text(json.dumps(record))
    (jobs / "j-7.log").write_text("compiling\nerror: no such file\n")
    actions.import_legacy(mcp_jobs=jobs)
    task = Task.objects.get(legacy_id="j-7")
    assert (task.status, task.exit_code, task.cwd, task.created_by) == (
        Status.FAILED,
        2,
        "/nowhere/here",
        "import:claude-hermes-bridge",
    )
    assert task.created_at.isoformat() == task.started_at.isoformat() == "2025-01-02T03:04:05+00:00"
    assert task.error == "claude-hermes-bridge recorded it as 'error'; exit code 2: compiling\nerror: no such file"
    events = list(task.events.order_by("seq"))
    assert [e.kind for e in events] == ["imported", "output", "output", "status"]
    assert [e.seq for e in events] == [1, 2, 3, 4] and task.last_seq == 4
    assert all(e.created_at == task.finished_at for e in events)


def test_of_several_hbridge_lines_with_one_id_the_last_is_imported(tmp_path, data_dir):
    tasks = tmp_path / "tasks.jsonl"
    lines = [{"id": "task_a", "prompt": f"try {n}", "status": "done", "result": f"r{n}"} for n in (1, 2, 3)]
    tasks.write_text("".join(json.dumps(line) + "\n" for line in lines))
    report = actions.import_legacy(hbridge_tasks=tasks)
    assert Task.objects.get(legacy_id="task_a").prompt == "try 3"
    assert sorted(o.where for o in report.skipped) == [f"{tasks} line 1", f"{tasks} line 2"]


def test_an_old_id_another_tools_job_already_has_is_not_imported_over_it(tmp_path, data_dir):
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    (jobs / "task_a.json").write_text(json.dumps({"status": "ok", "task": "from the MCP server"}))
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(json.dumps({"id": "task_a", "prompt": "from hbridge", "status": "done"}) + "\n")
    actions.import_legacy(mcp_jobs=jobs)
    report = actions.import_legacy(hbridge_tasks=tasks)
    assert Task.objects.get(legacy_id="task_a").prompt == "from the MCP server"
    assert "(imported from claude-hermes-bridge) already has the old id 'task_a'" in report.skipped[0].reason


def test_with_no_option_both_tools_default_places_are_read(tmp_path, monkeypatch, data_dir):
    home = tmp_path / "home"
    (home / ".claude-hermes-bridge" / "jobs").mkdir(parents=True)
    (home / ".claude-hermes-bridge" / "jobs" / "j1.json").write_text(json.dumps({"status": "ok", "task": "mcp"}))
    (home / ".claude-hermes-bridge" / "config.json").write_text(json.dumps({"default_cwd": "/srv/w"}))
    (home / ".hbridge_tasks.jsonl").write_text(json.dumps({"id": "task_h", "prompt": "hb", "status": "done"}) + "\n")
    monkeypatch.setenv("HOME", str(home))
    out = StringIO()
    call_command("import_legacy", stdout=out)
    assert sorted(Task.objects.values_list("legacy_id", "prompt")) == [("j1", "mcp"), ("task_h", "hb")]
    assert "Imported 2, already there 0, skipped 0." in out.getvalue() and "BRIDGE_DEFAULT_CWD=/srv/w" in out.getvalue()


def test_naming_a_place_that_does_not_exist_imports_nothing(tmp_path, data_dir):
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(json.dumps({"id": "task_x", "status": "done"}) + "\n")
    with pytest.raises(CommandError, match="no-such-folder does not exist"):
        call_command("import_legacy", "--hbridge-tasks", str(tasks), "--mcp-jobs", str(tmp_path / "no-such-folder"))
    assert not Task.objects.exists()


def test_the_command_prints_the_counts_each_skipped_records_reason_and_the_settings(tmp_path, data_dir):
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    (jobs / "ok.json").write_text(json.dumps({"status": "ok", "exit_code": 0, "task": "t", "cwd": "/c"}))
    (jobs / "ok.log").write_text("fine\n")
    (jobs / "broken.json").write_text("{")
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"allowed_roots": ["/srv/a", "/srv/b"], "hermes_path": "/opt/hermes"}))
    out = StringIO()
    call_command("import_legacy", "--mcp-jobs", str(jobs), "--mcp-config", str(config), stdout=out)
    printed = out.getvalue()
    assert "Imported 1, already there 0, skipped 1." in printed
    assert f"skipped broken ({jobs / 'broken.json'}): malformed: broken.json is not valid JSON" in printed
    assert "BRIDGE_ALLOWED_ROOTS=/srv/a:/srv/b" in printed and "BRIDGE_HERMES_BIN=/opt/hermes" in printed


# --- where an imported task came from, wherever it is shown -----------------------------------------------------------

# Old ids that HTML or a reply's header must keep as they are: markup, both quotes, an ampersand, other scripts.
TRICKY_IDS = ["<b>bold</b>", "quote\"d & 'single'", "ünï cödé 任务"]


def badge_title(dashboard: str, task: Task) -> str | None:
    """The title of the task's "imported" badge on the dashboard, as a reader sees it (None: no badge)."""
    row = re.search(rf'<tr id="task-{task.public_id}".*?</tr>', dashboard, re.S)
    assert row is not None, f"no row for {task.public_id}"
    badge = re.search(r'<span class="badge imported" title="([^"]*)">imported</span>', row.group(0))
    return html.unescape(badge.group(1)) if badge else None


def created_line(page: str) -> str:
    """The task page's "Created" entry, as a reader sees it."""
    found = re.search(r"<dt>Created</dt><dd>(.*?)</dd>", page, re.S)
    assert found is not None, "the task page has no Created entry"
    return " ".join(html.unescape(re.sub(r"<[^>]+>", "", found.group(1))).split())


def header_lines(reply: str) -> list[str]:
    """A reply's own lines: those above its first `--- … ---` marker."""
    return reply.split("\n--- ")[0].splitlines()


@pytest.mark.parametrize("generated", SEEDS, indirect=True)
def test_every_imported_task_shows_where_it_came_from_and_its_old_id_wherever_it_is_listed(generated, browser):
    with generated.hbridge_tasks.open("a") as tasks:
        tasks.writelines(
            json.dumps({"id": old_id, "prompt": "tricky", "status": "done"}) + "\n" for old_id in TRICKY_IDS
        )
    import_them(generated)
    dashboard = browser.get("/").content.decode()
    jobs = call_tool("hermes_jobs", limit=200).splitlines()
    tasks = imported_tasks()
    assert set(TRICKY_IDS) <= set(tasks)
    for old_id, task in tasks.items():
        came_from = task.created_by.removeprefix("import:")
        assert badge_title(dashboard, task) == f"imported from {came_from}; old id {old_id}", old_id
        page = browser.get(f"/tasks/{task.public_id}/").content.decode()
        assert created_line(page).endswith(f" Imported from {came_from} (old id {old_id})"), old_id
        status = call_tool("hermes_status", job_id=str(task.public_id), wait_s=0)
        assert f"LEGACY_ID: {old_id}" in header_lines(status), status
        [listed] = [line for line in jobs if line.startswith(str(task.public_id))]
        assert f"(old id: {old_id})" in listed, listed


def test_a_task_bridge_ran_itself_shows_no_old_id(work_root, browser):
    task = make_task("say hi", created_by="token:ci")
    dashboard = browser.get("/").content.decode()
    page = browser.get(f"/tasks/{task.public_id}/").content.decode()
    status = call_tool("hermes_status", job_id=str(task.public_id), wait_s=0)
    jobs = call_tool("hermes_jobs")

    assert badge_title(dashboard, task) is None
    assert created_line(page).endswith("by token:ci") and "Imported" not in page
    assert not any(line.startswith("LEGACY_ID:") for line in header_lines(status)), status
    assert "(old id" not in jobs, jobs


def test_an_imported_tasks_page_does_not_say_how_bridge_would_run_it(tmp_path, browser):
    """It never ran here: no permission mode, supervisor or target, which would describe a run that never was."""
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    (jobs / "j-1.json").write_text(json.dumps({"status": "ok", "task": "old work", "cwd": "/srv/old"}))
    actions.import_legacy(mcp_jobs=jobs)

    page = browser.get("/tasks/j-1/").content.decode()

    assert "Imported from claude-hermes-bridge" in page
    shown = [element for element in ('id="permission-mode"', 'id="worker"', 'id="target"') if element in page]
    assert shown == [], shown
