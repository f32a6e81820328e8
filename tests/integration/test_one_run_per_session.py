"""One run at a time in an agent session: a follow-up or resume of a session whose task is queued or running waits
behind it, says which task it waits for, and starts when that one ends (jobs/actions/runs.py, `session_is_free`).

Through the in-process supervisor and the fake agent (a supervisor that looks at the queue by itself only every two
minutes, so what starts a waiting task within the bound is a wake-up), over MCP as a planner sends it, and against a
model of the rule on generated orders of creates, claims and ends. On SQLite the last test runs this file again on
PostgreSQL, where claimers race.
"""

import json
import os
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

import pytest
from django.db import transaction
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from jobs import actions
from jobs.actions import runs
from jobs.core import doorbell
from jobs.core.vocabulary import Agent, Status
from jobs.models import AgentSession, Task, Worker
from tests.integration.test_mcp import JOB_ID, Session, over_stdio
from tests.support import at_once, has_event, make_task, postgres_or_skip, rerun_on_postgres, wait_for

BOUND_S = 15  # well under the supervisor's poll (SLOW_POLL_S): only a ring starts a waiting task this soon
SLOW_POLL_S = 120


@pytest.fixture
def slow_poll(fake_agent, settings):
    """The supervisor (requested after this fixture) looks at the queue by itself only every SLOW_POLL_S."""
    settings.BRIDGE_POLL_S = SLOW_POLL_S


def ask(command: str) -> str:
    return "ask Bash " + json.dumps({"command": command})


def waits_behind(task: Task) -> str:
    return (
        f"waits for task {task.public_id}, which is in the same agent session: a session runs one task at a time, "
        "so this one starts when that one ends"
    )


def asking() -> Task:
    """A new Claude task that has reported its session and now waits for a permission answer (it stays running)."""
    task = make_task(ask("true"))
    return wait_for(task, lambda t: t.session_id is not None and has_event("permission_request")(t), BOUND_S)


# --- through the supervisor ---------------------------------------------------------------------------------------


def test_a_resume_of_latest_while_its_session_runs_waits_for_that_task_and_starts_when_it_ends(
    slow_poll, supervisor, work_root
):
    """The measured case through the actions every adapter calls: `latest` resolves to the session whose task waits
    for a permission; the resume waits, and starts once that task has ended in the supervisor's own run (which wakes
    the supervisor: it does not sleep until its next poll)."""
    first = asking()
    latest = actions.known_session_id(Agent.CLAUDE, "latest", str(work_root)).session_id
    assert latest == first.session.session_id
    second = make_task("say second", resume_session_id=latest)
    assert second.wait_reason == waits_behind(first)
    assert actions.claim_next_task(supervisor.worker) is None, "the resume was claimed while its session ran"
    second.refresh_from_db()
    assert second.status == Status.QUEUED, "the supervisor started the resume while its session ran"
    actions.decide_permission(first, behavior="allow", by="tester")
    second = wait_for(second, lambda t: t.status != Status.QUEUED, BOUND_S)
    first.refresh_from_db()
    assert first.status == Status.DONE and second.started_at >= first.finished_at
    assert second.wait_reason == ""
    assert wait_for(second, timeout=BOUND_S).status == Status.DONE
    assert second.session_id == first.session_id


def test_a_follow_up_waits_behind_a_queued_task_of_its_session_and_starts_when_that_is_cancelled(
    slow_poll, supervisor, work_root
):
    """The task waited for ends outside the supervisor's runs (a cancel while queued, as the web process makes it):
    that end rings the queue, and the ring wakes the supervisor."""
    done = wait_for(make_task("say one"), timeout=BOUND_S)
    nowhere = make_task("say two", resume_session_id=done.session.session_id, target="no-such-supervisor")
    assert nowhere.wait_reason.startswith("no live supervisor has the name, host or label 'no-such-supervisor'")
    follow_up = actions.continue_task(done, "say three")
    assert follow_up.wait_reason == waits_behind(nowhere)
    assert actions.claim_next_task(supervisor.worker) is None, "the follow-up was claimed before the task it follows"
    assert Task.objects.get(pk=follow_up.pk).status == Status.QUEUED
    queue_rang = threading.Event()
    unsubscribe = doorbell.subscribe(doorbell.QUEUE, queue_rang.set, remote=False)
    try:
        actions.request_cancel(nowhere, "not there")  # rings, if at all, as it commits
    finally:
        unsubscribe()
    assert queue_rang.is_set(), "the cancel that left the follow-up free to start did not ring the queue"
    assert wait_for(follow_up, timeout=BOUND_S).status == Status.DONE


