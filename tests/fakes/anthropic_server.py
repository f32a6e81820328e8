"""A scripted fake Anthropic Messages API for driving the real Claude Code CLI offline.

stdlib only: a ``ThreadingHTTPServer`` on 127.0.0.1, port 0, served from a daemon thread.

    with FakeAnthropic([tool_use("Bash", {"command": "touch x"}), text("done")]) as fake:
        env = offline_env(fake.url, home)          # tests/fakes/claude_env.py
        ... run claude ...
        fake.requests          # every POST /v1/messages JSON body, in arrival order
        fake.main_requests     # only the bodies that consumed a scripted reply
        fake.log               # every HTTP request: method, path, headers, body, class

How a request is classified (``FakeAnthropic.classify``):

* ``POST /v1/messages[?beta=true]`` with ``"stream": true`` and a non-empty ``tools`` list -> **main**: it consumes
  the next scripted reply, streamed in Anthropic SSE format (``message_start``, ``content_block_start``,
  ``content_block_delta`` (``text_delta`` / ``input_json_delta``), ``content_block_stop``, ``message_delta`` with
  ``stop_reason`` and ``usage``, ``message_stop``). When the script is exhausted the reply is the text
  ``(script exhausted)``, so a test fails visibly instead of hanging. Claude Code's agent loop always sends its
  tool list; its side requests (titles, summaries, topic detection, quota probes) send none.
* any other ``POST /v1/messages`` -> **aux**: answered with the short text ``AUX_TEXT`` (streamed or as one JSON
  message, as asked), never consuming the script.
* ``POST /v1/messages/count_tokens`` -> ``{"input_tokens": N}`` (N = body length / 4).
* ``GET``/``HEAD`` on anything -> 200 ``{}``; anything else -> 404 Anthropic error JSON.

Usage numbers are fixed so tests can assert on them: each scripted response reports ``input_tokens`` 100,
``cache_creation_input_tokens`` 20, ``cache_read_input_tokens`` 30 and ``output_tokens`` = number of words or
tool blocks (at least 1); override with ``usage=`` on the constructors.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

AUX_TEXT = "Fake auxiliary reply"
EXHAUSTED_TEXT = "(script exhausted)"
DEFAULT_USAGE = {"input_tokens": 100, "cache_creation_input_tokens": 20, "cache_read_input_tokens": 30}


@dataclass
class Reply:
    kind: str  # "text" | "tool_use" | "error"
    text: str = ""
    tools: list[tuple[str, dict]] = field(default_factory=list)
    status: int = 200
    message: str = ""
    error_type: str = "api_error"
    delay_s: float = 0.0
    usage: dict | None = None


def text(s: str, usage: dict | None = None) -> Reply:
    """An assistant text answer (stop_reason end_turn), streamed in several text_delta chunks."""
    return Reply("text", text=s, usage=usage)


def slow_text(s: str, delay_s: float, usage: dict | None = None) -> Reply:
    """Like text(), sleeping delay_s before each chunk (for cancel/interrupt tests)."""
    return Reply("text", text=s, delay_s=delay_s, usage=usage)


def tool_use(name: str, input: dict, *more: tuple[str, dict], usage: dict | None = None) -> Reply:
    """One or more tool_use blocks in ONE response (stop_reason tool_use). Ids are unique per server."""
    return Reply("tool_use", tools=[(name, input), *more], usage=usage)


_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    529: "overloaded_error",
}


def error(status: int = 500, message: str | None = None) -> Reply:
    """An HTTP error with an Anthropic error body: {"type":"error","error":{"type":...,"message":...}}."""
    etype = _ERROR_TYPES.get(status, "api_error")
    return Reply("error", status=status, message=message or f"Fake {etype} ({status})", error_type=etype)


def _chunks(s: str, size: int = 12) -> list[str]:
    """Split s into pieces of about `size` chars, cutting after whitespace; at least 2 pieces if len(s) > 1."""
    out, cur = [], ""
    for word in s.split(" "):
        piece = word if not cur and not out else " " + word
        if cur and len(cur) + len(piece) > size:
            out.append(cur)
            cur = piece
        else:
            cur += piece
    if cur:
        out.append(cur)
    if len(out) == 1 and len(s) > 1:
        out = [s[: len(s) // 2], s[len(s) // 2 :]]
    return out or [""]


class FakeAnthropic:
    def __init__(self, script: list[Reply] | None = None, host: str = "127.0.0.1"):
        self._script: list[Reply] = list(script or [])
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self.requests: list[dict] = []  # every POST /v1/messages body
        self.main_requests: list[dict] = []  # bodies that consumed a scripted reply
        self.log: list[dict] = []  # every HTTP request
        self._host = host
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.url = ""

    # lifecycle -----------------------------------------------------------------------------------------------
    def start(self) -> FakeAnthropic:
        handler = type("Handler", (_Handler,), {"fake": self})
        self._httpd = ThreadingHTTPServer((self._host, 0), handler)
        self._httpd.daemon_threads = True
        self.url = f"http://{self._host}:{self._httpd.server_address[1]}"
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="fake-anthropic", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._httpd:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None

    def __enter__(self) -> FakeAnthropic:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # script ----------------------------------------------------------------------------------------------------
    def push(self, *replies: Reply) -> None:
        with self._lock:
            self._script.extend(replies)

    def clear(self) -> None:
        with self._lock:
            self._script.clear()

    @property
    def remaining(self) -> int:
        with self._lock:
            return len(self._script)

    def _next_id(self, prefix: str) -> str:
        with self._lock:
            return f"{prefix}_fake{next(self._ids):04d}"

    @staticmethod
    def classify(method: str, path: str, body: Any) -> str:
        """'main' | 'aux' | 'count_tokens' | 'probe' | 'unknown' (see module docstring)."""
        p = urlsplit(path).path.rstrip("/")
        if method in ("GET", "HEAD"):
            return "probe"
        if method != "POST":
            return "unknown"
        if p.endswith("/v1/messages/count_tokens"):
            return "count_tokens"
        if p.endswith("/v1/messages"):
            if isinstance(body, dict) and body.get("stream") and body.get("tools"):
                return "main"
            return "aux"
        return "unknown"

    def _record(self, method: str, path: str, headers: dict, body: Any) -> tuple[str, Reply | None]:
        kind = self.classify(method, path, body)
        with self._lock:
            entry = {"method": method, "path": path, "headers": headers, "body": body, "class": kind}
            self.log.append({**entry, "at": time.monotonic()})
            if kind in ("main", "aux"):
                self.requests.append(body)
            reply = None
            if kind == "main":
                self.main_requests.append(body)
                reply = self._script.pop(0) if self._script else text(EXHAUSTED_TEXT)
        return kind, reply


class _Handler(BaseHTTPRequestHandler):
    fake: FakeAnthropic
    protocol_version = "HTTP/1.1"

    def log_message(self, *args) -> None:  # quiet
        pass

    # helpers -----------------------------------------------------------------------------------------------------
    def _send_json(self, status: int, obj: Any, head_only: bool = False) -> None:
        data = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("request-id", self.fake._next_id("req"))
        self.end_headers()
        if not head_only:
            self.wfile.write(data)

    def _read_body(self) -> Any:
        n = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(n) if n else b""
        try:
            return json.loads(raw) if raw else None
        except ValueError:
            return raw.decode("utf-8", "replace")

    # verbs ---------------------------------------------------------------------------------------------------------
    def do_HEAD(self) -> None:
        self.fake._record("HEAD", self.path, dict(self.headers), None)
        self._send_json(200, {}, head_only=True)

    def do_GET(self) -> None:
        self.fake._record("GET", self.path, dict(self.headers), None)
        self._send_json(200, {})

    def do_POST(self) -> None:
        body = self._read_body()
        kind, reply = self.fake._record("POST", self.path, dict(self.headers), body)
        model = body.get("model", "claude-fake") if isinstance(body, dict) else "claude-fake"
        stream = isinstance(body, dict) and bool(body.get("stream"))
        if kind == "count_tokens":
            self._send_json(200, {"input_tokens": max(1, len(json.dumps(body)) // 4)})
        elif kind == "aux":
            self._answer(text(AUX_TEXT), model, stream)
        elif kind == "main":
            assert reply is not None
            self._answer(reply, model, True)
        else:
            self._send_json(404, {"type": "error", "error": {"type": "not_found_error", "message": "fake: no route"}})

    def do_PUT(self) -> None:
        self.do_POST()

    # answers -------------------------------------------------------------------------------------------------------
    def _answer(self, reply: Reply, model: str, stream: bool) -> None:
        if reply.kind == "error":
            self._send_json(
                reply.status, {"type": "error", "error": {"type": reply.error_type, "message": reply.message}}
            )
            return
        msg_id = self.fake._next_id("msg")
        if reply.kind == "text":
            blocks = [{"type": "text", "text": reply.text}]
            stop_reason = "end_turn"
            out_tokens = max(1, len(reply.text.split()))
        else:
            blocks = [
                {"type": "tool_use", "id": self.fake._next_id("toolu"), "name": n, "input": i} for n, i in reply.tools
            ]
            stop_reason = "tool_use"
            out_tokens = max(1, 10 * len(blocks))
        usage = {**DEFAULT_USAGE, "output_tokens": out_tokens, **(reply.usage or {})}
        if not stream:
            self._send_json(
                200,
                {
                    "id": msg_id,
                    "type": "message",
                    "role": "assistant",
                    "model": model,
                    "content": blocks,
                    "stop_reason": stop_reason,
                    "stop_sequence": None,
                    "usage": usage,
                },
            )
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.send_header("request-id", self.fake._next_id("req"))
        self.end_headers()
        self.close_connection = True

        def ev(name: str, data: dict, delay: float = 0.0) -> None:
            if delay:
                time.sleep(delay)
            self.wfile.write(f"event: {name}\ndata: {json.dumps(data)}\n\n".encode())
            self.wfile.flush()

        try:
            start_usage = {k: usage[k] for k in DEFAULT_USAGE if k in usage}
            start_usage["output_tokens"] = 1
            ev(
                "message_start",
                {
                    "type": "message_start",
                    "message": {
                        "id": msg_id,
                        "type": "message",
                        "role": "assistant",
                        "model": model,
                        "content": [],
                        "stop_reason": None,
                        "stop_sequence": None,
                        "usage": start_usage,
                    },
                },
            )
            ev("ping", {"type": "ping"})
            for idx, block in enumerate(blocks):
                if block["type"] == "text":
                    ev(
                        "content_block_start",
                        {"type": "content_block_start", "index": idx, "content_block": {"type": "text", "text": ""}},
                    )
                    for piece in _chunks(block["text"]):
                        ev(
                            "content_block_delta",
                            {
                                "type": "content_block_delta",
                                "index": idx,
                                "delta": {"type": "text_delta", "text": piece},
                            },
                            reply.delay_s,
                        )
                else:
                    ev(
                        "content_block_start",
                        {
                            "type": "content_block_start",
                            "index": idx,
                            "content_block": {
                                "type": "tool_use",
                                "id": block["id"],
                                "name": block["name"],
                                "input": {},
                            },
                        },
                    )
                    js = json.dumps(block["input"])
                    for piece in ["", *[js[i : i + 20] for i in range(0, len(js), 20)]]:
                        ev(
                            "content_block_delta",
                            {
                                "type": "content_block_delta",
                                "index": idx,
                                "delta": {"type": "input_json_delta", "partial_json": piece},
                            },
                            reply.delay_s,
                        )
                ev("content_block_stop", {"type": "content_block_stop", "index": idx})
            ev(
                "message_delta",
                {"type": "message_delta", "delta": {"stop_reason": stop_reason, "stop_sequence": None}, "usage": usage},
            )
            ev("message_stop", {"type": "message_stop"})
        except (BrokenPipeError, ConnectionResetError):
            pass  # client went away (interrupt/cancel)
