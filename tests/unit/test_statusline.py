"""jobs/statusline.py as Claude Code runs it: a subprocess (`python -S -I`, standard library only) with Claude Code's
JSON on stdin, against a stub /health on 127.0.0.1 that answers with generated bodies, errors, or too slowly."""

import ast
import itertools
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from jobs.integrations import tool_configs

SCRIPT = Path(__file__).resolve().parents[2] / "jobs" / "statusline.py"  # where installed status lines point
TIMEOUT_S = 0.3
SLOW_S = 5.0  # far beyond TIMEOUT_S: the script must give up long before the server answers
ON, DEGRADED, OFF = "▶️ bridge: on", "⚠️ bridge: degraded", "⏹️ bridge: off"
# What Claude Code writes to the status line command's stdin (abridged from its documentation).
CLAUDE_CODE_INPUT = json.dumps(
    {
        "hook_event_name": "Status",
        "session_id": "3f1c2a8e-0d4b-4d7e-9a51-6b2f3c9e8d10",
        "transcript_path": "/home/me/.claude/projects/app/3f1c2a8e.jsonl",
        "cwd": "/home/me/app",
        "model": {"id": "claude-opus-4-1", "display_name": "Opus"},
        "workspace": {"current_dir": "/home/me/app", "project_dir": "/home/me/app"},
        "version": "1.0.80",
        "output_style": {"name": "default"},
        "cost": {"total_cost_usd": 0.01234, "total_duration_ms": 45000, "total_lines_added": 156},
    }
).encode()


@dataclass
class Reply:
    status: int = 200
    body: bytes = b"{}"
    delay_s: float = 0.0  # before anything is sent
    drip_s: float = 0.0  # between single bytes of the body, after the headers


def health_body(running=0, queued=0, pending=None, supervisors=1, **extra) -> bytes:
    """/health as jobs/web/views.py answers it (every status counted), plus `pending_permissions` when given."""
    tasks = dict.fromkeys(("queued", "running", "done", "failed", "cancelled", "timeout", "orphaned"), 0)
    tasks |= {"running": running, "queued": queued, "done": 12}
    body = {"status": "ok", "database": "ok", "supervisors": supervisors, "tasks": tasks, **extra}
    if pending is not None:
        body["pending_permissions"] = pending
    return json.dumps(body).encode()


class StubBridge:
    """A /health server on 127.0.0.1: each reply gets its own base URL (`http://127.0.0.1:<port>/<n>`)."""

    def __init__(self):
        self.replies: dict[str, Reply] = {}
        self.stopping = threading.Event()
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                reply = stub.replies.get(self.path)
                if reply is None:
                    self.send_error(404)
                    return
                if stub.stopping.wait(reply.delay_s):
                    return
                self.send_response(reply.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(reply.body)))
                self.end_headers()
                try:
                    for byte in [reply.body] if not reply.drip_s else [bytes([b]) for b in reply.body]:
                        self.wfile.write(byte)
                        self.wfile.flush()
                        if reply.drip_s and stub.stopping.wait(reply.drip_s):
                            return
                except OSError:
                    pass  # the status line gave up and hung up, as it should

            def log_message(self, format, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)
        self.thread.start()

    def serve(self, reply: Reply) -> str:
        name = f"/{len(self.replies)}"
        self.replies[f"{name}/health"] = reply
        return f"http://127.0.0.1:{self.port}{name}"

    def close(self):
        self.stopping.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module")
def stub() -> Iterator[StubBridge]:
    server = StubBridge()
    yield server
    server.close()


def run_statusline(url: str, data: bytes = CLAUDE_CODE_INPUT, **popen) -> tuple[str, float]:
    """Run the script the way Claude Code does, `data` on its stdin (or the file `popen` gives as `stdin`); (its one
    line, its wall time in seconds)."""
    argv = [sys.executable, "-S", "-I", str(SCRIPT), "--url", url, "--timeout", str(TIMEOUT_S)]
    sent = {} if "stdin" in popen else {"input": data}
    started = time.monotonic()
    done = subprocess.run(argv, capture_output=True, timeout=30, **sent, **popen)
    elapsed = time.monotonic() - started
    assert done.returncode == 0
    assert done.stderr == b""
    out = done.stdout.decode("utf-8")
    assert out.endswith("\n") and out.count("\n") == 1, f"not exactly one line: {out!r}"
    return out.rstrip("\n"), elapsed


def expected_on(port: int, running: int, queued: int, pending: int | None) -> str:
    shown = [
        f"{n} {label}" for n, label in ((running, "running"), (queued, "queued"), (pending, "waiting for you")) if n
    ]
    return " · ".join([f"{ON} | :{port}", *(shown or ["idle"])])


def test_the_example_line(stub):
    url = stub.serve(Reply(body=health_body(running=2, pending=1)))

    line, _ = run_statusline(url)

    assert line == f"▶️ bridge: on | :{stub.port} · 2 running · 1 waiting for you"


@pytest.mark.parametrize("running, queued, pending", list(itertools.product([0, 1, 7], [0, 3], [None, 0, 2])), ids=str)
def test_counts_are_shown_and_zeros_and_absent_fields_left_out(stub, running, queued, pending):
    url = stub.serve(Reply(body=health_body(running, queued, pending)))

    line, _ = run_statusline(url)

    assert line == expected_on(stub.port, running, queued, pending)


