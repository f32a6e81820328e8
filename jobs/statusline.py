"""Claude Code's status line for Bridge: one line from Bridge's open `GET /health`, e.g.
`▶️ bridge: on | :8800 · 2 running · 1 waiting for you`, or `⏹️ bridge: off`.

Claude Code runs this after every message, so it must answer fast: it is a standalone script that needs only the
standard library and imports nothing from Django or Bridge (`register_claude` writes the command line):

    <venv python> -S -I /abs/path/jobs/statusline.py --url http://127.0.0.1:8800 [--timeout 0.3]

Claude Code writes a JSON object about the session to stdin; it is drained (bounded, in the background, so a TTY or a
pipe left open never holds the line up) and ignored. The whole HTTP exchange has one deadline (`--timeout`, default
0.3 s); anything that goes wrong (nothing listening, too slow, an HTTP error, a body that is not a JSON object) prints
the "off" line. The script always exits 0 and writes UTF-8, whatever the console's code page.
"""

import json
import os
import socket
import sys
import threading
import time
from urllib.parse import urlsplit

DEFAULT_URL = "http://127.0.0.1:8800"
DEFAULT_TIMEOUT_S = 0.3
MAX_TIMEOUT_S = 5.0
MAX_RESPONSE_BYTES = 64 * 1024
MAX_STDIN_BYTES = 256 * 1024
STDIN_GRACE_S = 0.05
LOOPBACK = ("127.0.0.1", "localhost", "::1")

ON = "▶️ bridge: on"
DEGRADED = "⚠️ bridge: degraded"
OFF = "⏹️ bridge: off"


def parse_args(argv: list[str]) -> tuple[str, float]:
    """`--url URL` and `--timeout SECONDS` (also as `--name=value`); anything else is ignored."""
    url, timeout = DEFAULT_URL, DEFAULT_TIMEOUT_S
    args = iter(argv)
    for arg in args:
        name, equals, value = arg.partition("=")
        if not equals:
            value = next(args, "")
        if name == "--url":
            url = value
        elif name == "--timeout":
            timeout = min(max(float(value), 0.01), MAX_TIMEOUT_S)
    return url, timeout


def drain_stdin() -> threading.Thread | None:
    """Read what Claude Code sends (at most MAX_STDIN_BYTES) so its write never fails, without ever waiting for it:
    the read runs in a daemon thread, and a TTY or a missing stdin is not read at all."""
    try:
        fd = sys.stdin.fileno()
        if os.isatty(fd):
            return None
    except (AttributeError, OSError, ValueError):
        return None

    def drain() -> None:
        left = MAX_STDIN_BYTES
        try:
            while left > 0:
                chunk = os.read(fd, min(left, 65536))
                if not chunk:
                    return
                left -= len(chunk)
        except OSError:
            pass

    thread = threading.Thread(target=drain, name="drain-stdin", daemon=True)
    thread.start()
    return thread


def split_response(data: bytes) -> tuple[int, dict[str, str], bytes] | None:
    """(status, headers, body) once the head has arrived; None before that."""
    head, found, body = data.partition(b"\r\n\r\n")
    if not found:
        return None
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return status, headers, body


def is_complete(data: bytes) -> bool:
    """Whether the body is whole by its Content-Length (without one, the server's close ends it)."""
    response = split_response(data)
    if response is None or "content-length" not in response[1]:
        return False
    return len(response[2]) >= int(response[1]["content-length"])


def fetch_health(url: str, timeout: float) -> tuple[int, bytes]:
    """GET <url>/health over plain HTTP/1.0, the whole exchange within `timeout` seconds; (status, body)."""
    parts = urlsplit(url)
    if parts.scheme != "http" or not parts.hostname:
        raise ValueError(f"only http://host:port URLs are supported, not {url!r}")
    deadline = time.monotonic() + timeout
    path = parts.path.rstrip("/") + "/health"
    host = parts.netloc.rpartition("@")[2]
    request = f"GET {path} HTTP/1.0\r\nHost: {host}\r\nAccept: application/json\r\nConnection: close\r\n\r\n"
    data = b""
    with socket.create_connection((parts.hostname, parts.port or 80), timeout=timeout) as sock:
        sock.sendall(request.encode("ascii"))
        while len(data) < MAX_RESPONSE_BYTES and not is_complete(data):
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no whole answer within {timeout} s")
            sock.settimeout(left)
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
    response = split_response(data)
    if response is None:
        raise ValueError("the answer ended before its headers did")
    status, headers, body = response
    if "content-length" in headers:
        body = body[: int(headers["content-length"])]
    return status, body


def count(value: object) -> int | None:
    """A count from the JSON, or None when it is missing or not a whole number >= 0."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def details(health: dict) -> list[str]:
    """What is going on, in the order people look for it; zero counts are left out."""
    tasks = health.get("tasks")
    tasks = tasks if isinstance(tasks, dict) else {}
    running, queued = count(tasks.get("running")), count(tasks.get("queued"))
    waiting = count(health.get("pending_permissions"))
    shown = [
        f"{n} {label}" for n, label in ((running, "running"), (queued, "queued"), (waiting, "waiting for you")) if n
    ]
    if not shown and running == 0 and queued == 0:
        shown.append("idle")
    if count(health.get("supervisors")) == 0:
        shown.append("no supervisor")
    if health.get("database", "ok") != "ok":
        shown.append("database error")
    return shown


def status_line(url: str, status: int, body: bytes) -> str:
    """The line for one /health answer: on (200), degraded (the JSON says so, or a 503 with a JSON object), else off."""
    health = json.loads(body)
    if not isinstance(health, dict) or status not in (200, 503):
        return OFF
    ok = status == 200 and health.get("status", "ok") == "ok"
    parts = urlsplit(url)
    where = f":{parts.port or 80}" if parts.hostname in LOOPBACK else f"{parts.hostname}:{parts.port or 80}"
    return " · ".join([f"{ON if ok else DEGRADED} | {where}", *details(health)])


def write_line(line: str) -> None:
    try:
        sys.stdout.buffer.write(line.encode("utf-8") + b"\n")
        sys.stdout.buffer.flush()
    except (AttributeError, OSError, ValueError):
        pass  # nobody is reading the line any more


def main(argv: list[str]) -> None:
    drained = drain_stdin()
    try:
        url, timeout = parse_args(argv)
        line = status_line(url, *fetch_health(url, timeout))
    except Exception:
        line = OFF
    if drained is not None:
        drained.join(STDIN_GRACE_S)
    write_line(line)


if __name__ == "__main__":
    main(sys.argv[1:])
    # Exit 0 without the interpreter's shutdown: it would close stdin under the drain thread's read (which can block
    # on Windows), and nothing is left to clean up.
    os._exit(0)
