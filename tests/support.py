"""Helpers the tests import: skipping what a laptop lacks, making tasks, waiting on the doorbell, and the helpers
tests at two levels share (unit and integration, or unit and e2e)."""

import contextlib
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.db import connection
from hypothesis import strategies as st

from jobs import actions
from jobs.core import doorbell
from jobs.models import Task
from tests import server_logs
from tests.bridge_server import run_manage

REPO = Path(__file__).resolve().parent.parent
FAKES = Path(__file__).parent / "fakes"
IN_CI = bool(os.environ.get("CI"))
POSTGRES_URL = os.environ.get("BRIDGE_TEST_POSTGRES_URL", "postgres://postgres@127.0.0.1:5432/bridge")

# The MCP tools Bridge serves: the older bridge's seven, then Claude's, the decision tools and the changes' tools.
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
    "agent_run",
    "agent_resume",
    "task_cancel",
    "permissions_pending",
    "permission_decide",
    "task_changes",
    "task_merge",
    "task_discard",
    "rules_list",
    "rule_add",
    "rule_remove",
    "rule_preset",
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


def wait_until(check: Callable[[], object], timeout: float = 30, what: str = "") -> object:
    """Look again every 50 ms until `check()` is truthy, for what has no doorbell to wait on (another process's
    state, a log file); fail with `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not (value := check()):
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what or check}")
        time.sleep(0.05)
    return value


def has_event(kind: str, **match) -> Callable[[Task], bool]:
    def check(task: Task) -> bool:
        return any(
            e.kind == kind and all(e.data.get(k) == v for k, v in match.items()) for e in actions.events_since(task)
        )

    return check


def at_once(work: Callable[[Any], None], items: list) -> None:
    """`work(item)` for every item at the same moment (let go by a barrier), each on a thread, and so a database
    connection, of its own; fails if a thread never returns or raised anything."""
    barrier = threading.Barrier(len(items), timeout=10)
    errors: list[BaseException] = []

    def run(item: Any) -> None:
        try:
            barrier.wait()
            work(item)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=run, args=(item,)) for item in items]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert not any(thread.is_alive() for thread in threads), "a thread never returned"
    assert not errors, errors


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
    """Run pytest again with DATABASE_URL=url (for tests that only mean something where writers really race).

    Under pytest-xdist each worker's reruns get a database of their own (pytest-django names the test database
    after it), so two reruns at once do not drop each other's."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *pytest_args],
        cwd=REPO,
        env={**os.environ, "DATABASE_URL": f"{url}_{worker}" if worker else url},
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert run.returncode == 0, f"on PostgreSQL:\n{run.stdout[-6000:]}\n{run.stderr[-3000:]}"
    return run


# --- Bridge processes on a shared database (several supervisors, a web process without one) ------------------------

LISTENING_RE = re.compile(r"Bridge is listening on (http://\S+?)/?\s*$")


def fake_agent_script(directory: Path) -> str:
    """An executable that runs the fake stream-json agent (tests/fakes/fake_claude.py), for BRIDGE_CLAUDE_BIN."""
    script = directory / "fake-claude"
    script.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{FAKES / "fake_claude.py"}" "$@"\n')
    script.chmod(0o755)
    return str(script)


def manage(env: dict[str, str], *args: str, timeout: float = 120) -> str:
    """`manage.py ARGS…` in `env`; its stdout, or RuntimeError with everything it printed."""
    return run_manage(list(args), env, timeout).stdout


def stop_process(proc: subprocess.Popen) -> None:
    """SIGTERM (a clean stop: a supervisor drains), then SIGKILL if it has not exited within 30 s."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


class SuperviseProcess:
    """`manage.py supervise --name NAME [--label L]… [ARGS]` on the test database, serving `roots`; started once its log
    says it is up. Its stderr is read all along (kept in `lines`), so it never blocks on a full pipe. `extra_env` comes
    last: it may name another database (DATABASE_URL) than the test run's, or drop a variable (a value of None)."""

    def __init__(
        self, settings, name: str, roots: list[Path], labels=(), extra_env: dict | None = None, args: tuple = ()
    ):
        self.name = name
        env = {
            **os.environ,
            "DATABASE_URL": database_url(settings.DATABASES["default"]),
            "BRIDGE_CLAUDE_BIN": settings.BRIDGE_CLAUDE_BIN,
            "BRIDGE_ALLOWED_ROOTS": os.pathsep.join(str(root) for root in roots),
            "BRIDGE_KILL_GRACE_S": "1",
            "BRIDGE_POLL_S": "0.2",
            "BRIDGE_PROCESS_BACKEND": settings.BRIDGE_PROCESS_BACKEND,
            "BRIDGE_LOG_LEVEL": "INFO",
            **(extra_env or {}),
        }
        env = {key: value for key, value in env.items() if value is not None}
        argv = [sys.executable, str(REPO / "manage.py"), "supervise", "--name", name, *args]
        for label in labels:
            argv += ["--label", label]
        self.proc = subprocess.Popen(argv, env=env, cwd=REPO, stderr=subprocess.PIPE, text=True)
        self.lines: list[str] = []
        self.up = threading.Event()
        threading.Thread(target=self._read, daemon=True).start()
        if not self.up.wait(60) or self.proc.poll() is not None:
            self.stop()
            raise AssertionError(f"supervisor {name} did not start:\n" + "".join(self.lines[-30:]))

    def _read(self) -> None:
        for line in self.proc.stderr:
            self.lines.append(line)
            if f"supervisor {self.name}: up to" in line:
                self.up.set()
        self.up.set()  # it exited: whoever waits finds out at once

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(30)

    def stop(self) -> None:
        stop_process(self.proc)


