"""Record the real Gemini CLI in ACP mode against the fake Gemini API into tests/fixtures/gemini/.

    .venv/bin/python -m tests.fakes.record_gemini [--gemini PATH] [--out DIR]

Offline: the settings and environment of tests/fakes/gemini_server.py, and the run fails if the recording proxy saw
any request. Session ids, tool call ids and timings differ on every run. `AcpClient` is also the minimal ACP client
of tests/e2e/test_gemini_acp_probe.py.
"""

from __future__ import annotations

import argparse
import itertools
import json
import queue
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

from tests.fakes.gemini_server import FakeGemini, error, function_call, offline_env, text, write_settings
from tests.fakes.hermes_env import RecordingProxy

REPO = Path(__file__).resolve().parent.parent.parent
DEFAULT_GEMINI_BIN = REPO / ".tools" / "gemini" / "node_modules" / ".bin" / "gemini"
FIXTURES = REPO / "tests" / "fixtures" / "gemini"
CLIENT_CAPABILITIES = {"fs": {"readTextFile": False, "writeTextFile": False}, "terminal": False}
TOUCH = function_call("run_shell_command", {"command": "touch made.txt", "description": "Create made.txt"})
Message = dict


class AcpClient:
    """One `gemini --acp` process, with every JSON-RPC line in both directions kept as the transcript."""

    def __init__(self, gemini: Path, cwd: Path, env: dict[str, str]) -> None:
        self.start = time.monotonic()
        self.log: list[dict] = []
        self.lines: queue.Queue[bytes | None] = queue.Queue()
        self.cwd = cwd
        self._ids = itertools.count(1)
        self.proc = subprocess.Popen(
            [str(gemini), "--acp"],
            cwd=cwd,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        threading.Thread(target=self._read, name="gemini-acp-stdout", daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def elapsed(self) -> float:
        return round(time.monotonic() - self.start, 3)

    def send(self, message: Message) -> None:
        assert self.proc.stdin is not None
        self.log.append({"dir": "out", "t": self.elapsed(), "msg": message})
        self.proc.stdin.write(json.dumps(message).encode() + b"\n")
        self.proc.stdin.flush()

    def call(self, method: str, params: dict) -> int:
        """Send a request and return its id without waiting for the answer."""
        request_id = next(self._ids)
        self.send({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})
        return request_id

    def notify(self, method: str, params: dict) -> None:
        self.send({"jsonrpc": "2.0", "method": method, "params": params})

    def respond(self, request_id: object, result: dict) -> None:
        self.send({"jsonrpc": "2.0", "id": request_id, "result": result})

    def until(self, predicate: Callable[[Message], bool], timeout: float = 90) -> Message:
        """The next message from the agent that satisfies `predicate`; every message read is kept in the log."""
        deadline = time.monotonic() + timeout
        while True:
            line = self.lines.get(timeout=max(0.05, deadline - time.monotonic()))
            if line is None:
                raise RuntimeError(f"gemini --acp exited early with {self.proc.wait()}")
            message = json.loads(line)
            self.log.append({"dir": "in", "t": self.elapsed(), "msg": message})
            if predicate(message):
                return message

    def answer(self, request_id: int, timeout: float = 90) -> Message:
        return self.until(lambda m: m.get("id") == request_id and "method" not in m, timeout)

    def request(self, method: str, params: dict, timeout: float = 90) -> Message:
        """Send a request and wait for its answer (a `result` or an `error`)."""
        return self.answer(self.call(method, params), timeout)

    def initialize(self) -> Message:
        return self.request("initialize", {"protocolVersion": 1, "clientCapabilities": CLIENT_CAPABILITIES})

    def new_session(self, cwd: Path | None = None) -> str:
        answer = self.request("session/new", {"cwd": str(cwd or self.cwd), "mcpServers": []})
        return answer["result"]["sessionId"]

    def load_session(self, session_id: str, cwd: Path | None = None) -> Message:
        return self.request("session/load", {"sessionId": session_id, "cwd": str(cwd or self.cwd), "mcpServers": []})

    def prompt(self, session_id: str, words: str) -> int:
        return self.call("session/prompt", {"sessionId": session_id, "prompt": [{"type": "text", "text": words}]})

    def cancel(self, session_id: str) -> None:
        self.notify("session/cancel", {"sessionId": session_id})

    def finish(self, timeout: float = 30) -> list[dict]:
        """Close stdin, wait for the exit and return the transcript, the exit code last."""
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=timeout)
        while (line := self.lines.get(timeout=10)) is not None:
            self.log.append({"dir": "in", "t": self.elapsed(), "msg": json.loads(line)})
        self.log.append({"dir": "exit", "t": self.elapsed(), "code": self.proc.returncode})
        return self.log

    def stop(self) -> None:
        """End the process whatever its state (a test's teardown)."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)


def is_permission(message: Message) -> bool:
    return message.get("method") == "session/request_permission"


def update_kind(message: Message) -> str:
    """The `sessionUpdate` of a session/update notification, else ""."""
    if message.get("method") != "session/update":
        return ""
    return message["params"]["update"]["sessionUpdate"]


def select(option_id: str) -> dict:
    return {"outcome": {"outcome": "selected", "optionId": option_id}}


CANCELLED = {"outcome": {"outcome": "cancelled"}}


def session_files(home: Path, session_id: str) -> list[Path]:
    """The chat files the CLI keeps for a session: ~/.gemini/tmp/<project>/chats/session-<minute>-<id[:8]>.jsonl."""
    return sorted((home / ".gemini" / "tmp").glob(f"*/chats/session-*-{session_id[:8]}.jsonl"))


def restamp(path: Path, minutes_ago: int) -> Path:
    """Rename a chat file as if opened `minutes_ago` minutes ago (UTC). The CLI names a session's file after the
    minute it opens it in, so a session/load within that minute appends to (and resets) the very file it reads;
    0 puts a file in the current minute, first waiting out a minute about to end."""
    if minutes_ago == 0 and datetime.now(UTC).second >= 55:
        time.sleep(61 - datetime.now(UTC).second)
    stamp = (datetime.now(UTC) - timedelta(minutes=minutes_ago)).strftime("%Y-%m-%dT%H-%M")
    target = path.with_name(f"session-{stamp}-{path.name.rsplit('-', 1)[-1]}")
    path.rename(target)
    return target


class Recorder:
    """Each scenario in a fresh `gemini --acp`, against one fake server, one HOME and one recording proxy."""

    def __init__(self, gemini: Path, out: Path, root: Path, fake: FakeGemini, proxy: RecordingProxy) -> None:
        self.gemini, self.out, self.root, self.fake, self.proxy = gemini, out, root, fake, proxy
        self.home = root / "home"
        write_settings(self.home)

    def client(self, name: str, trusted: bool = False, cwd: Path | None = None) -> AcpClient:
        cwd = cwd or self.root / name
        cwd.mkdir(exist_ok=True)
        return AcpClient(self.gemini, cwd, offline_env(self.fake.url, self.home, self.proxy.url, trusted=trusted))

    def save(self, name: str, client: AcpClient) -> None:
        with open(self.out / f"acp_{name}.jsonl", "w") as f:
            f.writelines(json.dumps(entry) + "\n" for entry in client.finish())

    def scenario(self, name: str, replies: list, drive: Callable[[AcpClient, str], None], trusted: bool = False) -> str:
        self.fake.clear()
        self.fake.push(*replies)
        client = self.client(name, trusted)
        client.initialize()
        session_id = client.new_session()
        drive(client, session_id)
        self.save(name, client)
        return session_id


def plain(client: AcpClient, session_id: str) -> None:
    client.answer(client.prompt(session_id, "Say hello"))


def permission(option_id: str) -> Callable[[AcpClient, str], None]:
    def drive(client: AcpClient, session_id: str) -> None:
        prompt_id = client.prompt(session_id, "Make the file")
        client.respond(client.until(is_permission)["id"], select(option_id))
        client.answer(prompt_id)

    return drive


def allow_for_session(client: AcpClient, session_id: str) -> None:
    permission("proceed_always")(client, session_id)
    client.answer(client.prompt(session_id, "And another"))


def cancel_streaming(gate: threading.Event) -> Callable[[AcpClient, str], None]:
    def drive(client: AcpClient, session_id: str) -> None:
        prompt_id = client.prompt(session_id, "Talk slowly")
        client.until(lambda m: update_kind(m) == "agent_message_chunk")
        client.cancel(session_id)
        client.answer(prompt_id)
        gate.set()

    return drive


def cancel_permission(client: AcpClient, session_id: str) -> None:
    prompt_id = client.prompt(session_id, "Make the file")
    asked = client.until(is_permission)
    client.cancel(session_id)
    client.respond(asked["id"], CANCELLED)
    client.answer(prompt_id)


def yolo(client: AcpClient, session_id: str) -> None:
    """Ask for the yolo mode, then for a command; a permission asked anyway (the mode was refused) is rejected."""
    client.request("session/set_mode", {"sessionId": session_id, "modeId": "yolo"})
    prompt_id = client.prompt(session_id, "Make the file")
    message = client.until(lambda m: is_permission(m) or m.get("id") == prompt_id)
    if is_permission(message):
        client.respond(message["id"], select("cancel"))
        client.answer(prompt_id)


def record_load(rec: Recorder) -> None:
    """session/load in a new process: of a session whose file is from an earlier minute (as after any pause), and
    of one whose file is from this minute (the CLI's bug: the history is reset before it is read)."""
    for name, minutes_ago in (("load", 1), ("load_same_minute", 0)):
        rec.fake.clear()
        rec.fake.push(text("First answer."), text("Second answer."))
        first = rec.client(f"{name}_first", cwd=rec.root / name)
        first.initialize()
        session_id = first.new_session()
        first.answer(first.prompt(session_id, "First question"))
        first.finish()
        second = rec.client(name)
        second.initialize()
        restamp(session_files(rec.home, session_id)[0], minutes_ago)
        if "result" in second.load_session(session_id):
            second.answer(second.prompt(session_id, "Second question"))
        rec.save(name, second)
    unknown = rec.client("load_unknown")
    unknown.initialize()
    unknown.load_session("00000000-0000-4000-8000-000000000000")
    rec.save("load_unknown", unknown)


def record(gemini: Path, out: Path, root: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    with FakeGemini() as fake, RecordingProxy() as proxy:
        rec = Recorder(gemini, out, root, fake, proxy)
        rec.scenario(
            "plain",
            [
                text(
                    "Hello from the fake model, in several chunks.",
                    thought="**Greeting**\n\nDeciding how to say hello.",
                )
            ],
            plain,
        )
        rec.scenario("shell_allow", [TOUCH, text("Made it.")], permission("proceed_once"))
        rec.scenario("shell_deny", [TOUCH, text("Could not.")], permission("cancel"))
        second = function_call("run_shell_command", {"command": "touch second.txt"})
        rec.scenario("shell_allow_session", [TOUCH, text("Made it."), second, text("Again.")], allow_for_session)
        write = function_call("write_file", {"file_path": "a.txt", "content": "hello\n"})
        rec.scenario("write_allow", [write, text("Wrote it.")], permission("proceed_once"))
        echo = function_call("run_shell_command", {"command": "echo hi"})
        rec.scenario("safe_command", [echo, text("Said hi.")], plain)
        gate = threading.Event()
        slow = text("Slow words that keep on coming for a while", chunks=8, gate=gate)
        rec.scenario("cancel", [slow], cancel_streaming(gate))
        rec.scenario("cancel_permission", [TOUCH, text("After cancel.")], cancel_permission)
        rec.scenario("yolo_untrusted", [TOUCH, text("Made it.")], yolo)
        rec.scenario("yolo_trusted", [TOUCH, text("Made it.")], yolo, trusted=True)
        rec.scenario("api_error", [error(500, "Boom from fake")], plain)
        record_load(rec)
        if proxy.requests:
            raise SystemExit(f"Gemini CLI tried to leave loopback: {proxy.requests}")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--gemini", type=Path, default=DEFAULT_GEMINI_BIN)
    parser.add_argument("--out", type=Path, default=FIXTURES)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="record-gemini-") as root:
        record(args.gemini, args.out, Path(root).resolve())
    print(f"recorded into {args.out}")


if __name__ == "__main__":
    main()
