"""Confinement holds at spawn (issue 11.2): a task's cwd swapped for a symlink after it was checked never runs there."""

import os
import threading

import psutil
import pytest

from jobs import actions
from jobs.core.vocabulary import Status
from jobs.models import Task
from jobs.supervision.supervisor import TaskRun
from tests.support import has_event, make_task, wait_for

pytestmark = pytest.mark.django_db(transaction=True)


class NoSupervisor:
    """What a TaskRun asks of its supervisor: only to be told when it ends."""

    def __init__(self) -> None:
        self.ended = threading.Event()

    def wake(self) -> None:
        self.ended.set()


def claimed(prompt: str, cwd) -> Task:
    """A task queued in `cwd` and claimed, as the supervisor's claim (checks included) leaves it just before spawn."""
    task = make_task(prompt, cwd=str(cwd))
    worker = actions.register_worker(1, name=f"test-{task.public_id}")
    got = actions.claim_next_task(worker)
    assert got is not None and got.pk == task.pk
    return got


def run(task: Task) -> TaskRun:
    owner = NoSupervisor()
    task_run = TaskRun(owner, task)
    task_run.start()
    return task_run


def swap_for_symlink(directory, target) -> None:
    directory.rmdir()
    os.symlink(target, directory)


@pytest.mark.parametrize("outside", ["/etc", "sibling"])
def test_a_cwd_swapped_for_a_symlink_out_after_the_claim_fails_and_nothing_runs(
    transactional_db, work_root, fake_agent, tmp_path, outside
):
    target = "/etc" if outside == "/etc" else tmp_path / "elsewhere"
    if outside != "/etc":
        target.mkdir()
    d = work_root / "d"
    d.mkdir()
    task = claimed("say must not run", d)
    swap_for_symlink(d, target)
    task_run = run(task)
    task = wait_for(task)
    task_run.join(10)
    assert task.status == Status.FAILED
    assert "checked again at start" in task.error and "outside the allowed roots" in task.error
    assert str(os.path.realpath(target)) in task.error
    assert task.pid is None
    assert not has_event("spawned")(task), "the agent must never have been started"


def test_the_agent_starts_in_the_directory_that_was_checked(transactional_db, work_root, fake_agent):
    d, inside = work_root / "d", work_root / "inside"
    d.mkdir()
    inside.mkdir()
    task = claimed("say started\nsleep 30", d)
    swap_for_symlink(d, inside)
    task_run = run(task)
    task = wait_for(task, has_event("text", text="started"))
    try:
        assert psutil.Process(task.pid).cwd() == str(inside.resolve())
    finally:
        actions.request_cancel(task, reason="done looking", by="test")
        task_run.wake()
        wait_for(task)
        task_run.join(20)
