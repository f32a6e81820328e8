"""Shared fixtures: confined work roots, the fake agent, an in-process supervisor, and waiting on the doorbell."""

import os
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from jobs import actions, doorbell
from jobs.models import Task

FAKES = Path(__file__).parent / "fakes"
IN_CI = bool(os.environ.get("CI"))


def skip_or_fail(reason: str) -> None:
    """Tests that need something missing skip on a laptop and fail in CI, where everything must be there."""
    if IN_CI:
        pytest.fail(f"{reason} (CI is set, so this is a failure, not a skip)")
    pytest.skip(reason)


@pytest.fixture
def work_root(tmp_path, settings) -> Path:
    root = tmp_path / "work"
    root.mkdir()
    settings.BRIDGE_ALLOWED_ROOTS = [root]
    settings.BRIDGE_DEFAULT_CWD = root
    return root.resolve()


@pytest.fixture
def fake_agent(tmp_path, settings) -> Path:
    """Point BRIDGE_CLAUDE_BIN at the fake stream-json agent, with short grace periods."""
    script = tmp_path / "fake-claude"
    script.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{FAKES / "fake_claude.py"}" "$@"\n')
    script.chmod(0o755)
    settings.BRIDGE_CLAUDE_BIN = str(script)
    settings.BRIDGE_KILL_GRACE_S = 1
    settings.BRIDGE_DRAIN_S = 0
    settings.BRIDGE_POLL_S = 0.2
    return script


@pytest.fixture
def supervisor(transactional_db, work_root, fake_agent, settings):
    from jobs.supervisor import Supervisor

    sup = Supervisor()
    thread = threading.Thread(target=sup.run, daemon=True)
    thread.start()
    assert sup.ready.wait(10), "the supervisor did not start"
    yield sup
    sup.request_stop()
    thread.join(30)
    assert not thread.is_alive(), "the supervisor did not stop"


def wait_for(task: Task, predicate: Callable[[Task], bool] = lambda t: t.is_terminal, timeout: float = 30) -> Task:
    """Wait until `predicate(task)` holds, re-reading the task whenever the doorbell rings for it."""
    rang = threading.Event()
    unsubscribe = doorbell.subscribe(str(task.public_id), rang.set)
    deadline = time.monotonic() + timeout
    try:
        while True:
            rang.clear()
            task.refresh_from_db()
            if predicate(task):
                return task
            left = deadline - time.monotonic()
            if left <= 0:
                kinds = [e.kind for e in actions.events_since(task)]
                raise AssertionError(f"timed out: task is {task.status} ({task.error!r}); events: {kinds}")
            rang.wait(min(left, 1.0))
    finally:
        unsubscribe()


def has_event(kind: str, **match) -> Callable[[Task], bool]:
    def check(task: Task) -> bool:
        return any(
            e.kind == kind and all(e.data.get(k) == v for k, v in match.items()) for e in actions.events_since(task)
        )

    return check


def make_task(prompt: str, **kwargs) -> Task:
    return actions.create_task(actions.TaskSpec(prompt=prompt, **kwargs))
