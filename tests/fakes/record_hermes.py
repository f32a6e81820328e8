"""Record the real Hermes CLI (ACP and one-shot) against the fake OpenAI server into tests/fixtures/hermes/.

    .venv/bin/python -m tests.fakes.record_hermes [--hermes PATH] [--out DIR]

Offline: HERMES_HOME from tests/fakes/hermes_env.py, and the run fails if the recording proxy saw any request.
Session ids and timings differ on every run, so tests/unit/test_runner_hermes.py reads ids from the fixtures themselves.
"""

from __future__ import annotations

import argparse
import json
import queue
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from tests.fakes.hermes_env import DEFAULT_HERMES_BIN, RecordingProxy, offline_env, write_hermes_home
from tests.fakes.openai_server import FakeOpenAI, error, text, tool_call

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "hermes"
WRITE_A = tool_call("write_file", {"path": "a.txt", "content": "hello\n"})


class AcpSession:
    """One `hermes acp` process, with every line in both directions kept as the transcript."""

    def __init__(self, hermes: Path, cwd: Path, env: dict[str, str]) -> None:
        self.start = time.monotonic()
        self.log: list[dict] = []
        self.lines: queue.Queue = queue.Queue()
        self.cwd = cwd
        self.session_id = ""
        self.proc = subprocess.Popen(
            [str(hermes), "acp"],
            cwd=cwd,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def _t(self) -> float:
        return round(time.monotonic() - self.start, 3)

    def send(self, message: dict) -> None:
        self.log.append({"dir": "out", "t": self._t(), "msg": message})
        self.proc.stdin.write(json.dumps(message).encode() + b"\n")
        self.proc.stdin.flush()

    def call(self, request_id: int, method: str, params: dict) -> None:
        self.send({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})

    def until(self, predicate: Callable[[dict], bool], timeout: float = 90) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            line = self.lines.get(timeout=max(0.1, deadline - time.monotonic()))
            if line is None:
                raise RuntimeError("hermes acp exited early")
            message = json.loads(line)
            self.log.append({"dir": "in", "t": self._t(), "msg": message})
            if predicate(message):
                return message

    def start_session(self) -> str:
        capabilities = {"fs": {"readTextFile": False, "writeTextFile": False}, "terminal": False}
        self.call(1, "initialize", {"protocolVersion": 1, "clientCapabilities": capabilities})
        self.until(lambda m: m.get("id") == 1)
        self.call(2, "session/new", {"cwd": str(self.cwd), "mcpServers": []})
        return self.until(lambda m: m.get("id") == 2)["result"]["sessionId"]

    def prompt(self, session_id: str, prompt: str) -> None:
        self.call(3, "session/prompt", {"sessionId": session_id, "prompt": [{"type": "text", "text": prompt}]})

    def finish(self) -> list[dict]:
        self.proc.stdin.close()
        self.proc.wait(timeout=30)
        while (line := self.lines.get(timeout=10)) is not None:
            self.log.append({"dir": "in", "t": self._t(), "msg": json.loads(line)})
        self.log.append({"dir": "exit", "t": self._t(), "code": self.proc.returncode})
        return self.log


def is_permission(message: dict) -> bool:
    return message.get("method") == "session/request_permission"


def is_chunk(message: dict) -> bool:
    return ((message.get("params") or {}).get("update") or {}).get("sessionUpdate") == "agent_message_chunk"


def select(request_id: object, option_id: str) -> dict:
    return {"jsonrpc": "2.0", "id": request_id, "result": {"outcome": {"outcome": "selected", "optionId": option_id}}}


def record(hermes: Path, out: Path, root: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    with FakeOpenAI() as fake, RecordingProxy() as proxy:
        env = offline_env(write_hermes_home(root / "hermes_home", fake.url, hermes), root / "home", proxy.url)
        (root / "home").mkdir(exist_ok=True)

        def acp(name: str, replies: list, drive: Callable[[AcpSession], None], cwd: Path | None = None) -> AcpSession:
            fake.clear()
            fake.push(*replies)
            cwd = cwd or root / name
            cwd.mkdir(exist_ok=True)
            session = AcpSession(hermes, cwd, env)
            drive(session)
            with open(out / f"acp_{name}.jsonl", "w") as f:
                f.writelines(json.dumps(entry) + "\n" for entry in session.finish())
            return session

        def plain(s: AcpSession) -> None:
            s.session_id = s.start_session()
            s.prompt(s.session_id, "Say hello")
            s.until(lambda m: m.get("id") == 3)

        def permission(option_id: str) -> Callable[[AcpSession], None]:
            def drive(s: AcpSession) -> None:
                s.prompt(s.start_session(), "Write a.txt")
                s.send(select(s.until(is_permission)["id"], option_id))
                s.until(lambda m: m.get("id") == 3)

            return drive

        def cancel(s: AcpSession) -> None:
            session_id = s.start_session()
            s.prompt(session_id, "Talk slowly")
            s.until(is_chunk)
            s.send({"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": session_id}})
            s.until(lambda m: m.get("id") == 3)

        def cancel_with_permission(s: AcpSession) -> None:
            session_id = s.start_session()
            s.prompt(session_id, "Write a.txt")
            s.send(select(s.until(is_permission)["id"], "deny"))
            s.send({"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": session_id}})
            s.until(lambda m: m.get("id") == 3)

        def load(session_id: str, then_prompt: bool) -> Callable[[AcpSession], None]:
            def drive(s: AcpSession) -> None:
                s.call(1, "initialize", {"protocolVersion": 1, "clientCapabilities": {}})
                s.until(lambda m: m.get("id") == 1)
                s.call(2, "session/load", {"sessionId": session_id, "cwd": str(s.cwd), "mcpServers": []})
                s.until(lambda m: m.get("id") == 2)
                if then_prompt:
                    s.prompt(session_id, "And again")
                    s.until(lambda m: m.get("id") == 3)

            return drive

        gate = threading.Event()
        acp("plain", [text("Hello from the fake model, in several chunks.")], plain)
        acp("perm_allow", [WRITE_A, text("Wrote it.")], permission("allow_once"))
        acp("perm_deny", [WRITE_A, text("Could not.")], permission("deny"))
        acp("cancel", [text("Slow words that keep on coming for a while", chunks=8, gate=gate)], cancel)
        gate.set()
        acp("cancel_perm", [WRITE_A, text("After deny.")], cancel_with_permission)
        acp("api_error", [error(500, "Boom from fake")] * 3, plain)
        acp("terminal", [tool_call("terminal", {"command": "echo hi > t.txt"}), text("Ran it.")], plain)
        first = acp("resume1", [text("First answer.")], plain)
        (out / "acp_resume1.jsonl").unlink()
        acp("resume2", [text("Second answer.")], load(first.session_id, True), cwd=first.cwd)
        acp("load_unknown", [], load("nope-unknown", False))

        def oneshot(name: str, replies: list, *extra: str) -> str:
            fake.clear()
            fake.push(*replies)
            argv = [str(hermes), "chat", "-q", name, "-Q", "--max-turns", "3", "--source", "tool", *extra]
            done = subprocess.run(argv, cwd=root, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True)
            result = {"exit_code": done.returncode, "stdout": done.stdout, "stderr": done.stderr}
            (out / f"oneshot_{name}.json").write_text(json.dumps(result, indent=1) + "\n")
            return done.stderr.rsplit("session_id:", 1)[-1].strip()

        session_id = oneshot("first", [text("One-shot answer, line one.\nLine two.")])
        oneshot("second", [text("Resumed answer.")], "--resume", session_id)
        oneshot("bad", [error(500, "Boom oneshot")] * 3)
        oneshot("unknown", [], "--resume", "nope_123")
        oneshot("skill", [], "-s", "nonexistent-skill")
        if proxy.requests:
            raise SystemExit(f"Hermes tried to leave loopback: {proxy.requests}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hermes", type=Path, default=DEFAULT_HERMES_BIN)
    parser.add_argument("--out", type=Path, default=FIXTURES)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="record-hermes-") as root:
        record(args.hermes, args.out, Path(root).resolve())
    print(f"recorded into {args.out}")


if __name__ == "__main__":
    main()
