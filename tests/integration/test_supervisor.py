"""The supervisor with the fake stream-json agent: queue, caps, stops, limits, crashes and orphans."""

import itertools
import json
import os
import signal
import subprocess
import sys
import zoneinfo
from datetime import timedelta
from pathlib import Path
from unittest import mock

import psutil
import pytest
from django.test import override_settings
from hypothesis import given
from hypothesis import strategies as st

from jobs import actions, processes
from jobs.agents import executors
from jobs.core.errors import Conflict, InvalidInput
from jobs.core.vocabulary import Status
from jobs.models import AgentSession, PermissionRequest, Task, TaskEvent
from jobs.supervision.supervisor import TaskRun
from tests.support import database_url, has_event, make_task, wait_for

pytestmark = pytest.mark.django_db(transaction=True)
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True, params=["posix", "portable"])
def process_backend(request, settings) -> str:
    """Every supervisor test runs on both: the POSIX backend, and the psutil-only one whose logic Windows shares."""
    settings.BRIDGE_PROCESS_BACKEND = request.param
    return request.param


def assert_gone(pid: int) -> None:
    try:
        psutil.Process(pid).wait(timeout=5)
    except psutil.NoSuchProcess:
        pass
    except psutil.TimeoutExpired:
        pytest.fail(f"process {pid} is still alive")


def kinds(task: Task) -> list[str]:
    return [e.kind for e in actions.events_since(task)]


def test_plain_run_records_result_usage_session_and_gap_free_events(supervisor):
    task = wait_for(make_task("say hello\nstderr a warning\nsay all done"))
    assert task.status == Status.DONE
    assert task.exit_code == 0
    assert task.result == "all done"
    assert (task.cost_usd, task.input_tokens, task.output_tokens) == (0.0123, 100, 50)
    assert (task.cache_creation_input_tokens, task.cache_read_input_tokens, task.num_turns) == (20, 30, 1)
    assert "a warning" in task.stderr_tail
    assert task.session is not None and task.session.cwd == task.cwd
    seqs = list(TaskEvent.objects.filter(task=task).values_list("seq", flat=True))
    assert seqs == list(range(1, task.last_seq + 1))
    assert kinds(task)[:4] == ["status", "status", "spawned", "init"]
    assert [e.data["text"] for e in actions.events_since(task) if e.kind == "text"] == ["hello", "all done"]
    assert kinds(task)[-1] == "status" and actions.events_since(task)[-1].data["status"] == "done"


def test_fifo_order_and_concurrency_cap(supervisor, settings):
    supervisor.capacity = 2
    tasks = [make_task(f"sleep 0.6\nsay task {i}") for i in range(5)]
    for task in tasks:
        wait_for(task)
    tasks = [Task.objects.get(pk=t.pk) for t in tasks]
    assert all(t.status == Status.DONE for t in tasks)
    starts = [t.started_at for t in tasks]
    assert starts == sorted(starts), "tasks must start in the order they were queued"
    moments = sorted([(t.started_at, 1) for t in tasks] + [(t.finished_at, -1) for t in tasks])
    running, peak = 0, 0
    for _, step in moments:
        running += step
        peak = max(peak, running)
    assert peak == 2, f"at most 2 tasks may run at once, and 2 should have (peak {peak})"


def test_cancel_running_task_interrupts_and_keeps_output(supervisor):
    task = make_task("say started\nsleep 30\nsay never")
    wait_for(task, has_event("text", text="started"))
    actions.request_cancel(task, reason="changed my mind", by="test")
    task = wait_for(task)
    assert task.status == Status.CANCELLED
    assert task.error == "changed my mind"
    assert "text" in kinds(task) and "stopping" in kinds(task)
    result = [e.data for e in actions.events_since(task) if e.kind == "result"]
    assert result and result[0]["subtype"] == "error_during_execution", "the interrupt should end the turn"
    assert "signal" not in kinds(task), "a cooperative agent needs no signal"