@pytest.mark.parametrize(
    "body, details",
    [
        ({}, ""),
        ({"status": "ok"}, ""),
        ({"status": "ok", "tasks": {"running": 2}}, " · 2 running"),
        ({"status": "ok", "tasks": [1, 2], "pending_permissions": 3}, " · 3 waiting for you"),
        ({"tasks": {"running": "3", "queued": True}, "pending_permissions": -1, "supervisors": "many"}, ""),
        ({"tasks": {"running": 0, "queued": 0}, "supervisors": 0}, " · idle · no supervisor"),
        ({"tasks": {"running": 1, "queued": 0}, "message": "line one\nline two"}, " · 1 running"),
    ],
    ids=["empty", "status only", "running only", "tasks not an object", "wrong types", "no supervisor", "extra"],
)
def test_missing_or_odd_fields_are_left_out(stub, body, details):
    url = stub.serve(Reply(body=json.dumps(body).encode()))

    line, _ = run_statusline(url)

    assert line == f"{ON} | :{stub.port}{details}"


def test_a_degraded_bridge_says_so(stub):
    body = {"status": "degraded", "database": "error (details in the server log)", "supervisors": 0, "tasks": {}}
    url = stub.serve(Reply(status=503, body=json.dumps(body).encode()))

    line, _ = run_statusline(url)

    assert line == f"{DEGRADED} | :{stub.port} · no supervisor · database error"


@pytest.mark.parametrize(
    "reply",
    [
        Reply(body=b"<html>not json</html>"),
        Reply(body=b""),
        Reply(body=b"[1, 2, 3]"),
        Reply(body=b'"ok"'),
        Reply(status=500, body=health_body(running=1)),
        Reply(status=500, body=b"Internal Server Error"),
        Reply(status=404, body=b'{"error": "not found"}'),
        Reply(status=503, body=b"Service Unavailable"),
        Reply(body=b'{"status": "ok", "padding": "' + b"x" * 200_000 + b'"}'),
    ],
    ids=["html", "empty", "list", "string", "500 json", "500 text", "404", "503 text", "too big"],
)
def test_anything_but_a_json_object_from_a_healthy_answer_is_off(stub, reply):
    line, _ = run_statusline(stub.serve(reply))

    assert line == OFF


def test_nothing_listening_is_off():
    closed = StubBridge()
    url = f"http://127.0.0.1:{closed.port}"
    closed.close()

    assert run_statusline(url)[0] == OFF


@pytest.mark.parametrize("url", ["https://127.0.0.1:8800", "not a url", "http://:8800", ""])
def test_a_url_it_cannot_use_is_off(url):
    assert run_statusline(url)[0] == OFF


@pytest.mark.parametrize(
    "reply",
    [Reply(body=health_body(), delay_s=SLOW_S), Reply(body=health_body(running=1), drip_s=SLOW_S / 50)],
    ids=["no answer", "answer dripping in"],
)
def test_a_slow_bridge_is_off_without_waiting_for_it(stub, reply):
    line, elapsed = run_statusline(stub.serve(reply))

    assert line == OFF
    assert elapsed < SLOW_S / 2, f"waited {elapsed:.2f} s for a server that takes {SLOW_S} s"


@pytest.mark.parametrize(
    "stdin",
    [b"", b"not json at all", b"\xff\xfe\x00binary", CLAUDE_CODE_INPUT * 20_000],
    ids=["empty", "not json", "binary", "megabytes"],
)
def test_whatever_claude_code_sends_on_stdin_is_ignored(stub, stdin):
    url = stub.serve(Reply(body=health_body(running=1)))

    assert run_statusline(url, data=stdin)[0] == expected_on(stub.port, 1, 0, None)


@pytest.mark.skipif(os.name != "posix", reason="closing the child's fd 0 needs POSIX")
def test_no_stdin_at_all(stub):
    url = stub.serve(Reply(body=health_body(queued=2)))

    line, _ = run_statusline(url, stdin=subprocess.DEVNULL, preexec_fn=lambda: os.close(0))

    assert line == expected_on(stub.port, 0, 2, None)


def test_a_stdin_pipe_left_open_does_not_hold_the_line_up(stub):
    url = stub.serve(Reply(body=health_body(running=1)))
    argv = [sys.executable, "-S", "-I", str(SCRIPT), "--url", url, "--timeout", str(TIMEOUT_S)]

    with subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE) as child:
        child.stdin.write(CLAUDE_CODE_INPUT[:40])  # part of the JSON, and the pipe stays open
        child.stdin.flush()
        child.wait(timeout=10)  # TimeoutExpired if the script waits for the end of its stdin
        out = child.stdout.read()
        child.stdin.close()

    assert out.decode() == expected_on(stub.port, 1, 0, None) + "\n"


@pytest.mark.skipif(os.name != "posix", reason="a pseudo-terminal needs POSIX")
def test_a_terminal_on_stdin_is_not_read(stub):
    import pty

    url = stub.serve(Reply(body=health_body(running=3)))
    controller, terminal = pty.openpty()  # a terminal that never sends anything, nor an end of file
    try:
        line, _ = run_statusline(url, stdin=terminal)
    finally:
        os.close(terminal)
        os.close(controller)

    assert line == expected_on(stub.port, 3, 0, None)


def test_the_command_register_claude_writes_runs_in_a_shell(stub):
    url = stub.serve(Reply(body=health_body(running=1, pending=4)))
    command = tool_configs.statusline_command(url)

    done = subprocess.run(command, shell=True, input=CLAUDE_CODE_INPUT, capture_output=True, timeout=30)

    assert done.stdout.decode() == f"{ON} | :{stub.port} · 1 running · 4 waiting for you\n"


def test_the_script_needs_only_the_standard_library():
    tree = ast.parse(SCRIPT.read_text(encoding="utf-8"))
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    imported |= {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}

    assert {name.split(".")[0] for name in imported} <= sys.stdlib_module_names
