"""The agent's sandbox (jobs/processes/sandbox.py): what an agent can read of Bridge, and how it is stopped inside.

The fake agent runs a shell command the way an agent's Bash tool does (`ask Bash {"command": …}`, in bypass mode).
Every check that the sandbox hides something is paired with the same agent run without it, which must find the
thing: that is how the check shows it can see a leak at all.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import psutil
import pytest
from django.test import Client
from django.urls import reverse

from jobs import actions, processes
from jobs.core.vocabulary import PermissionMode, Status
from jobs.processes import sandbox
from tests.integration.test_supervisor import GRANDCHILDREN, supervise_process
from tests.support import has_event, make_task, skip_or_fail, wait_for

CANARY = "canary-7f3a9c1e5d"
LEAKS = ("AWS_SECRET_ACCESS_KEY", "DJANGO_SECRET_KEY", "OPENAI_API_KEY")


@pytest.fixture
def work_root(data_dir, settings) -> Path:
    """The allowed root where Bridge puts it by default: inside its data dir (DATA_DIR/work)."""
    root = data_dir / "work"
    root.mkdir()
    settings.BRIDGE_ALLOWED_ROOTS = [root]
    settings.BRIDGE_DEFAULT_CWD = root
    return root


@pytest.fixture
def sandboxed(settings, supervisor):
    """The supervisor fixture with BRIDGE_SANDBOX=on; skipped (failing under CI) where no sandbox works."""
    found = sandbox.find("on", processes.PLATFORM)
    if not found.available:
        skip_or_fail(f"no sandbox on this machine: {found.reason}")
    settings.BRIDGE_SANDBOX = "on"
    return supervisor


def run_shell(command: str, **kwargs) -> str:
    """What `command` printed when the fake agent ran it as a Bash tool call; the task must end done."""
    ask = json.dumps({"command": command})
    task = wait_for(make_task(f"ask Bash {ask}", permission_mode=PermissionMode.BYPASS, **kwargs))
    assert task.status == Status.DONE, task.error
    results = [e.data for e in actions.events_since(task) if e.kind == "tool_result"]
    assert len(results) == 1, results
    return str(results[0]["content"])


def spy_command(data_dir: str) -> str:
    """Everything an agent could try for Bridge's secrets: every visible process's environment (how many of its
    variables hold a canary), and the data dir's listing."""
    return f"cat /proc/[0-9]*/environ 2>/dev/null | tr '\\0' '\\n' | grep -c {CANARY}; ls -a {data_dir}"


@pytest.fixture
def process_with_canaries():
    """A process started with secrets in its environment, as Bridge's own processes are (/proc shows a process's
    environment as it started: what this test process sets later would prove nothing)."""
    env = {**os.environ, **{name: f"{CANARY}-{name}" for name in LEAKS}}
    holder = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], env=env, stdin=subprocess.PIPE)
    yield holder
    holder.communicate(timeout=30)


@pytest.mark.parametrize("setting", ["on", "off"])
def test_an_agent_finds_no_secret_of_bridges_and_no_database(setting, sandboxed, settings, process_with_canaries):
    (settings.DATA_DIR / "bridge.sqlite3").write_text("not the database, but its name")
    settings.BRIDGE_SANDBOX = setting
    canaries, listing = run_shell(spy_command(str(settings.DATA_DIR))).split("\n", 1)
    if setting == "off":  # the same agent unconfined finds both: the checks below can see a leak
        assert int(canaries) >= len(LEAKS) and "bridge.sqlite3" in listing
        return
    assert int(canaries) == 0
    assert "bridge.sqlite3" not in listing and "secret_key" not in listing
    assert set(listing.split()) == {".", "..", "work"}, "the data dir shows only the allowed root inside it"


def test_an_allowed_root_inside_the_data_dir_stays_visible(sandboxed, settings, work_root):
    (work_root / "project.txt").write_text("the user's file")
    (settings.DATA_DIR / "secret_key").write_text(CANARY)
    out = run_shell(f"cat {work_root}/project.txt; echo; ls {settings.DATA_DIR}")
    assert out.split() == ["the", "user's", "file", "work"]


@pytest.mark.parametrize("setting", ["on", "off"])
def test_the_agent_sees_none_of_bridges_processes(setting, sandboxed, settings):
    settings.BRIDGE_SANDBOX = setting
    command_lines = run_shell("cat /proc/[0-9]*/cmdline 2>/dev/null | tr '\\0' ' '")
    supervisor_command_line = " ".join(psutil.Process().cmdline())  # this test process runs the supervisor
    assert (supervisor_command_line in command_lines) is (setting == "off")