def test_agent_that_ignores_interrupt_and_sigterm_is_killed(supervisor):
    task = make_task("deaf\nignore-sigterm\nspawn-child\nsay ready\nsleep 60")
    wait_for(task, has_event("text", text="ready"))
    child_pid = int(next(e.data["text"] for e in actions.events_since(task) if e.kind == "text").split()[1])
    actions.request_cancel(task)
    task = wait_for(task)
    assert task.status == Status.CANCELLED
    signals = [e.data["signal"] for e in actions.events_since(task) if e.kind == "signal"]
    assert signals == ["SIGTERM", "SIGKILL"]
    assert task.exit_code == -signal.SIGKILL
    assert_gone(child_pid)  # the whole process group went down, the agent's own children too


def test_timeout(supervisor):
    task = wait_for(make_task("say working\nsleep 30", timeout_s=1))
    assert task.status == Status.TIMEOUT
    assert "timeout of 1 s" in task.error
    assert "working" in [e.data.get("text") for e in actions.events_since(task)]


def test_each_claim_waits_until_the_last_claimed_agent_has_started(transactional_db, work_root, fake_agent, request):
    """Claiming goes on only once the run before has started its agent (or failed to): a claim running beside a
    start competes with it for the interpreter and slows it down."""
    tasks = [make_task(f"say task {n}") for n in range(4)]
    request.getfixturevalue("supervisor")  # starts now, with all four queued
    tasks = [wait_for(task) for task in tasks]
    moments = {}
    for task in tasks:
        for event in actions.events_since(task):
            if event.kind == "spawned" or (event.kind == "status" and event.data["status"] == Status.RUNNING):
                moments[task.pk, event.kind] = event.created_at
    for earlier, later in itertools.pairwise(tasks):
        assert moments[earlier.pk, "spawned"] <= moments[later.pk, "status"], "claimed before the last agent started"


def test_supervisors_in_one_process_claim_only_what_each_serves(transactional_db, tmp_path, settings, fake_agent):
    """A claim's SQL is built once per roots and names: supervisors that differ in either never share it."""
    a, b = (tmp_path / "a", tmp_path / "b")
    for root in (a, b):
        root.mkdir()
    settings.BRIDGE_ALLOWED_ROOTS = [a]
    sup_a = actions.register_worker(4, name="sup-a")
    settings.BRIDGE_ALLOWED_ROOTS = [b]
    sup_b = actions.register_worker(4, name="sup-b", labels=["gpu"])
    settings.BRIDGE_ALLOWED_ROOTS = [a, b]
    make_task("in a", cwd=str(a))
    make_task("in a, for sup-b", cwd=str(a), target="sup-b")
    make_task("in b", cwd=str(b))
    make_task("in b, for gpu", cwd=str(b), target="gpu")
    claimed: dict[str, list[str]] = {"sup-a": [], "sup-b": []}
    for worker in (sup_a, sup_b, sup_a, sup_b, sup_a, sup_b):
        if (task := actions.claim_next_task(worker)) is not None:
            claimed[worker.name].append(task.prompt)
    assert claimed == {"sup-a": ["in a"], "sup-b": ["in b", "in b, for gpu"]}


def test_cancel_queued_task_leaves_the_queue(transactional_db, work_root):
    task = make_task("say hi")
    task = actions.request_cancel(task, reason="not needed")
    assert task.status == Status.CANCELLED and task.finished_at is not None
    assert actions.claim_next_task(actions.register_worker(1)) is None
    with pytest.raises(Conflict):
        actions.request_cancel(task)


def test_crash_without_result_is_failed_with_exit_code_and_stderr(supervisor):
    task = wait_for(make_task("say partial work\nstderr boom: something broke\ncrash 3"))
    assert task.status == Status.FAILED
    assert task.exit_code == 3
    assert "without a result line" in task.error and "boom: something broke" in task.error
    assert "partial work" in [e.data.get("text") for e in actions.events_since(task)]


def test_error_result_is_failed_with_the_agents_words(supervisor):
    task = wait_for(make_task("error API Error: 500 overloaded"))
    assert task.status == Status.FAILED
    assert task.error == "API Error: 500 overloaded"


def test_non_json_line_is_kept_and_run_continues(supervisor):
    task = wait_for(make_task("nonjson this is not json {\nsay fine"))
    assert task.status == Status.DONE
    assert {"text": "this is not json {"} in [e.data for e in actions.events_since(task) if e.kind == "stdout"]


