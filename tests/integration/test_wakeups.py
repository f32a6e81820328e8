"""A run is event-driven (issue 12): it wakes for output, its child's exit, rings from others and the supervisor's
sweep, not on a clock, and never for its own writes."""

import threading

import pytest
from django.db.backends.signals import connection_created

from jobs import actions
from jobs.core import doorbell
from jobs.core.vocabulary import Status
from jobs.models import TaskEvent
from jobs.supervision import supervisor as supervisor_module
from jobs.supervision.supervisor import TaskRun
from tests.support import has_event, make_task, wait_for

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def checks(monkeypatch) -> list[str]:
    """Each look a run takes at the database, by task."""
    seen: list[str] = []
    real = TaskRun._check_database

    def counted(run: TaskRun) -> None:
        seen.append(str(run.task.public_id))
        real(run)

    monkeypatch.setattr(TaskRun, "_check_database", counted)
    return seen


def test_a_flood_of_output_does_not_make_the_run_look_at_the_database(supervisor, settings, checks):
    settings.BRIDGE_POLL_S = 30  # no clock-driven look within the test
    task = wait_for(make_task("flood 3000 20\nsay done"))
    assert task.status == Status.DONE
    batches = TaskEvent.objects.filter(task=task).values("created_at").distinct().count()
    assert batches > 3, "the flood should have been written in several batches"
    assert checks.count(str(task.public_id)) <= 2, "its own writes must not wake the run to look again"


def test_the_end_is_recorded_as_soon_as_the_agent_exits(supervisor, settings):
    settings.BRIDGE_POLL_S = 30
    task = wait_for(make_task("say hi"), timeout=10)
    assert task.status == Status.DONE
    result = TaskEvent.objects.get(task=task, kind="result")
    assert (task.finished_at - result.created_at).total_seconds() < 1.0


def test_a_cancel_whose_ring_was_lost_still_reaches_the_run_through_the_sweep(supervisor, settings, monkeypatch):
    settings.BRIDGE_POLL_S = 0.2
    task = make_task("say started\nsleep 60")
    wait_for(task, has_event("text", text="started"))
    rings: list[str] = []
    with monkeypatch.context() as patch:
        patch.setattr(doorbell, "ring", rings.append)  # every ring of the cancel is lost
        actions.request_cancel(task, reason="ring lost", by="test")
    assert str(task.public_id) in rings
    task = wait_for(task, timeout=20)
    assert task.status == Status.CANCELLED
    assert task.error == "ring lost"


def test_a_quiet_run_gives_its_connection_back_and_takes_another_for_its_next_output(supervisor, monkeypatch):
    """An open connection costs memory (SQLite) or a pool slot (PostgreSQL) however long the agent is quiet."""
    monkeypatch.setattr(supervisor_module, "QUIET_CLOSE_S", 0.2)
    opened_by: list[threading.Thread] = []

    def opened(sender, connection, **kwargs) -> None:
        opened_by.append(threading.current_thread())

    connection_created.connect(opened)
    try:
        task = wait_for(make_task("say before\nsleep 1\nsay after"), timeout=20)
    finally:
        connection_created.disconnect(opened)
    assert task.status == Status.DONE
    texts = [event.data["text"] for event in TaskEvent.objects.filter(task=task, kind="text").order_by("seq")]
    assert texts == ["before", "after"]
    run_opens = [thread for thread in opened_by if isinstance(thread, TaskRun)]
    assert len(run_opens) >= 2, f"the run opened {len(run_opens)} connection(s): it kept its first while quiet"