class WebProcess:
    """`manage.py runbridge --port 0` in `env` (by default `--no-supervisor`: serving only), started once it says where
    it listens; its stderr goes to `log_path`."""

    def __init__(self, env: dict[str, str], log_path: Path, *, supervisor: bool = False, timeout: float = 60):
        self.log_path = log_path
        argv = [sys.executable, str(REPO / "manage.py"), "runbridge", "--host", "127.0.0.1", "--port", "0"]
        with open(log_path, "wb") as log:
            self.proc = subprocess.Popen(
                argv + ([] if supervisor else ["--no-supervisor"]),
                cwd=REPO,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=log,
                text=True,
            )
        server_logs.RUNNING.add(log_path)
        self.url = ""
        found = threading.Event()

        def read() -> None:
            for line in self.proc.stdout:
                match = LISTENING_RE.search(line)
                if match and not self.url:
                    self.url = match.group(1)
                    found.set()
            found.set()

        threading.Thread(target=read, daemon=True).start()
        if not found.wait(timeout) or not self.url:
            self.stop()
            raise AssertionError(f"runbridge did not say where it listens:\n{self.log()[-5000:]}")

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self) -> None:
        stop_process(self.proc)
        server_logs.RUNNING.discard(self.log_path)


def redis_or_skip(url: str) -> str:
    """`url`, once Redis answers there; skip (fail in CI) when it does not."""
    import redis

    try:
        redis.Redis.from_url(url, socket_connect_timeout=2).ping()
    except redis.RedisError as exc:
        skip_or_fail(f"Redis is not reachable at {url} (set REDIS_URL or BRIDGE_TEST_REDIS_URL): {exc}")
    return url


@contextlib.contextmanager
def private_postgres_database(url: str, suffix: str) -> Iterator[tuple[str, Any]]:
    """A new, empty PostgreSQL database named after `url`'s plus `suffix`, dropped afterwards (whoever is still
    connected): yields its URL and an autocommit admin connection to the server."""
    import psycopg

    base, name = url.rsplit("/", 1)
    name = f"{name}_{suffix}"
    admin = psycopg.connect(f"{base}/postgres", autocommit=True)
    try:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.execute(f'CREATE DATABASE "{name}"')
        yield f"{base}/{name}", admin
    finally:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.close()


def terminate_backends(admin, name: str) -> int:
    """Drop every connection to database `name` (but the caller's own), as a failover or an operator would."""
    rows = admin.execute(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()",
        [name],
    ).fetchall()
    return len(rows)


# An HTTP request's ASGI scope as Daphne gives it, less the method, path, query and headers each test adds.
ASGI_HTTP_SCOPE = {
    "type": "http",
    "http_version": "1.1",
    "root_path": "",
    "scheme": "http",
    "query_string": b"",
    "client": ("127.0.0.1", 50000),
    "server": ("127.0.0.1", 8800),
}


# --- shared by tests at two levels ---------------------------------------------------------------------------------


def python_script(path: Path, body: str = "", first_line: str = f"#!{sys.executable}") -> Path:
    """An executable console-script-like file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"{first_line}\n{body}")
    path.chmod(0o755)
    return path


def sized_prompt(size: int, marker: str) -> str:
    """A task of exactly `size` bytes (UTF-8, with 2- and 3-byte characters) asking the fake what it received."""
    head = f"digest\ncmdline\nstdin\n# {marker} "
    filler = ("é✓x" * (size // 6 + 1)).encode()[: max(0, size - len(head.encode()))].decode(errors="ignore")
    prompt = head + filler
    return prompt + "x" * (size - len(prompt.encode()))


_LOGIN = {"accessToken": "sk-ant-oat01-fake", "refreshToken": "x", "expiresAt": 9999999999999}
# Claude Code's credentials files as `claude` then /login leaves them, and as it does not accept them.
CREDENTIALS = {
    "a login": {"claudeAiOauth": {**_LOGIN, "scopes": ["user:inference", "user:profile"]}},
    "a login without the inference scope": {"claudeAiOauth": {**_LOGIN, "scopes": ["user:profile"]}},
    "a login without scopes": {"claudeAiOauth": _LOGIN},
    "no login": {"mcpOAuth": {}},
}

# `manage.py register_claude` (its fixtures `home`, `environ` and `data_dir` are in tests/conftest.py).
MANAGE_PY = str(REPO / "manage.py")
TOKEN = "brg_do_not_leak_this_token_value"


def register(home: Path, environ: dict, platform: str, *args: str) -> str:
    out, err = StringIO(), StringIO()
    call_command("register_claude", *args, home=home, environ=environ, platform=platform, stdout=out, stderr=err)
    return out.getvalue() + err.getvalue()


# Path components for generated paths: letters in both cases (an accented one too), digits, dots and the like; never
# "." or "..".
COMPONENT = st.text(st.sampled_from("abcxyzABCXYZéÉ019._- "), min_size=1, max_size=6).filter(
    lambda c: c.strip(".") != ""
)
COMPONENTS = st.lists(COMPONENT, min_size=1, max_size=6)


def posix(components: list[str]) -> str:
    return "/" + "/".join(components)


def recased(text: str, flips: list[bool]) -> str:
    """`text` with some letters' case swapped: the same name to a file system that ignores case."""
    return "".join(c.swapcase() if flip else c for c, flip in zip(text, flips + [False] * len(text), strict=False))
