"""Record the real Qwen Code CLI in ACP mode against the fake OpenAI API into tests/fixtures/qwen/.

    .venv/bin/python -m tests.fakes.record_qwen [--prefix NPM_PREFIX] [--out DIR]

Offline: the settings and environment of tests/fakes/qwen_server.py, and the run fails if the recording proxy saw
any request or if a side call of the CLI took a scripted reply it was not meant to. Session ids, tool call ids and
timings differ on every run; the bundled skills' text is cut out of `available_commands_update` (see
`elide_skill_bodies`). `QwenClient` is record_gemini's minimal ACP client started with Qwen's command; it refuses the
CLI's own requests to the client (`craft/drainMidTurnQueue`), as an ACP client must, instead of leaving them
unanswered. A run takes about 2.5 minutes, 80 s of it the 500 error's retries.
"""

from __future__ import annotations

import argparse
import itertools
import json
import queue
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from tests.fakes.hermes_env import RecordingProxy
from tests.fakes.openai_server import FakeOpenAI, Reply, error, text, tool_call
from tests.fakes.qwen_server import DEFAULT_QWEN_PREFIX, offline_env, qwen_command, write_settings
from tests.fakes.record_gemini import CANCELLED, AcpClient, Message, is_permission, select, update_kind

REPO = Path(__file__).resolve().parent.parent.parent
FIXTURES = REPO / "tests" / "fixtures" / "qwen"
APPROVE = ("--approval-mode", "default")  # without it a session starts in "auto": a classifier model call per tool
TOUCH = tool_call("run_shell_command", {"command": "touch made.txt", "description": "Create made.txt"})
ALLOWED_BY_CLASSIFIER = tool_call("respond_in_schema", {"shouldBlock": False})
MAIN_PROMPT_START = "You are Qwen Code"
ATTEMPTS_PER_MODEL_CALL = 7  # the CLI's retryWithBackoff, not configurable; the SDK's own retries are set to 0
METHOD_NOT_FOUND = {"code": -32601, "message": "Method not found"}
UNKNOWN_SESSION = "00000000-0000-4000-8000-000000000000"


class QwenClient(AcpClient):
    """One `qwen --acp` process (the command of `qwen_command`), every JSON-RPC line kept as the transcript."""

    def __init__(self, command: list[str], cwd: Path, env: dict[str, str]) -> None:
        self.start = time.monotonic()
        self.log: list[dict] = []
        self.lines: queue.Queue[bytes | None] = queue.Queue()
        self.cwd = cwd
        self._ids = itertools.count(1)
        self.proc = subprocess.Popen(
            command, cwd=cwd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
        )
        threading.Thread(target=self._read, name="qwen-acp-stdout", daemon=True).start()

    def until(self, predicate: Callable[[Message], bool], timeout: float = 90) -> Message:
        """As AcpClient's, answering any other request of the agent with "Method not found" on the way (unanswered,
        `craft/drainMidTurnQueue` holds every tool round for 2 s)."""

        def wanted(message: Message) -> bool:
            if predicate(message):
                return True
            if "id" in message and "method" in message and not is_permission(message):
                self.send({"jsonrpc": "2.0", "id": message["id"], "error": METHOD_NOT_FOUND})
            return False

        return super().until(wanted, timeout)

    def set_mode(self, session_id: str, mode_id: str) -> Message:
        return self.request("session/set_mode", {"sessionId": session_id, "modeId": mode_id})


def write_file(path: Path, content: str) -> Reply:
    """The CLI's file tools refuse relative paths ("File path must be absolute")."""
    return tool_call("write_file", {"file_path": str(path), "content": content})


def elide_skill_bodies(entry: dict) -> dict:
    """The transcript entry with the skills' full text cut out of `available_commands_update`: the CLI sends every
    bundled skill's body there (a 570 KB line); the names, descriptions and paths stay."""
    update = entry.get("msg", {}).get("params", {}).get("update", {})
    for skill in update.get("_meta", {}).get("availableSkillDetails", []):
        skill["body"] = f"<{len(skill['body'])} characters elided by record_qwen>"
    return entry


def side_calls(fake: FakeOpenAI) -> list[str]:
    """The start of each scripted-reply request that was not the CLI's own agent loop."""
    starts = [str(body["messages"][0].get("content"))[:80] for body in fake.main_requests]
    return [start for start in starts if not start.startswith(MAIN_PROMPT_START)]