def test_tasks_of_different_sessions_still_run_at_once(slow_poll, supervisor, work_root):
    """Two sessions each have a task waiting for an answer and a resume queued behind it; a new task runs beside them,
    and ending one session's task starts that session's resume while the other session's still waits."""
    one, other = asking(), asking()
    resumes = {task.pk: make_task("say again", resume_session_id=task.session.session_id) for task in (one, other)}
    fresh = wait_for(make_task("say fresh"), timeout=BOUND_S)
    assert fresh.status == Status.DONE and Task.objects.get(pk=other.pk).status == Status.RUNNING
    actions.decide_permission(one, behavior="allow", by="tester")
    assert wait_for(resumes[one.pk], timeout=BOUND_S).status == Status.DONE
    assert Task.objects.get(pk=other.pk).status == Status.RUNNING
    still = Task.objects.get(pk=resumes[other.pk].pk)
    assert (still.status, still.wait_reason) == (Status.QUEUED, waits_behind(other))
    actions.decide_permission(other, behavior="allow", by="tester")
    assert wait_for(resumes[other.pk], timeout=BOUND_S).status == Status.DONE


def test_claude_resume_latest_while_the_session_asks_for_a_permission_queues_behind_it(mcp_env, supervisor, work_root):
    """What was measured: over MCP, `claude_resume(session_id="latest")` sent while the session's task waited for a
    permission started a second Claude on the session at once. Now it is queued, says what it waits for, and runs
    once the first has ended. (The `manage.py mcp` process has a data dir of its own, so its rings do not reach this
    process's supervisor: that one polls as usual here.)"""

    async def steps(session: Session):
        first = await session.call("claude_run", task=ask("true") + "\nsay one", cwd=str(work_root), wait_s=60)
        resumed = await session.call("claude_resume", session_id="latest", task="say two", cwd=str(work_root), wait_s=0)
        decided = await session.call("permission_decide", job_id=first.job_id, behavior="allow")
        return first, resumed, decided

    first, resumed, decided = over_stdio(mcp_env, steps)
    assert Task.objects.get(public_id=first.job_id).permission_requests.exists() and not decided.is_error, decided
    assert resumed.status == "STATUS: queued", resumed
    assert f"WAITING: waits for task {first.job_id}, which is in the same agent session" in resumed.text, resumed
    second = wait_for(Task.objects.get(public_id=JOB_ID.search(resumed.text).group(1)), timeout=BOUND_S)
    earlier = Task.objects.get(public_id=first.job_id)
    assert second.status == earlier.status == Status.DONE
    assert second.started_at >= earlier.finished_at, "the two runs of one session overlapped"


# --- the rule against a model, on generated orders ---------------------------------------------------------------


@dataclass
class Modelled:
    """What the model knows of one task."""

    pk: int
    agent: str
    resumed: str  # the session id it resumes, "" for a new session
    ran_in: str = ""  # the session id it reported once claimed
    status: str = Status.QUEUED


def holds_back(earlier: Modelled, task: Modelled) -> bool:
    """The rule as the README states it: a resume waits while another task of its session runs or is queued before
    it."""
    same = earlier.agent == task.agent and task.resumed in (earlier.resumed, earlier.ran_in)
    before = earlier.status == Status.RUNNING or (earlier.status == Status.QUEUED and earlier.pk < task.pk)
    return bool(task.resumed) and earlier.pk != task.pk and same and before


def expected_wait(tasks: list[Modelled], task: Modelled) -> Modelled | None:
    """The task the model says `task` waits for: the newest one that holds it back."""
    return max((e for e in tasks if holds_back(e, task)), key=lambda e: e.pk, default=None)


# Sessions a resume may name: two Bridge ran (the same id under both agents: two sessions), and one Bridge never saw
# begin (no AgentSession row until a task of it reports it), besides those of new tasks once they report theirs.
KNOWN = [(Agent.CLAUDE, "s-0"), (Agent.HERMES, "s-0"), (Agent.CLAUDE, "s-1")]
OUTSIDE = (Agent.CLAUDE, "begun-by-hand")
STEPS = ["new", "resume", "resume", "claim", "claim", "end", "cancel"]
ENDS = [Status.DONE, Status.FAILED, Status.TIMEOUT, Status.CANCELLED, Status.ORPHANED]


