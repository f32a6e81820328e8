"""A scripted fake Gemini API (generativelanguage ``v1beta``) for driving the real Gemini CLI offline.

stdlib only: a ``ThreadingHTTPServer`` on 127.0.0.1, port 0, served from a daemon thread.

    with FakeGemini([function_call("run_shell_command", {"command": "touch a"}), text("done")]) as fake:
        write_settings(home)
        env = offline_env(fake.url, home, proxy.url)    # GOOGLE_GEMINI_BASE_URL=fake.url and the rest
        ... run `gemini --acp` with env ...
        fake.main_requests     # the request bodies that consumed a scripted reply
        fake.log               # every HTTP request: method, path, headers, body, class

How a request is classified:

* ``POST /v1beta/models/<model>:streamGenerateContent?alt=sse`` whose ``tools`` declare functions is **main**: it
  consumes the next scripted reply, streamed as the real API streams it (``data: <JSON>`` events ended by
  ``\\r\\n\\r\\n``, each a ``GenerateContentResponse``; the last one carries ``finishReason: STOP`` and the full
  ``usageMetadata``). When the script is exhausted the reply is the text ``(script exhausted)``, so a test fails
  visibly instead of hanging.
* any other ``:generateContent`` / ``:streamGenerateContent`` is **aux** (the CLI's side calls, such as the model
  router's classifier when no model is chosen) and gets ``AUX_TEXT``, or, when it asks for JSON with a
  ``responseJsonSchema``, the smallest object of that schema (``sample_json``) — never consuming the script.
* ``:countTokens`` -> ``{"totalTokens": N}`` (N = body length / 4); ``GET .../models`` -> the one model; other GETs
  -> ``{}``; anything else -> 404 with a Google error body.

Usage is fixed so tests can assert on it: ``promptTokenCount`` 100 and ``candidatesTokenCount`` = number of words,
or of function calls. tests/fakes/GEMINI_NOTES.md says what the CLI sends and why each setting below is needed.
"""

from __future__ import annotations

import itertools
import json
import os
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from tests.fakes.hermes_env import DEFAULT_PATH, PROXY_URL_VARS

AUX_TEXT = "Fake auxiliary reply"
EXHAUSTED_TEXT = "(script exhausted)"
MODEL = "gemini-2.5-flash"
API_KEY = "fake-gemini-key"
PROMPT_TOKENS = 100
STATUS_NAMES = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    429: "RESOURCE_EXHAUSTED",
    500: "INTERNAL",
    503: "UNAVAILABLE",
}
# ~/.gemini/settings.json: no usage statistics (the CLI's only call home: Clearcut at play.googleapis.com), no update
# checks, and one attempt per model call (the default is 10, 5-30 s apart, so a scripted error would take minutes).
SETTINGS: dict[str, dict[str, object]] = {
    "privacy": {"usageStatisticsEnabled": False},
    "telemetry": {"enabled": False},
    "general": {"enableAutoUpdate": False, "enableAutoUpdateNotification": False, "maxAttempts": 1},
}


@dataclass
class Reply:
    kind: str  # "text" | "function_calls" | "error"
    text: str = ""
    calls: list[tuple[str, dict]] = field(default_factory=list)
    thought: str = ""
    status: int = 200
    message: str = ""
    chunks: int = 4
    delay_s: float = 0.0
    gate: threading.Event | None = None


def text(
    s: str, chunks: int = 4, delay_s: float = 0.0, gate: threading.Event | None = None, thought: str = ""
) -> Reply:
    """A model answer streamed in about `chunks` events, `delay_s` apart, after one thought event if `thought` is
    given; after the first text event the stream waits for `gate` (if given), so a test can act mid-stream."""
    return Reply("text", text=s, chunks=chunks, delay_s=delay_s, gate=gate, thought=thought)


def function_call(name: str, args: dict, *more: tuple[str, dict]) -> Reply:
    """One or more function calls in one response; the CLI's tools are run_shell_command, write_file, replace..."""
    return Reply("function_calls", calls=[(name, args), *more])