def test_output_flood_is_capped_with_one_truncation_event(supervisor, settings):
    settings.BRIDGE_MAX_OUTPUT_BYTES = 20_000
    task = wait_for(make_task("flood 300 400\nsay end"))
    assert task.status == Status.DONE
    assert task.result == "end"
    truncations = [e for e in actions.events_since(task) if e.kind == "truncated"]
    assert len(truncations) == 1 and "BRIDGE_MAX_OUTPUT_BYTES" in truncations[0].data["reason"]
    assert kinds(task).count("text") < 60
    assert "result" in kinds(task)


def test_oversized_line_is_cut_and_reading_goes_on(supervisor, settings):
    settings.BRIDGE_MAX_LINE_BYTES = 4096
    task = wait_for(make_task("bigline 100000\nsay after"))
    assert task.status == Status.DONE and task.result == "after"
    cut = next(e for e in actions.events_since(task) if e.kind == "truncated")
    assert cut.data["bytes"] > 100_000 and len(cut.data["head"]) <= 2000


def test_missing_executable_fails_clearly(supervisor, settings):
    settings.BRIDGE_CLAUDE_BIN = "/nonexistent/claude"
    task = wait_for(make_task("say hi"))
    assert task.status == Status.FAILED
    assert "/nonexistent/claude" in task.error and "BRIDGE_CLAUDE_BIN" in task.error


def test_child_environment_is_allow_listed(supervisor, settings, monkeypatch):
    monkeypatch.setenv("DJANGO_SECRET_KEY", "top-secret")
    monkeypatch.setenv("DATABASE_URL", "postgres://secret")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("EXTRA_ALLOWED", "yes")
    settings.BRIDGE_PASS_ENV = ["EXTRA_ALLOWED"]
    script = "\n".join(f"env {n}" for n in ("DJANGO_SECRET_KEY", "DATABASE_URL", "ANTHROPIC_BASE_URL", "EXTRA_ALLOWED"))
    task = wait_for(make_task(script))
    seen = [e.data["text"] for e in actions.events_since(task) if e.kind == "text"]
    assert seen == ["<unset>", "<unset>", "http://127.0.0.1:9", "yes"]


@pytest.mark.parametrize("started_with", ["America/New_York", None])
def test_the_agent_keeps_the_time_zone_bridge_was_started_with(supervisor, settings, monkeypatch, started_with):
    """Django sets this process's TZ to TIME_ZONE (UTC) as it starts (where the OS has tzset); the agent gets the zone
    Bridge was started with, or none when there was none (it then reads the system's own), never UTC in its stead."""
    monkeypatch.setenv("TZ", settings.TIME_ZONE)  # as Django leaves it
    settings.STARTED_WITH_TZ = started_with
    task = wait_for(make_task("env TZ"))
    assert [e.data["text"] for e in actions.events_since(task) if e.kind == "text"] == [started_with or "<unset>"]


@given(
    started_with=st.one_of(st.none(), st.sampled_from(sorted(zoneinfo.available_timezones())), st.text(max_size=20)),
    current=st.sampled_from(["UTC", "Europe/Paris", ""]),
)
def test_started_environ_gives_back_the_tz_this_process_was_started_with(started_with, current):
    with override_settings(STARTED_WITH_TZ=started_with), mock.patch.dict(os.environ, {"TZ": current}):
        env, child = executors.started_environ(), executors.child_env()
        assert env.get("TZ") == child.get("TZ") == started_with
        assert {k: v for k, v in env.items() if k != "TZ"} == {k: v for k, v in os.environ.items() if k != "TZ"}


def test_resume_passes_session_and_links_the_same_agent_session(supervisor):
    first = wait_for(make_task("say one"))
    session_id = first.session.session_id
    second = wait_for(make_task("say two", resume_session_id=session_id))
    assert second.status == Status.DONE
    assert second.session_id == first.session_id
    spawned = next(e for e in actions.events_since(second) if e.kind == "spawned")
    assert spawned.data["argv"][-2:] == ["--resume", session_id]
    assert AgentSession.objects.get(pk=first.session_id).total_cost_usd == pytest.approx(0.0246)


# --- permissions -------------------------------------------------------------------------------------------