class Recorder:
    """Each scenario in a fresh `qwen --acp`, against one fake server, one HOME and one recording proxy."""

    def __init__(self, prefix: Path, out: Path, root: Path, fake: FakeOpenAI, proxy: RecordingProxy) -> None:
        self.prefix, self.out, self.root, self.fake, self.proxy = prefix, out, root, fake, proxy
        self.home = root / "home"
        write_settings(self.home)

    def client(
        self, name: str, args: tuple[str, ...] = APPROVE, cwd: Path | None = None, env: dict[str, str] | None = None
    ) -> QwenClient:
        cwd = cwd or self.root / name
        cwd.mkdir(exist_ok=True)
        full_env = {**offline_env(self.fake.url, self.home, self.proxy.url), **(env or {})}
        return QwenClient([*qwen_command(self.prefix), *args], cwd, full_env)

    def script(self, *replies: Reply) -> None:
        self.fake.clear()
        self.fake.main_requests.clear()
        self.fake.push(*replies)

    def save(self, name: str, client: QwenClient, side_replies: int = 0) -> None:
        with open(self.out / f"acp_{name}.jsonl", "w") as f:
            f.writelines(json.dumps(elide_skill_bodies(entry)) + "\n" for entry in client.finish())
        if len(eaten := side_calls(self.fake)) != side_replies:
            raise SystemExit(f"{name}: {len(eaten)} side calls took scripted replies, not {side_replies}: {eaten}")

    def scenario(
        self,
        name: str,
        replies: list[Reply],
        drive: Callable[[QwenClient, str], None],
        args: tuple[str, ...] = APPROVE,
        env: dict[str, str] | None = None,
        side_replies: int = 0,
    ) -> None:
        """Run `drive` on a new session and save the transcript; on failure its tail goes to stderr."""
        self.script(*replies)
        client = self.client(name, args, env=env)
        try:
            client.initialize()
            drive(client, client.new_session())
            self.save(name, client, side_replies)
        except Exception:
            for entry in client.log[-8:]:
                print(json.dumps(elide_skill_bodies(entry))[:2000], file=sys.stderr)
            raise
        finally:
            client.stop()


def plain(client: QwenClient, session_id: str) -> None:
    client.answer(client.prompt(session_id, "Say hello"), timeout=150)


def reject_any_permission(client: QwenClient, prompt_id: int) -> None:
    """Wait for the prompt's answer, rejecting every permission asked on the way."""
    while is_permission(message := client.until(lambda m: is_permission(m) or m.get("id") == prompt_id)):
        client.respond(message["id"], select("cancel"))


def permission(option_id: str) -> Callable[[QwenClient, str], None]:
    def drive(client: QwenClient, session_id: str) -> None:
        prompt_id = client.prompt(session_id, "Make the file")
        client.respond(client.until(is_permission)["id"], select(option_id))
        client.answer(prompt_id)

    return drive


def allow_always(option_id: str) -> Callable[[QwenClient, str], None]:
    """Allow the first tool for good, then ask for a second one: is it asked about again?"""

    def drive(client: QwenClient, session_id: str) -> None:
        permission(option_id)(client, session_id)
        reject_any_permission(client, client.prompt(session_id, "And another"))

    return drive


def cancel_streaming(gate: threading.Event) -> Callable[[QwenClient, str], None]:
    def drive(client: QwenClient, session_id: str) -> None:
        prompt_id = client.prompt(session_id, "Talk slowly")
        client.until(lambda m: update_kind(m) == "agent_message_chunk")
        client.cancel(session_id)
        client.answer(prompt_id)
        gate.set()

    return drive


def cancel_permission(client: QwenClient, session_id: str) -> None:
    """Cancel while a permission is pending, answering the request only if the prompt does not end by itself."""
    prompt_id = client.prompt(session_id, "Make the file")
    asked = client.until(is_permission)
    client.cancel(session_id)
    try:
        client.answer(prompt_id, timeout=5)
    except queue.Empty:
        client.respond(asked["id"], CANCELLED)
        client.answer(prompt_id)


def in_mode(mode_id: str) -> Callable[[QwenClient, str], None]:
    """Ask for a mode, then for a command; a permission asked anyway is rejected."""

    def drive(client: QwenClient, session_id: str) -> None:
        client.set_mode(session_id, mode_id)
        reject_any_permission(client, client.prompt(session_id, "Make the file"))

    return drive


