"""A scripted fake OpenAI-compatible chat-completions API for driving the real Hermes CLI offline.

stdlib only: a ``ThreadingHTTPServer`` on 127.0.0.1, port 0, served from a daemon thread.

    with FakeOpenAI() as fake:
        fake.push(tool_call("write_file", {"path": "a.txt", "content": "hi"}), text("done"))
        ... run hermes with base_url=fake.url ...
        fake.main_requests     # the request bodies that consumed a scripted reply
        fake.log               # every HTTP request: method, path, body, class

``POST /v1/chat/completions`` with a non-empty ``tools`` list is **main**: it consumes the next scripted reply,
streamed as OpenAI SSE chunks (``stream: true``) or one JSON completion. When the script is exhausted the reply is
the text ``(script exhausted)``, so a test fails visibly instead of hanging. Other chat requests (Hermes' side
calls such as titles) are **aux** and get ``AUX_TEXT``. ``GET /v1/models`` lists the one model; other GETs get
``{}``. Every streamed reply reports usage: ``prompt_tokens`` 100 and ``completion_tokens`` = number of words.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

AUX_TEXT = "Fake auxiliary reply"
EXHAUSTED_TEXT = "(script exhausted)"
MODEL = "fake-model"
PROMPT_TOKENS = 100


@dataclass
class Reply:
    kind: str  # "text" | "tool_calls" | "error"
    text: str = ""
    tools: list[tuple[str, dict]] = field(default_factory=list)
    status: int = 200
    message: str = ""
    chunks: int = 4
    delay_s: float = 0.0
    gate: threading.Event | None = None


def text(s: str, chunks: int = 4, delay_s: float = 0.0, gate: threading.Event | None = None) -> Reply:
    """An assistant answer streamed in about `chunks` pieces, `delay_s` apart; after the first piece the stream
    waits for `gate` (if given) to be set, so a test can act while the answer is still streaming."""
    return Reply("text", text=s, chunks=chunks, delay_s=delay_s, gate=gate)


def tool_call(name: str, arguments: dict, *more: tuple[str, dict]) -> Reply:
    """One or more function calls (finish_reason tool_calls); Hermes' names are write_file, terminal, read_file..."""
    return Reply("tool_calls", tools=[(name, arguments), *more])


def error(status: int = 500, message: str = "The fake server is failing on purpose") -> Reply:
    """An HTTP error with an OpenAI error body."""
    return Reply("error", status=status, message=message)