def test_a_polite_stop_reaches_the_agent_inside(sandboxed):
    task = make_task("say started\nsleep 30\nsay never")
    wait_for(task, has_event("text", text="started"))
    actions.request_cancel(task, reason="changed my mind", by="test")
    task = wait_for(task)
    assert task.status == Status.CANCELLED
    result = [e.data for e in actions.events_since(task) if e.kind == "result"]
    assert result and result[0]["subtype"] == "error_during_execution", "the agent's own interrupt ended its turn"
    assert not [e for e in actions.events_since(task) if e.kind == "signal"], "a cooperative agent needs no signal"


def test_an_agent_that_ignores_sigterm_is_killed_with_everything_inside(sandboxed):
    task = make_task("deaf\nignore-sigterm\nspawn-child\nsay ready\nsleep 60")
    wait_for(task, has_event("text", text="ready"))
    spawned = next(e.data for e in actions.events_since(task) if e.kind == "spawned")
    inside = psutil.Process(spawned["pid"]).children(recursive=True)
    assert len(inside) >= 2, "the agent and its child, under bwrap"
    actions.request_cancel(task)
    task = wait_for(task)
    assert task.status == Status.CANCELLED
    assert [e.data["signal"] for e in actions.events_since(task) if e.kind == "signal"] == ["SIGTERM", "SIGKILL"]
    gone, alive = psutil.wait_procs(inside, timeout=10)
    assert not alive, f"still alive: {alive}"


def test_a_missing_program_fails_as_it_does_unconfined(sandboxed, settings, tmp_path):
    settings.BRIDGE_CLAUDE_BIN = str(tmp_path / "no-such-claude")
    task = wait_for(make_task("say hello"))
    assert task.status == Status.FAILED
    assert task.error.startswith(f"could not start {settings.BRIDGE_CLAUDE_BIN!r}: No such file or directory")


def test_the_recorded_command_line_shows_the_sandbox(sandboxed, settings):
    task = wait_for(make_task("say hello"))
    argv = next(e.data["argv"] for e in actions.events_since(task) if e.kind == "spawned")
    assert "--unshare-pid" in argv
    assert argv[argv.index("--tmpfs") + 1] == str(settings.DATA_DIR)
    assert settings.BRIDGE_CLAUDE_BIN in argv


@pytest.mark.parametrize("setting", ["auto", "off", "on"])
def test_health_and_the_dashboard_say_whether_agents_are_sandboxed(setting, settings, db, django_user_model):
    settings.BRIDGE_SANDBOX = setting
    found = sandbox.find(setting, processes.PLATFORM)
    browser = Client()
    browser.force_login(django_user_model.objects.create_superuser("alice", password="pw-alice-123"))

    health = Client().get("/health").json()
    dashboard = browser.get(reverse("dashboard")).content.decode()

    assert health["sandbox"] == {"kind": found.kind or None, "available": found.available, "required": setting == "on"}
    assert ('id="no-sandbox"' in dashboard) is (not found.available)
    if setting == "off":
        assert "turned off by BRIDGE_SANDBOX=off; agents run unconfined" in dashboard


def test_a_killed_supervisor_leaves_nothing_of_a_sandboxed_agent(transactional_db, work_root, fake_agent, settings):
    """SIGKILL to the supervisor: bwrap dies with it (--die-with-parent), and with bwrap everything in the agent's
    PID namespace, the grandchild that left the agent's session included."""
    if not sandbox.find("on", processes.PLATFORM).available:
        skip_or_fail("no sandbox on this machine")
    settings.BRIDGE_SANDBOX = "on"
    proc = supervise_process(settings)
    try:
        task = wait_for(make_task(GRANDCHILDREN), has_event("text", text="ready"))
        spawned = next(e.data for e in actions.events_since(task) if e.kind == "spawned")
        inside = psutil.Process(spawned["pid"]).children(recursive=True)
        assert len(inside) >= 3, "the agent, its child and the escapee, under bwrap"
        proc.kill()
        proc.wait()
    finally:
        proc.kill()
    gone, alive = psutil.wait_procs([psutil.Process(spawned["pid"]), *inside], timeout=10)
    assert not alive, f"still alive: {alive}"