def run_command(client: QwenClient, session_id: str) -> None:
    reject_any_permission(client, client.prompt(session_id, "Make the file"))


def record_load(rec: Recorder) -> None:
    """A finished session taken up in new processes: session/load (replays the history), session/resume (does not)
    and session/list; then session/load of an id the CLI never saw."""
    rec.script(text("First answer."), text("Second answer."), text("Third answer."))
    first = rec.client("load_first", cwd=rec.root / "load")
    first.initialize()
    session_id = first.new_session()
    first.answer(first.prompt(session_id, "First question"))
    first.finish()
    second = rec.client("load")
    second.initialize()
    if "result" in second.load_session(session_id):
        second.answer(second.prompt(session_id, "Second question"))
    rec.save("load", second)
    third = rec.client("resume", cwd=rec.root / "load")
    third.initialize()
    third.request("session/list", {"cwd": str(third.cwd)})
    params = {"sessionId": session_id, "cwd": str(third.cwd), "mcpServers": []}
    if "result" in third.request("session/resume", params):
        third.answer(third.prompt(session_id, "Third question"))
    rec.save("resume", third)
    unknown = rec.client("load_unknown")
    unknown.initialize()
    unknown.load_session(UNKNOWN_SESSION)
    rec.save("load_unknown", unknown)


def record_permissions(rec: Recorder, root: Path) -> None:
    rec.scenario("shell_allow", [TOUCH, text("Made it.")], permission("proceed_once"))
    rec.scenario("shell_deny", [TOUCH, text("Could not.")], permission("cancel"))
    second = tool_call("run_shell_command", {"command": "touch second.txt"})
    allow_project = allow_always("proceed_always_project")
    rec.scenario("shell_allow_project", [TOUCH, text("Made it."), second, text("Again.")], allow_project)
    write = write_file(root / "write_allow" / "a.txt", "hello\n")
    rec.scenario("write_allow", [write, text("Wrote it.")], permission("proceed_once"))
    first, other = (write_file(root / "write_allow_always" / name, "hi\n") for name in ("a.txt", "b.txt"))
    always = allow_always("proceed_always")
    rec.scenario("write_allow_always", [first, text("Wrote it."), other, text("Again.")], always)
    gate = threading.Event()
    slow = text("Slow words that keep on coming for a while", chunks=8, gate=gate)
    rec.scenario("cancel", [slow], cancel_streaming(gate))
    rec.scenario("cancel_permission", [TOUCH, text("After cancel.")], cancel_permission)


def record_modes(rec: Recorder, root: Path) -> None:
    rec.scenario("auto", [TOUCH, ALLOWED_BY_CLASSIFIER, text("Made it.")], run_command, args=(), side_replies=1)
    rec.scenario("yolo", [TOUCH, text("Made it.")], in_mode("yolo"))
    rec.scenario("plan", [TOUCH, text("Planned.")], in_mode("plan"))
    untrusting = root / "folder-trust.json"
    untrusting.write_text(json.dumps({"security": {"folderTrust": {"enabled": True}}}))
    env = {"QWEN_CODE_SYSTEM_SETTINGS_PATH": str(untrusting)}
    rec.scenario("yolo_untrusted", [TOUCH, text("Made it.")], in_mode("yolo"), env=env)


def record(prefix: Path, out: Path, root: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    with FakeOpenAI() as fake, RecordingProxy() as proxy:
        rec = Recorder(prefix, out, root, fake, proxy)
        rec.scenario("plain", [text("Hello from the fake model, in several chunks.")], plain)
        record_permissions(rec, root)
        record_modes(rec, root)
        rec.scenario("api_error", [error(500, "Boom from fake")] * ATTEMPTS_PER_MODEL_CALL, plain)
        rec.scenario("api_error_401", [error(401, "Incorrect API key provided")], plain)
        record_load(rec)
        if proxy.requests:
            raise SystemExit(f"Qwen Code tried to leave loopback: {proxy.requests}")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--prefix", type=Path, default=DEFAULT_QWEN_PREFIX)
    parser.add_argument("--out", type=Path, default=FIXTURES)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="record-qwen-") as root:
        record(args.prefix, args.out, Path(root).resolve())
    print(f"recorded into {args.out}")


if __name__ == "__main__":
    main()