def ask(command: str) -> str:
    return "ask Bash " + json.dumps({"command": command})


def test_permission_allow_runs_the_tool(supervisor, work_root):
    task = make_task(ask("touch allowed.txt") + "\nsay done")
    wait_for(task, has_event("permission_request"))
    perm = actions.decide_permission(task, behavior="allow", by="tester")
    assert wait_for(task).status == Status.DONE
    assert (work_root / "allowed.txt").exists()
    perm.refresh_from_db()
    assert perm.delivered_at is not None and perm.decided_by == "tester"
    with pytest.raises(Conflict):
        actions.decide_permission(task, behavior="deny", request_id=perm.request_id)


def test_permission_deny_sends_the_message(supervisor, work_root):
    task = make_task(ask("touch denied.txt") + "\nsay done")
    wait_for(task, has_event("permission_request"))
    actions.decide_permission(task, behavior="deny", message="not in this repo")
    task = wait_for(task)
    assert not (work_root / "denied.txt").exists()
    results = [e.data for e in actions.events_since(task) if e.kind == "tool_result"]
    assert results == [{"tool_use_id": results[0]["tool_use_id"], "is_error": True, "content": "not in this repo"}]


def test_permission_allow_with_edited_input_runs_the_edit(supervisor, work_root):
    task = make_task(ask("touch original.txt") + "\nsay done")
    wait_for(task, has_event("permission_request"))
    actions.decide_permission(task, behavior="allow", updated_input={"command": "touch edited.txt"})
    wait_for(task)
    assert (work_root / "edited.txt").exists() and not (work_root / "original.txt").exists()


def test_two_pending_requests_by_id_and_oldest_first(supervisor, work_root):
    first, second = json.dumps({"command": "touch one.txt"}), json.dumps({"command": "touch two.txt"})
    task = make_task(f"ask2 Bash '{first}' '{second}'\nsay done")
    wait_for(task, lambda t: len(actions.pending_permissions(t)) == 2)
    older, newer = actions.pending_permissions(task)
    assert older.input == {"command": "touch one.txt"}
    actions.decide_permission(task, behavior="deny", request_id=newer.request_id, message="not two")
    decided = actions.decide_permission(task, behavior="allow")
    assert decided.request_id == older.request_id
    assert wait_for(task).status == Status.DONE
    assert (work_root / "one.txt").exists() and not (work_root / "two.txt").exists()


def test_permission_expires_and_is_denied_with_a_reason(supervisor, settings, work_root):
    settings.BRIDGE_PERMISSION_TIMEOUT_S = 1
    task = wait_for(make_task(ask("touch late.txt") + "\nsay done"))
    perm = PermissionRequest.objects.get(task=task)
    assert perm.status == "expired" and perm.decided_via == "timeout"
    assert not (work_root / "late.txt").exists()
    results = [e.data for e in actions.events_since(task) if e.kind == "tool_result"]
    assert "BRIDGE_PERMISSION_TIMEOUT_S" in results[0]["content"]


def test_a_tasks_own_permission_timeout_wins_over_the_setting(supervisor, settings, work_root):
    settings.BRIDGE_PERMISSION_TIMEOUT_S = 600
    task = wait_for(make_task(ask("touch late.txt") + "\nsay done", permission_timeout_s=1))
    perm = PermissionRequest.objects.get(task=task)
    assert (perm.status, perm.decided_via) == ("expired", "timeout")
    assert timedelta(seconds=0.9) < perm.expires_at - perm.created_at <= timedelta(seconds=1)
    assert "No decision within 1 s (permission_timeout_s)" in perm.message
    with pytest.raises(InvalidInput, match="permission_timeout_s"):
        make_task("x", permission_timeout_s=0)


def test_a_run_searches_for_expired_requests_only_while_it_has_an_ask_open(
    supervisor, settings, work_root, monkeypatch
):
    """A run looks at the database after every ring; the search for expired requests is left out of that unless the
    agent waits on an ask, and the sweep wakes the run once one is overdue (`overdue()`; the expiry test above)."""
    searched = []
    search = actions.expire_permissions
    monkeypatch.setattr(actions, "expire_permissions", lambda task: searched.append(task.pk) or search(task))
    settings.BRIDGE_PERMISSION_TIMEOUT_S = 600
    quiet = wait_for(make_task("\n".join(f"say line {n}" for n in range(20)) + "\nsay done"))
    assert quiet.status == Status.DONE and quiet.pk not in searched
    settings.BRIDGE_PERMISSION_TIMEOUT_S = 1
    late = wait_for(make_task(ask("touch late.txt") + "\nsay done"))
    assert PermissionRequest.objects.get(task=late).status == "expired" and late.pk in searched


