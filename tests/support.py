"""Helpers the tests import: skipping what a laptop lacks, making tasks, and waiting on the doorbell."""

import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from jobs import actions, doorbell
from jobs.models import Task

REPO = Path(__file__).resolve().parent.parent
FAKES = Path(__file__).parent / "fakes"
IN_CI = bool(os.environ.get("CI"))
POSTGRES_URL = os.environ.get("BRIDGE_TEST_POSTGRES_URL", "postgres://postgres@127.0.0.1:5432/bridge")

# The MCP tools Bridge serves: the older bridge's seven, then Claude's and the decision tools.
TOOLS = {
    "hermes_run",
    "hermes_resume",
    "hermes_status",
    "hermes_jobs",
    "hermes_read",
    "hermes_capabilities",
    "hermes_health",
    "claude_run",
    "claude_resume",
    "task_cancel",
    "permissions_pending",
    "permission_decide",
}


def skip_or_fail(reason: str) -> None:
    """Tests that need something missing skip on a laptop and fail in CI, where everything must be there."""
    if IN_CI:
        pytest.fail(f"{reason} (CI is set, so this is a failure, not a skip)")
    pytest.skip(reason)


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


def database_url(db: dict) -> str:
    """The test database as a DATABASE_URL, for a `manage.py` subprocess."""
    if db["ENGINE"].endswith("sqlite3"):
        return f"sqlite:///{db['NAME']}"
    return f"postgres://{db['USER']}:{db['PASSWORD']}@{db['HOST']}:{db['PORT'] or 5432}/{db['NAME']}"


def postgres_or_skip(url: str = POSTGRES_URL) -> str:
    """`url`, once PostgreSQL answers there; skip (fail in CI) when psycopg or the server is missing."""
    try:
        import psycopg
    except ImportError:
        skip_or_fail("psycopg is not installed (pip install -e '.[postgres]')")
    server = url.rsplit("/", 1)[0] + "/postgres"
    try:
        psycopg.connect(server, connect_timeout=3).close()
    except psycopg.OperationalError as exc:
        skip_or_fail(f"PostgreSQL is not reachable at {server} (set BRIDGE_TEST_POSTGRES_URL): {exc}")
    return url


def rerun_on_postgres(url: str, *pytest_args: str, timeout: float) -> subprocess.CompletedProcess:
    """Run pytest again with DATABASE_URL=url (for tests that only mean something where writers really race)."""
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *pytest_args],
        cwd=REPO,
        env={**os.environ, "DATABASE_URL": url},
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert run.returncode == 0, f"on PostgreSQL:\n{run.stdout[-6000:]}\n{run.stderr[-3000:]}"
    return run
