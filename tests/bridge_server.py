"""Support for the end-to-end tests: a real Bridge (`manage.py runbridge`) in a subprocess, driving the real
Claude Code CLI against the fake Anthropic server on 127.0.0.1, seen only through REST and SSE.

Not a test module. Used by the end-to-end, browser and server tests, and the benches.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import cast

import httpx
import psutil
import pytest

from tests import server_logs
from tests.fakes.claude_env import offline_env

REPO = Path(__file__).resolve().parent.parent
DEFAULT_CLAUDE_BIN = REPO / ".tools" / "claude" / "node_modules" / ".bin" / "claude"
LISTENING_RE = re.compile(r"Bridge is listening on (http://\S+?)/?\s*$")
PROXY_VARS = ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "NO_PROXY", "no_proxy")
# Outer variables that must never reach the server under test (it would use another database / channel layer).
DROPPED_VARS = ("DATABASE_URL", "REDIS_URL", "DJANGO_SECRET_KEY")


def claude_bin() -> str:
    """The real CLI: $BRIDGE_TEST_CLAUDE_BIN, else the one `make claude-cli` installs. Missing: skip, or fail on CI."""
    configured = os.environ.get("BRIDGE_TEST_CLAUDE_BIN")
    path = Path(configured) if configured else DEFAULT_CLAUDE_BIN
    if path.is_file() and os.access(path, os.X_OK):
        return str(path)
    reason = (
        f"the Claude Code CLI is not installed at {path} "
        "(run `make claude-cli`, or set BRIDGE_TEST_CLAUDE_BIN to its path)"
    )
    if os.environ.get("CI"):
        pytest.fail(f"CI is set, so the end-to-end tests must run: {reason}", pytrace=False)
    pytest.skip(reason)


def run_manage(args: list[str], env: dict[str, str], timeout: float = 60) -> subprocess.CompletedProcess:
    """`manage.py ARGS…` in `env`, or RuntimeError with everything it printed."""
    proc = subprocess.run(
        [sys.executable, str(REPO / "manage.py"), *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"manage.py {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc


def new_token(env: dict[str, str], name: str = "e2e") -> str:
    out = run_manage(["token", "create", name], env).stdout.strip().splitlines()
    assert out and out[-1].strip(), "`token create` printed no token"
    return out[-1].strip()


_template: tuple[Path, str] | None = None


def migrated_template(env: dict[str, str]) -> tuple[Path, str]:
    """A SQLite database migrated once per test run, holding one token: each new server starts on a copy of it,
    which saves two `manage.py` start-ups (about 3 s) per server."""
    global _template
    if _template is None:
        data = Path(tempfile.mkdtemp(prefix="bridge-template-"))
        template_env = {**env, "BRIDGE_DATA_DIR": str(data)}
        run_manage(["migrate", "--no-input", "-v0"], template_env)
        _template = (data / "bridge.sqlite3", new_token(template_env))
    return _template


class BridgeServer:
    """`manage.py runbridge` on `port` (0: a free one) with its own data dir, allowed root, HOME and an offline
    environment. A fixed port lets a test set BRIDGE_PUBLIC_URL to the server's own address, and restart it there."""

    def __init__(
        self,
        root: Path,
        fake_url: str,
        claude: str = "",
        extra_env: dict[str, str] | None = None,
        port: int = 0,
    ) -> None:
        self.root = Path(root)
        self.port = port
        self.data_dir = self.root / "data"
        self.work = self.root / "work"
        self.home = self.root / "home"
        for d in (self.data_dir, self.work, self.home):
            d.mkdir(parents=True, exist_ok=True)
        self.work = self.work.resolve()
        env = offline_env(fake_url, str(self.home))  # a complete environment: nothing else leaks in from outside
        env.update(
            {
                "BRIDGE_DATA_DIR": str(self.data_dir),
                "BRIDGE_ALLOWED_ROOTS": str(self.work),
                "BRIDGE_CLAUDE_BIN": claude,
                "BRIDGE_PASS_ENV": ",".join(v for v in PROXY_VARS if v in env),
                "BRIDGE_DRAIN_S": "5",
                "BRIDGE_KILL_GRACE_S": "2",
                "BRIDGE_SSE_HEARTBEAT_S": "1",  # lets a stuck stream notice its deadline
                "BRIDGE_POLL_S": "0.2",
                "PYTHONUNBUFFERED": "1",
                "DJANGO_SETTINGS_MODULE": "bridge.settings",
            }
        )
        env.update(extra_env or {})
        for name in DROPPED_VARS:
            env.pop(name, None)
        self.env = env
        self.url = ""
        self.token = ""
        self.proc: subprocess.Popen | None = None
        self.stdout_lines: list[str] = []
        self.log_path = self.root / "runbridge.stderr.log"
        self._client: httpx.Client | None = None

    # lifecycle -------------------------------------------------------------------------------------------------
    def start(self, timeout: float = 30) -> BridgeServer:
        database = self.data_dir / "bridge.sqlite3"
        if database.exists():  # started before: a token this object made stays valid; else one of its own
            run_manage(["migrate", "--no-input", "-v0"], self.env)
            self.token = self.token or new_token(self.env, f"e2e-{secrets.token_hex(4)}")
        else:
            template, self.token = migrated_template(self.env)
            for suffix in ("", "-wal"):  # a write-ahead log left behind holds committed rows too
                if Path(f"{template}{suffix}").exists():
                    shutil.copyfile(f"{template}{suffix}", f"{database}{suffix}")
                    Path(f"{database}{suffix}").chmod(0o600)
        log = open(self.log_path, "wb")  # noqa: SIM115 - kept open for the server's lifetime
        self.proc = subprocess.Popen(
            [sys.executable, str(REPO / "manage.py"), "runbridge", "--host", "127.0.0.1", "--port", str(self.port)],
            cwd=REPO,
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
        )
        log.close()
        server_logs.RUNNING.add(self.log_path)
        self.url, self.stdout_lines = "", []  # a restart announces itself anew (on the same port when one is fixed)
        found = threading.Event()

        def read_stdout() -> None:
            for line in self.proc.stdout:
                self.stdout_lines.append(line.rstrip("\n"))
                match = LISTENING_RE.search(line)
                if match and not self.url:
                    self.url = match.group(1)
                    found.set()
            found.set()

        threading.Thread(target=read_stdout, name="runbridge-stdout", daemon=True).start()
        if not found.wait(timeout) or not self.url:
            self.stop()
            raise RuntimeError(f"runbridge did not announce its URL within {timeout} s:\n{self.output()}")
        return self.attach(self.url, self.token)

    def attach(self, url: str, token: str) -> BridgeServer:
        """Talk to the server at `url` with `token` (one this object started, or one started another way)."""
        self.url, self.token = url, token
        self._client = httpx.Client(
            base_url=url,
            headers={"Authorization": f"Bearer {token}"},
            timeout=httpx.Timeout(30.0),
            trust_env=False,  # never route 127.0.0.1 through an outer proxy
        )
        return self

    def stop(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        server_logs.RUNNING.discard(self.log_path)

    def output(self) -> str:
        """Everything the server printed so far (for failure messages)."""
        try:
            stderr = self.log_path.read_text(errors="replace")
        except OSError:
            stderr = ""
        return "stdout:\n" + "\n".join(self.stdout_lines) + "\nstderr:\n" + stderr[-5000:]

    def web_processes(self) -> list[psutil.Process]:
        """The web processes runbridge started to serve its port (none when it serves from its own process)."""
        web = []
        for child in psutil.Process(self.proc.pid).children():
            try:
                if "--inherited-endpoint" in child.cmdline():
                    web.append(child)
            except psutil.Error:  # one that has just exited, not yet reaped
                pass
        return web

    def processes(self) -> list[psutil.Process]:
        """runbridge and its web processes: the server, without the agents it runs."""
        return [psutil.Process(self.proc.pid), *self.web_processes()]

    def __enter__(self) -> BridgeServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # API -------------------------------------------------------------------------------------------------------
    @property
    def client(self) -> httpx.Client:
        assert self._client is not None, "the server is not started"
        return self._client

    def get(self, path: str, **params) -> httpx.Response:
        return self.client.get(path, params=params)

    def post(self, path: str, body: dict) -> httpx.Response:
        return self.client.post(path, json=body)

    def ok(self, response: httpx.Response) -> dict:
        assert response.status_code == 200, f"{response.request.method} {response.request.url}: " + (
            f"{response.status_code} {response.text}"
        )
        return response.json()

    def create_task(self, prompt: str, cwd: Path | str, **fields) -> str:
        body = {"prompt": prompt, "cwd": str(cwd), "timeout_s": 60, **fields}
        return self.ok(self.post("/v1/task/create", body))["task_id"]

    def task(self, task_id: str) -> dict:
        return self.ok(self.get("/v1/task", task_id=task_id))

    def output_of(self, task_id: str) -> dict:
        return self.ok(self.get("/v1/task/output", task_id=task_id))

    def decide(self, task_id: str, behavior: str, **fields) -> httpx.Response:
        return self.post("/v1/task/permission", {"task_id": task_id, "behavior": behavior, **fields})

    def permissions(self, task_id: str) -> list[dict]:
        return self.ok(self.get("/v1/permissions", task_id=task_id))["permissions"]

    def stream(self, task_id: str, **kw) -> Iterator[dict]:
        return sse_events(self.client, task_id, **kw)


def sse_events(
    client: httpx.Client,
    task_id: str,
    *,
    last_event_id: int | None = None,
    since: int | None = None,
    deadline_s: float = 45.0,
) -> Iterator[dict]:
    """Follow GET /v1/task/output/stream; yield {"id": int|None, "event": str, "data": dict} per SSE event.

    Stops after the `end` event (which is yielded) or when the stream closes. After `end` it reads the stream to its
    close (hbridge's `done` comes in the same write), so the connection goes back to the client's pool as any
    keep-alive client's would, instead of being dropped unread. Raises TimeoutError once `deadline_s` has passed (the
    server sends heartbeats, so this is checked even when the task is silent).
    """
    params = {"task_id": task_id}
    if since is not None:
        params["since"] = str(since)
    headers = {"Accept": "text/event-stream"}
    if last_event_id is not None:
        headers["Last-Event-ID"] = str(last_event_id)
    deadline = time.monotonic() + deadline_s
    with client.stream(
        "GET", "/v1/task/output/stream", params=params, headers=headers, timeout=httpx.Timeout(30.0)
    ) as response:
        if response.status_code != 200:
            response.read()
            raise AssertionError(f"SSE stream: {response.status_code} {response.text}")
        event_id, event, data = None, "message", []
        lines = response.iter_lines()
        for line in lines:
            if time.monotonic() > deadline:
                raise TimeoutError(f"SSE stream of task {task_id} still open after {deadline_s} s")
            if line == "":
                if data:
                    yield {"id": event_id, "event": event, "data": json.loads("\n".join(data))}
                    if event == "end":
                        for _ in lines:
                            pass
                        return
                event_id, event, data = None, "message", []
                continue
            if line.startswith(":"):
                continue  # comment / heartbeat
            name, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if name == "id":
                event_id = int(value)
            elif name == "event":
                event = value
            elif name == "data":
                data.append(value)
            # "retry" and unknown fields are ignored, as the SSE spec says


class Script:
    """One test's slice of a shared scripted LLM server: what it scripted and which main requests it caused."""

    def __init__(self, fake) -> None:
        self.fake = fake
        fake.clear()  # a failed earlier test may have left replies behind: start clean
        self.start = len(fake.main_requests)

    def push(self, *replies) -> None:
        self.fake.push(*replies)

    @property
    def requests(self) -> list[dict]:
        """The main (scripted) API requests made since this test began."""
        return self.fake.main_requests[self.start :]


def data_events(events: list[dict]) -> list[dict]:
    """Bridge's transcript events (each has its seq as `id:`), without `end` and hbridge's extra events."""
    return [e for e in events if e["id"] is not None]


def closing_times(socks: list[socket.socket], since: float, bound_s: float) -> tuple[list[bytes], list[float]]:
    """What each socket received until the server closed it, and when (seconds after `since`), read side by side;
    TimeoutError when some are still open after `bound_s` without a byte."""
    received = {sock: b"" for sock in socks}
    closed: dict[socket.socket, float] = {}
    with selectors.DefaultSelector() as selector:
        for sock in socks:
            sock.setblocking(False)
            selector.register(sock, selectors.EVENT_READ)
        while len(closed) < len(socks):
            ready = selector.select(timeout=bound_s)
            if not ready:
                still = len(socks) - len(closed)
                raise TimeoutError(f"{still} of {len(socks)} connections still open after {bound_s} s")
            for key, _ in ready:
                sock = cast(socket.socket, key.fileobj)
                try:
                    chunk = sock.recv(65536)
                except ConnectionResetError:
                    chunk = b""
                received[sock] += chunk
                if not chunk:
                    closed[sock] = time.monotonic() - since
                    selector.unregister(sock)
    return [received[sock] for sock in socks], [closed[sock] for sock in socks]