def split_text(s: str, chunks: int) -> list[str]:
    size = max(1, -(-len(s) // max(1, chunks)))
    return [s[i : i + size] for i in range(0, len(s), size)] or [""]


class FakeOpenAI:
    def __init__(self, replies: list[Reply] | None = None) -> None:
        self._script: list[Reply] = list(replies or [])
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self.requests: list[dict] = []
        self.main_requests: list[dict] = []
        self.log: list[dict] = []
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        self._thread = threading.Thread(target=self.server.serve_forever, name="fake-openai", daemon=True)

    def push(self, *replies: Reply) -> None:
        with self._lock:
            self._script.extend(replies)

    def clear(self) -> None:
        with self._lock:
            self._script.clear()

    def __enter__(self) -> FakeOpenAI:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()

    def _next(self, body: dict) -> Reply:
        with self._lock:
            self.main_requests.append(body)
            return self._script.pop(0) if self._script else text(EXHAUSTED_TEXT)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def _json(self, status: int, payload: dict) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                fake.log.append({"method": "GET", "path": self.path, "class": "get"})
                if self.path.rstrip("/").endswith("/models"):
                    self._json(200, {"object": "list", "data": [{"id": MODEL, "object": "model", "owned_by": "fake"}]})
                else:
                    self._json(200, {})

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length)
                try:
                    body = json.loads(raw or b"{}")
                except ValueError:
                    body = {"_raw": raw.decode(errors="replace")}
                if not self.path.split("?")[0].endswith("/chat/completions"):
                    fake.log.append({"method": "POST", "path": self.path, "body": body, "class": "unknown"})
                    self._json(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})
                    return
                main = bool(body.get("tools"))
                fake.log.append({"method": "POST", "path": self.path, "body": body, "class": "main" if main else "aux"})
                fake.requests.append(body)
                reply = fake._next(body) if main else text(AUX_TEXT, chunks=1)
                if reply.kind == "error":
                    self._json(reply.status, {"error": {"message": reply.message, "type": "server_error"}})
                    return
                if body.get("stream"):
                    self._stream(reply)
                else:
                    self._json(200, self._completion(reply))

            def _base(self, completion_id: str) -> dict:
                created = int(time.time())
                return {"id": completion_id, "object": "chat.completion.chunk", "created": created, "model": MODEL}

            def _send_chunk(self, payload: dict | str) -> None:
                data = payload if isinstance(payload, str) else json.dumps(payload)
                self.wfile.write(f"data: {data}\n\n".encode())
                self.wfile.flush()

            def _stream(self, reply: Reply) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Cache-Control", "no-cache")
                self.send_header("Connection", "close")
                self.end_headers()
                self.close_connection = True
                completion_id = f"chatcmpl-fake{next(fake._ids)}"
                base = self._base(completion_id)
                try:
                    self._send_chunk({**base, "choices": [{"index": 0, "delta": {"role": "assistant"}}]})
                    if reply.kind == "text":
                        for i, piece in enumerate(split_text(reply.text, reply.chunks)):
                            if i and reply.delay_s:
                                time.sleep(reply.delay_s)
                            delta = {"content": piece}
                            self._send_chunk({**base, "choices": [{"index": 0, "delta": delta}]})
                            if i == 0 and reply.gate is not None:
                                reply.gate.wait(60)
                        finish, completion_tokens = "stop", max(1, len(reply.text.split()))
                    else:
                        for index, (name, arguments) in enumerate(reply.tools):
                            call = {
                                "index": index,
                                "id": f"call_fake{next(fake._ids)}",
                                "type": "function",
                                "function": {"name": name, "arguments": json.dumps(arguments)},
                            }
                            self._send_chunk({**base, "choices": [{"index": 0, "delta": {"tool_calls": [call]}}]})
                        finish, completion_tokens = "tool_calls", len(reply.tools)
                    self._send_chunk({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
                    usage = {
                        "prompt_tokens": PROMPT_TOKENS,
                        "completion_tokens": completion_tokens,
                        "total_tokens": PROMPT_TOKENS + completion_tokens,
                    }
                    self._send_chunk({**base, "choices": [], "usage": usage})
                    self._send_chunk("[DONE]")
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client went away (a cancelled turn)

            def _completion(self, reply: Reply) -> dict:
                message: dict = {"role": "assistant", "content": reply.text if reply.kind == "text" else None}
                if reply.kind == "tool_calls":
                    message["tool_calls"] = [
                        {
                            "id": f"call_fake{next(fake._ids)}",
                            "type": "function",
                            "function": {"name": name, "arguments": json.dumps(arguments)},
                        }
                        for name, arguments in reply.tools
                    ]
                completion_tokens = max(1, len(reply.text.split()))
                return {
                    "id": f"chatcmpl-fake{next(fake._ids)}",
                    "object": "chat.completion",
                    "created": int(time.time()),
                    "model": MODEL,
                    "choices": [
                        {
                            "index": 0,
                            "message": message,
                            "finish_reason": "stop" if reply.kind == "text" else "tool_calls",
                        }
                    ],
                    "usage": {
                        "prompt_tokens": PROMPT_TOKENS,
                        "completion_tokens": completion_tokens,
                        "total_tokens": PROMPT_TOKENS + completion_tokens,
                    },
                }

        return Handler