def running_per_session() -> Counter:
    """How many running tasks each (agent, session id) has, by the ids a task resumed and ran in."""
    counts: Counter = Counter()
    for agent, resumed, ran_in in Task.objects.running().values_list(
        "agent", "resume_session_id", "session__session_id"
    ):
        for session_id in {resumed, ran_in} - {"", None}:
            counts[(agent, session_id)] += 1
    return counts


class SessionModel:
    """Drives the real actions and the model side by side, checking after every step."""

    def __init__(self, work_root, worker: Worker, on_commit) -> None:
        self.cwd, self.worker, self.on_commit = str(work_root), worker, on_commit
        self.tasks: list[Modelled] = []
        self.sessions = [*KNOWN, OUTSIDE]
        self.started = 0

    def step(self, data, kind: str) -> None:
        getattr(self, kind)(data)
        assert max(running_per_session().values(), default=0) <= 1, f"two runs of one session: {running_per_session()}"
        actions.explain_waits(force=True)
        for task in self.in_status(Status.QUEUED):
            waits = expected_wait(self.tasks, task)
            reason = Task.objects.get(pk=task.pk).wait_reason
            assert reason == (waits_behind(self.row(waits)) if waits else ""), (task, waits, reason)

    def row(self, task: Modelled) -> Task:
        return Task.objects.get(pk=task.pk)

    def in_status(self, status: str) -> list[Modelled]:
        return [task for task in self.tasks if task.status == status]

    def new(self, data) -> None:
        self.create(data.draw(st.sampled_from(list(Agent)), label="agent"), "")

    def resume(self, data) -> None:
        self.create(*data.draw(st.sampled_from(self.sessions), label="session"))

    def create(self, agent: str, session_id: str) -> None:
        task = make_task("p", cwd=self.cwd, agent=agent, resume_session_id=session_id or None)
        modelled = Modelled(task.pk, agent, session_id)
        self.tasks.append(modelled)
        waits = expected_wait(self.tasks, modelled)
        assert task.wait_reason == (waits_behind(self.row(waits)) if waits else ""), "as it was queued"

    def claim(self, data) -> None:
        free = [t for t in self.in_status(Status.QUEUED) if expected_wait(self.tasks, t) is None]
        claimed = actions.claim_next_task(self.worker)
        assert (claimed and claimed.pk) == (free[0].pk if free else None), "not the oldest task free to start"
        if claimed is not None:
            task = free[0]
            task.status, self.started = Status.RUNNING, self.started + 1
            task.ran_in = task.resumed or f"new-{self.started}"  # what the agent reports on its first line
            actions.link_session(claimed, task.ran_in)
            if (task.agent, task.ran_in) not in self.sessions:
                self.sessions.append((task.agent, task.ran_in))

    def end(self, data) -> None:
        running = self.in_status(Status.RUNNING)
        if running:
            task = data.draw(st.sampled_from(running), label="ends")
            status = data.draw(st.sampled_from(ENDS), label="as")
            if status == Status.ORPHANED:
                self.ended(task, status, lambda: actions.mark_orphaned(self.row(task), "its supervisor died"))
            else:
                self.ended(task, status, lambda: actions.finish_task(self.row(task), status=status))

    def cancel(self, data) -> None:
        queued = self.in_status(Status.QUEUED)
        if queued:
            task = data.draw(st.sampled_from(queued), label="cancelled")
            self.ended(task, Status.CANCELLED, lambda: actions.request_cancel(self.row(task)))

    def ended(self, task: Modelled, status: str, end: Callable[[], object]) -> None:
        """End `task` by `end`: as it commits it rings the queue exactly when a resume of its session is left queued,
        so that a supervisor looks at once (it wakes by itself only when a run of its own ends)."""
        waiting = [t for t in self.in_status(Status.QUEUED) if t is not task and t.agent == task.agent]
        left = any(t.resumed in {task.resumed, task.ran_in} - {""} for t in waiting)
        rang = threading.Event()
        unsubscribe = doorbell.subscribe(doorbell.QUEUE, rang.set, remote=False)
        try:
            with self.on_commit(execute=True):
                end()
        finally:
            unsubscribe()
        task.status = status
        assert rang.is_set() == left, f"{status}: rang the queue {rang.is_set()}, a resume of its session waits {left}"