def test_bypass_mode_allows_as_policy(supervisor, work_root):
    task = wait_for(make_task(ask("touch bypassed.txt") + "\nsay done", permission_mode="bypass"))
    perm = PermissionRequest.objects.get(task=task)
    assert (perm.status, perm.decided_via) == ("allowed", "policy")
    assert (work_root / "bypassed.txt").exists()


def test_cancel_with_pending_permission_cancels_the_request(supervisor):
    task = make_task(ask("touch never.txt"))
    wait_for(task, has_event("permission_request"))
    actions.request_cancel(task)
    task = wait_for(task)
    assert task.status == Status.CANCELLED
    perm = PermissionRequest.objects.get(task=task)
    assert perm.status == "cancelled"
    with pytest.raises(Conflict):
        actions.decide_permission(task, behavior="allow")


# --- a supervisor that dies, and one that is told to stop -------------------------------------------------


def supervise_process(settings, extra_env: dict | None = None) -> subprocess.Popen:
    """`manage.py supervise` on the test database, as its own process."""
    env = {
        **os.environ,
        "DATABASE_URL": database_url(settings.DATABASES["default"]),
        "BRIDGE_CLAUDE_BIN": settings.BRIDGE_CLAUDE_BIN,
        "BRIDGE_ALLOWED_ROOTS": str(settings.BRIDGE_ALLOWED_ROOTS[0]),
        "BRIDGE_KILL_GRACE_S": "1",
        "BRIDGE_PROCESS_BACKEND": settings.BRIDGE_PROCESS_BACKEND,
        "BRIDGE_SANDBOX": settings.BRIDGE_SANDBOX,
        **(extra_env or {}),
    }
    return subprocess.Popen(
        [sys.executable, str(REPO / "manage.py"), "supervise"], env=env, cwd=REPO, stderr=subprocess.PIPE, text=True
    )


def test_killed_supervisor_leaves_orphans_that_the_next_one_marks(transactional_db, work_root, fake_agent, settings):
    proc = supervise_process(settings)
    try:
        task = wait_for(make_task("say before the crash\nsleep 60"), has_event("text", text="before the crash"))
        proc.kill()
        proc.wait()
        assert_gone(task.pid)  # the parent-death signal takes the agent down with its supervisor
    finally:
        proc.kill()
    assert Task.objects.get(pk=task.pk).status == Status.RUNNING
    from jobs.supervision.supervisor import Supervisor

    sup = Supervisor()
    sup.worker = actions.register_worker(1)
    sup.reap_orphans()
    task.refresh_from_db()
    assert task.status == Status.ORPHANED
    assert "stopped while the task was running" in task.error
    assert "before the crash" in [e.data.get("text") for e in actions.events_since(task)]


def test_sigterm_drains_then_cancels_with_a_reason(transactional_db, work_root, fake_agent, settings):
    proc = supervise_process(settings, {"BRIDGE_DRAIN_S": "2"})
    try:
        quick = make_task("sleep 0.5\nsay quick")
        slow = make_task("say slow started\nsleep 60")
        wait_for(slow, has_event("text", text="slow started"))
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        proc.kill()
    quick.refresh_from_db()
    slow.refresh_from_db()
    assert quick.status == Status.DONE
    assert slow.status == Status.CANCELLED
    assert "BRIDGE_DRAIN_S=2" in slow.error


def test_a_second_sigterm_cancels_at_once_saying_so(transactional_db, work_root, fake_agent, settings):
    proc = supervise_process(settings, {"BRIDGE_DRAIN_S": "600"})
    try:
        slow = wait_for(make_task("say slow started\nsleep 60"), has_event("text", text="slow started"))
        proc.send_signal(signal.SIGTERM)
        for line in proc.stderr:  # the drain has begun: it waits (up to 600 s) for the slow task
            if "draining running tasks" in line:
                break
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        proc.kill()
    slow.refresh_from_db()
    assert slow.status == Status.CANCELLED and "a second stop signal" in slow.error