def error(status: int = 500, message: str = "The fake server is failing on purpose") -> Reply:
    """An HTTP error with a Google API error body: {"error": {"code", "message", "status"}}."""
    return Reply("error", status=status, message=message)


def split_text(s: str, chunks: int) -> list[str]:
    size = max(1, -(-len(s) // max(1, chunks)))
    return [s[i : i + size] for i in range(0, len(s), size)] or [""]


def sample_json(schema: dict) -> object:
    """The plainest value of a (Gemini-dialect, upper-case `type`) JSON schema: what a side call that asks for JSON
    can parse. An unparsable answer makes the CLI retry the side call instead of going on."""
    kind = str(schema.get("type", "OBJECT")).upper()
    if kind == "OBJECT":
        properties = schema.get("properties") or {}
        return {name: sample_json(properties.get(name) or {}) for name in schema.get("required") or []}
    if "enum" in schema:
        return schema["enum"][0]
    return {"STRING": "", "INTEGER": 1, "NUMBER": 1, "BOOLEAN": False, "ARRAY": []}.get(kind)


def aux_reply(body: dict) -> Reply:
    config = body.get("generationConfig") or {}
    schema = config.get("responseJsonSchema") or config.get("responseSchema")
    if config.get("responseMimeType") == "application/json" and schema:
        return text(json.dumps(sample_json(schema)), chunks=1)
    return text(AUX_TEXT, chunks=1)


def declares_functions(body: dict) -> bool:
    """The CLI's agent loop sends its tool declarations; its side calls send none."""
    return any(tool.get("functionDeclarations") for tool in body.get("tools") or [])


def output_tokens(reply: Reply) -> int:
    return max(1, len(reply.text.split())) if reply.kind == "text" else len(reply.calls)


def write_settings(home: Path, **sections: dict[str, object]) -> Path:
    """`home`/.gemini/settings.json with SETTINGS, each given section's keys set over it."""
    settings = {name: dict(values) for name, values in SETTINGS.items()}
    for name, values in sections.items():
        settings.setdefault(name, {}).update(values)
    path = home / ".gemini" / "settings.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(settings, indent=1))
    return path


def offline_env(base_url: str, home: Path, proxy_url: str, *, trusted: bool = False) -> dict[str, str]:
    """A complete (not merged) environment for `gemini --acp`: the fake as the Gemini API, loopback direct and
    everything else to the recording proxy. `trusted` trusts every folder (needed for the yolo and autoEdit modes)."""
    env = {
        "HOME": str(home),
        "PATH": os.environ.get("PATH") or DEFAULT_PATH,
        "LANG": "C.UTF-8",
        "TERM": "dumb",
        "GEMINI_API_KEY": API_KEY,
        "GOOGLE_GEMINI_BASE_URL": base_url,
        "GEMINI_MODEL": MODEL,  # a chosen model: with the default "auto" the router first asks a classifier model
        "GEMINI_CLI_NO_RELAUNCH": "true",  # one node process instead of a parent that ignores SIGTERM and a child
        "NO_PROXY": "127.0.0.1,localhost",
        "no_proxy": "127.0.0.1,localhost",
    }
    if trusted:
        env["GEMINI_CLI_TRUST_WORKSPACE"] = "true"
    for name in PROXY_URL_VARS:
        env[name] = proxy_url
    return env


class FakeGemini:
    def __init__(self, replies: list[Reply] | None = None) -> None:
        self._script: list[Reply] = list(replies or [])
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self.requests: list[dict] = []
        self.main_requests: list[dict] = []
        self.log: list[dict] = []
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, name="fake-gemini", daemon=True)

    def push(self, *replies: Reply) -> None:
        with self._lock:
            self._script.extend(replies)

    def clear(self) -> None:
        with self._lock:
            self._script.clear()

    def __enter__(self) -> FakeGemini:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
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

            def _record(self, klass: str, body: object = None) -> None:
                entry: dict[str, object] = {
                    "method": self.command,
                    "path": self.path,
                    "headers": dict(self.headers),
                    "class": klass,
                }
                if body is not None:
                    entry["body"] = body
                fake.log.append(entry)

            def _json(self, status: int, payload: dict) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json; charset=UTF-8")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _error(self, status: int, message: str) -> None:
                status_name = STATUS_NAMES.get(status, "UNKNOWN")
                self._json(status, {"error": {"code": status, "message": message, "status": status_name}})

            def do_GET(self) -> None:
                self._record("get")
                model = {"name": f"models/{MODEL}", "displayName": MODEL, "inputTokenLimit": 1048576}
                path = urlsplit(self.path).path.rstrip("/")
                if path.endswith("/models"):
                    self._json(200, {"models": [model]})
                else:
                    self._json(200, model if "/models/" in path else {})

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length)
                try:
                    body = json.loads(raw or b"{}")
                except ValueError:
                    body = {"_raw": raw.decode(errors="replace")}
                path = urlsplit(self.path).path
                method = path.rsplit(":", 1)[-1] if ":" in path else ""
                if method == "countTokens":
                    self._record("count", body)
                    self._json(200, {"totalTokens": max(1, length // 4)})
                elif method in ("generateContent", "streamGenerateContent"):
                    self._generate(method, body)
                else:
                    self._record("unknown", body)
                    self._error(404, f"no route {self.path}")

            def _generate(self, method: str, body: dict) -> None:
                main = method == "streamGenerateContent" and declares_functions(body)
                self._record("main" if main else "aux", body)
                fake.requests.append(body)
                reply = fake._next(body) if main else aux_reply(body)
                if reply.kind == "error":
                    self._error(reply.status, reply.message)
                elif method == "streamGenerateContent":
                    self._stream(reply)
                else:
                    parts = [{"text": reply.text}] if reply.kind == "text" else self._calls(reply)
                    self._json(200, self._response(parts, reply, final=True))

            def _calls(self, reply: Reply) -> list[dict]:
                return [{"functionCall": {"name": name, "args": args}} for name, args in reply.calls]

            def _response(self, parts: list[dict], reply: Reply, final: bool) -> dict:
                candidate: dict = {"content": {"parts": parts, "role": "model"}, "index": 0}
                usage: dict = {"promptTokenCount": PROMPT_TOKENS, "totalTokenCount": PROMPT_TOKENS}
                if final:
                    candidate["finishReason"] = "STOP"
                    tokens = output_tokens(reply)
                    usage = {**usage, "candidatesTokenCount": tokens, "totalTokenCount": PROMPT_TOKENS + tokens}
                response_id = f"fake-response-{next(fake._ids)}"
                return {
                    "candidates": [candidate],
                    "usageMetadata": usage,
                    "modelVersion": MODEL,
                    "responseId": response_id,
                }

            def _send_event(self, payload: dict) -> None:
                self.wfile.write(f"data: {json.dumps(payload)}\r\n\r\n".encode())
                self.wfile.flush()

            def _stream(self, reply: Reply) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Connection", "close")
                self.end_headers()
                self.close_connection = True
                try:
                    if reply.thought:
                        self._send_event(self._response([{"text": reply.thought, "thought": True}], reply, False))
                    if reply.kind == "text":
                        self._stream_text(reply)
                    else:
                        self._send_event(self._response(self._calls(reply), reply, final=True))
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client went away (a cancelled turn)

            def _stream_text(self, reply: Reply) -> None:
                pieces = split_text(reply.text, reply.chunks)
                for i, piece in enumerate(pieces):
                    if i and reply.delay_s:
                        threading.Event().wait(reply.delay_s)
                    self._send_event(self._response([{"text": piece}], reply, final=i == len(pieces) - 1))
                    if i == 0 and reply.gate is not None:
                        reply.gate.wait(60)

        return Handler