@hypothesis_settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_no_two_tasks_of_one_session_ever_run_at_once_and_the_oldest_free_task_is_claimed(
    db, work_root, django_capture_on_commit_callbacks, data
):
    """Generated orders of new tasks, resumes (of sessions Bridge ran, one it never saw begin, and those of new tasks
    once they report theirs), claims, ends of every kind and cancels of queued tasks: after every step no session has
    two running tasks, a claim takes the oldest queued task nothing holds back (so other sessions never wait), and
    every queued task names the task it waits for, as the model says; an end rings the queue when it leaves a resume
    of its session waiting. Each example is rolled back."""
    with transaction.atomic():
        worker = actions.register_worker(1, name="model-runner", labels=[])
        for agent, session_id in KNOWN:
            AgentSession.objects.create(agent=agent, session_id=session_id, cwd=str(work_root))
        model = SessionModel(work_root, worker, django_capture_on_commit_callbacks)
        for _ in range(data.draw(st.integers(1, 30), label="steps")):
            model.step(data, data.draw(st.sampled_from(STEPS), label="step"))
        transaction.set_rollback(True)


# --- claimers racing -------------------------------------------------------------------------------------------------


def claim_round(workers: list[Worker], queued: list[Task], reads: str, views: dict[int, list]) -> list[int]:
    """Each supervisor claims on a thread (and connection) of its own, all let go at once, until it gets nothing
    (`live`) or has tried every task of its own view of the queue (`stale`). Returns the claimed task pks."""
    claimed: list[int] = []

    def claim(worker: Worker) -> None:
        for _ in range(len(queued) + 1):
            task = actions.claim_next_task(worker)
            if task is not None:
                claimed.append(task.pk)
            elif reads == "live" or not views[worker.pk]:
                return

    at_once(claim, workers)
    return claimed


@pytest.mark.parametrize("reads", ["live", "stale"])
@hypothesis_settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), claimers=st.integers(2, 4), sessions=st.lists(st.sampled_from([None, 0, 1, 2]), max_size=10))
def test_claimers_racing_start_one_task_per_session_at_a_time(
    transactional_db, work_root, monkeypatch, reads, data, claimers, sessions
):
    """Supervisors claiming at once (threads, each with its own connection) over resumes of a few sessions and new
    tasks (None): in each round every new task and, of each session, exactly its oldest queued resume start; then the
    running ones end and the next round begins. `live`: the claim as it runs (on PostgreSQL the claimers race under
    SKIP LOCKED). `stale`: every claimer tries every queued task in an order of its own, so only the claim's UPDATE
    stands between a resume and its busy session."""
    Task.objects.all().delete()  # what an earlier example left (the database is not rolled back between them)
    for number in range(3):
        AgentSession.objects.get_or_create(agent=Agent.CLAUDE, session_id=f"race-{number}", cwd=str(work_root))
    workers = [actions.register_worker(1) for _ in range(claimers)]
    tasks = {
        make_task(f"task {i}", cwd=str(work_root), resume_session_id=None if s is None else f"race-{s}").pk: s
        for i, s in enumerate(sessions)
    }
    views: dict[int, list] = {}
    if reads == "stale":
        monkeypatch.setattr(runs, "_queued_for", lambda worker: [views[worker.pk].pop()] if views[worker.pk] else [])
    while queued := list(Task.objects.queued_in_order()):
        seen = [(t.pk, t.cwd, t.target, t.agent) for t in queued]
        views.update({w.pk: data.draw(st.permutations(seen), label="a claimer's view") for w in workers})
        claimed = claim_round(workers, queued, reads, views)
        first_of_each = {tasks[t.pk]: t.pk for t in reversed(queued) if tasks[t.pk] is not None}
        expected = {t.pk for t in queued if tasks[t.pk] is None} | set(first_of_each.values())
        assert Counter(claimed) == Counter(expected), f"claimed {claimed} of {[(t.pk, tasks[t.pk]) for t in queued]}"
        for task in Task.objects.running():
            actions.finish_task(task, status=Status.DONE)
    assert Task.objects.filter(pk__in=tasks, status=Status.DONE).count() == len(sessions)


def test_the_session_races_on_postgresql():
    """Run this file again on PostgreSQL, where several connections really write at once."""
    if os.environ.get("DATABASE_URL", "").startswith("postgres"):
        pytest.skip("this run is on PostgreSQL already")
    run = rerun_on_postgres(postgres_or_skip(), "-s", __file__, timeout=600)
    print(run.stdout[-1500:])