def test_a_drain_says_truthfully_who_ended_a_pending_permission(transactional_db, work_root, fake_agent, settings):
    proc = supervise_process(settings, {"BRIDGE_DRAIN_S": "0"})
    try:
        task = make_task(ask("touch never.txt"))
        wait_for(task, has_event("permission_request"))
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        proc.kill()
    task.refresh_from_db()
    perm = PermissionRequest.objects.get(task=task)
    assert (task.status, perm.status, perm.decided_via) == (Status.CANCELLED, "cancelled", "supervisor")
    assert "Bridge stopped (restart or shutdown)" in perm.message
    assert "before anyone answered" in perm.message and "withdrew" not in perm.message


def test_a_task_ended_elsewhere_is_abandoned_and_its_agent_killed(supervisor):
    task = make_task("say working\nsleep 60")
    wait_for(task, has_event("text", text="working"))
    actions.mark_orphaned(task, "a peer found this supervisor's heartbeat stale")
    closed_at = Task.objects.get(pk=task.pk).last_seq
    assert_gone(task.pid)
    assert Task.objects.get(pk=task.pk).status == Status.ORPHANED
    assert Task.objects.get(pk=task.pk).last_seq == closed_at, "nothing is recorded after the task was closed"


class NoSupervisor:
    def wake(self) -> None:
        pass


@pytest.mark.parametrize("owed", ["nothing", "events", "an open question"])
@pytest.mark.parametrize("ended", ["no", "orphaned by a peer", "status changed behind Bridge's back"])
def test_the_end_is_recorded_only_on_a_task_still_running(transactional_db, work_root, owed, ended):
    """The run's last write, after its agent exited: a task ended elsewhere meanwhile gets nothing more, whatever
    the run still owed (the read that checks is skipped only when it owes nothing and has no question open)."""
    make_task("say hi")
    task = actions.claim_next_task(actions.register_worker(1, name="test-end"))
    run = TaskRun(NoSupervisor(), task)
    if owed == "events":
        run.rec.add_events([("text", {"text": "said last"})])
    elif owed == "an open question":
        actions.record_permission_request(task, request_id="q1", tool_name="Bash", tool_input={"command": "ls"})
        run.open_asks.add("q1")
    if ended == "orphaned by a peer":
        actions.mark_orphaned(task, "a peer found this supervisor's heartbeat stale")
    elif ended != "no":
        Task.objects.filter(pk=task.pk).update(status=Status.CANCELLED)
    before = Task.objects.get(pk=task.pk)
    questions_before = list(PermissionRequest.objects.values_list("status", flat=True))

    run._record_end(status=Status.DONE, result="done")

    after = Task.objects.get(pk=task.pk)
    kinds = [event.kind for event in actions.events_since(after)]
    if ended == "no":
        assert after.status == Status.DONE and kinds[-1] == "status"
        assert ("text" in kinds) == (owed == "events")
        assert all(status == "cancelled" for status in PermissionRequest.objects.values_list("status", flat=True))
    else:
        assert (after.status, after.last_seq) == (before.status, before.last_seq), "nothing more is recorded"
        assert list(PermissionRequest.objects.values_list("status", flat=True)) == questions_before
        assert not run.rec.writes


def test_a_supervisor_without_a_database_says_why_and_exits(tmp_path):
    env = {**os.environ, "BRIDGE_DATA_DIR": str(tmp_path)}
    env.pop("DATABASE_URL", None)
    run = subprocess.run(
        [sys.executable, str(REPO / "manage.py"), "supervise"], env=env, cwd=REPO, capture_output=True, text=True
    )
    assert run.returncode == 1
    assert "Bridge cannot use the database" in run.stderr and "manage.py migrate" in run.stderr, run.stderr
    assert "Traceback" not in run.stderr


# --- whatever the agent started dies with it ------------------------------------------------------------------

GRANDCHILDREN = "spawn-child\nspawn-escapee\nsay ready\nsleep 60"


def grandchildren(task: Task) -> list[int]:
    """The pids the fake agent reported for its grandchild in its group and the one that left it (setsid)."""
    texts = [e.data["text"] for e in actions.events_since(task) if e.kind == "text"]
    return [int(text.split()[1]) for text in texts if text.split()[0] in ("child", "escapee")]


@pytest.mark.parametrize("how", ["cancel", "timeout"])
def test_a_stopped_agent_takes_every_grandchild_with_it(supervisor, how, monkeypatch):
    """The escapee holds the agent's stdout after the agent exits: it is killed then, so the task ends without
    waiting out the drain (made longer here than wait_for waits)."""
    monkeypatch.setattr("jobs.supervision.supervisor.EXIT_DRAIN_S", 600.0)
    task = make_task(GRANDCHILDREN, timeout_s=3 if how == "timeout" else None)
    task = wait_for(task, has_event("text", text="ready"))
    pids = grandchildren(task)
    assert len(pids) == 2 and all(psutil.pid_exists(pid) for pid in pids)
    if how == "cancel":
        actions.request_cancel(task)
    task = wait_for(task)
    assert task.status == {"cancel": Status.CANCELLED, "timeout": Status.TIMEOUT}[how]
    for pid in pids:
        assert_gone(pid)


def test_a_killed_supervisor_leaves_no_grandchild_behind(transactional_db, work_root, fake_agent, settings):
    proc = supervise_process(settings)
    try:
        task = wait_for(make_task(GRANDCHILDREN), has_event("text", text="ready"))
        pids = grandchildren(task)
        assert len(pids) == 2 and all(psutil.pid_exists(pid) for pid in pids)
        proc.kill()
        proc.wait()
    finally:
        proc.kill()
    from jobs.supervision.supervisor import Supervisor

    restarted = Supervisor()
    restarted.worker = actions.register_worker(1)
    restarted.reap_orphans()
    for pid in [task.pid, *pids]:
        assert_gone(pid)
    assert Task.objects.get(pk=task.pk).status == Status.ORPHANED


# An agent that starts a process in a session of its own (out of the agent's group, re-parented when the agent goes),
# says its pid and exits: all that is left of the task is that escapee, found only by its spawn tag.
ESCAPING_AGENT = (
    "import subprocess, sys\n"
    "escapee = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'], start_new_session=True)\n"
    "print(escapee.pid, flush=True)\n"
)
FINDERS = {
    "a read of the task": lambda task, dead, alive: actions.get_task(str(task.public_id)),
    "a list's settling": lambda task, dead, alive: actions.settle_running_tasks(),
    "a stream's sweep": lambda task, dead, alive: actions.settle_running({task.pk: dead.pk}),
    "another supervisor's scan": lambda task, dead, alive: actions.orphan_others(alive),
}


@pytest.mark.parametrize("finder", list(FINDERS))
def test_whoever_orphans_a_task_kills_what_its_agent_left_behind(transactional_db, work_root, finder):
    """One orphaning rule wherever a dead supervisor's task is found: its agent's escaped descendants, on this host,
    are killed too (before, only the supervisor's scan killed them; a read left them running)."""
    make_task("say hi")
    dead = actions.register_worker(1, name="dead")
    task = actions.claim_next_task(dead)
    agent = processes.spawn(
        [sys.executable, "-c", ESCAPING_AGENT],
        cwd=work_root,
        env=dict(os.environ),
        stdin_pipe=False,
        tag=str(task.public_id),
    )
    escapee = int(agent.stdout.readline())
    agent.wait(timeout=10)
    # the agent's identity as the supervisor records it (processes.process_identity, not psutil's clock-based create
    # time: on Linux the two differ by the boot number, a random value per boot), a second before its escapee's
    actions.mark_spawned(task, agent.pid, processes.process_identity(escapee) - 1, ["agent"])
    actions.stop_worker(dead)
    alive = actions.register_worker(1, name="alive")
    try:
        assert psutil.pid_exists(escapee)
        FINDERS[finder](task, dead, alive)
        assert Task.objects.get(pk=task.pk).status == Status.ORPHANED
        assert_gone(escapee)
    finally:
        processes.kill_tagged(str(task.public_id))
