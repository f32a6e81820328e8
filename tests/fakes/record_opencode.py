"""Record the real opencode CLI in ACP mode against the fake OpenAI API into tests/fixtures/opencode/.

    .venv/bin/python -m tests.fakes.record_opencode [--opencode PATH] [--out DIR]

Offline twice over: the whole run re-executes itself inside a network namespace that has only loopback (`unshare
--net`, root), and within it the config and environment of tests/fakes/opencode_env.py send anything that is not
127.0.0.1 to the recording proxy; the run fails if the proxy saw a request. Session ids, tool call ids and timings
differ on every run. `OpencodeClient` is record_gemini's minimal ACP client started with opencode's command. A run
takes about 2 min 45 s, 70 s of it the 500 error's retries. What the transcripts cannot show (the files each scenario
left, the model calls the fake answered) is printed at the end.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import queue
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler
from pathlib import Path

from tests.fakes.hermes_env import RecordingProxy
from tests.fakes.openai_server import FakeOpenAI, Reply, error, text, tool_call
from tests.fakes.opencode_env import (
    ASK_PERMISSIONS,
    DEFAULT_OPENCODE_PREFIX,
    config,
    offline_env,
    opencode_command,
    prepare_home,
)
from tests.fakes.record_gemini import CANCELLED, AcpClient, Message, is_permission, select, update_kind

REPO = Path(__file__).resolve().parent.parent.parent
FIXTURES = REPO / "tests" / "fixtures" / "opencode"
TOUCH = tool_call("bash", {"command": "touch made.txt"})
METHOD_NOT_FOUND = {"code": -32601, "message": "Method not found"}
UNKNOWN_SESSION = "ses_00000000000000000000000000"
ATTEMPTS_PER_MODEL_CALL = 6  # SessionRetry: the first call and 5 retries, 2 s doubling to a 30 s cap
ASK = json.dumps(ASK_PERMISSIONS)
ALLOW_ALL = json.dumps({"*": "allow"})
ISOLATED_MARK = "RECORD_OPENCODE_UNSHARED"


class OpencodeClient(AcpClient):
    """One `opencode acp` process, every JSON-RPC line kept as the transcript."""

    def __init__(self, command: list[str], cwd: Path, env: dict[str, str]) -> None:
        self.start = time.monotonic()
        self.log: list[dict] = []
        self.lines: queue.Queue[bytes | None] = queue.Queue()
        self.cwd = cwd
        self._ids = itertools.count(1)
        self.proc = subprocess.Popen(
            command, cwd=cwd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
        )
        threading.Thread(target=self._read, name="opencode-acp-stdout", daemon=True).start()

    def until(self, predicate: Callable[[Message], bool], timeout: float = 90) -> Message:
        """As AcpClient's, answering any other request of the agent with "Method not found": opencode sends
        `fs/write_text_file` after every allowed edit, although the client said it cannot write files."""

        def wanted(message: Message) -> bool:
            if predicate(message):
                return True
            if "id" in message and "method" in message and not is_permission(message):
                self.send({"jsonrpc": "2.0", "id": message["id"], "error": METHOD_NOT_FOUND})
            return False

        return super().until(wanted, timeout)

    def set_mode(self, session_id: str, mode_id: str) -> Message:
        return self.request("session/set_mode", {"sessionId": session_id, "modeId": mode_id})


class PlainErrorsOpenAI(FakeOpenAI):
    """FakeOpenAI whose error bodies say `invalid_request_error`: opencode retries any error whose body matches
    "server_error" (its SessionRetry patterns), which FakeOpenAI's `error()` bodies always do."""

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        base = super()._handler()

        class Handler(base):
            def _json(self, status: int, payload: dict) -> None:
                if status >= 400:
                    payload = {"error": {**payload["error"], "type": "invalid_request_error"}}
                super()._json(status, payload)

        return Handler


def bash(command: str) -> Reply:
    return tool_call("bash", {"command": command})


class Recorder:
    """Each scenario in a fresh `opencode acp`, against one fake server, one HOME and one recording proxy."""

    def __init__(self, opencode: Path, out: Path, root: Path, fake: FakeOpenAI, proxy: RecordingProxy) -> None:
        self.opencode, self.out, self.root, self.fake, self.proxy = opencode, out, root, fake, proxy
        self.home = root / "home"
        self.facts: list[str] = []
        prepare_home(self.home)

    def client(self, name: str, cwd: Path | None = None, settings: dict | None = None, **env: str) -> OpencodeClient:
        cwd = cwd or self.root / name
        cwd.mkdir(exist_ok=True)
        full_env = offline_env(settings or config(self.fake.url), self.home, self.proxy.url, **env)
        return OpencodeClient([str(self.opencode), "acp"], cwd, full_env)

    def script(self, *replies: Reply) -> None:
        self.fake.clear()
        self.fake.main_requests.clear()
        self.fake.push(*replies)

    def save(self, name: str, client: OpencodeClient) -> None:
        with open(self.out / f"acp_{name}.jsonl", "w") as f:
            f.writelines(json.dumps(entry) + "\n" for entry in client.finish())

    def note(self, name: str, fact: str) -> None:
        self.facts.append(f"{name}: {fact}")

    def scenario(
        self,
        name: str,
        replies: list[Reply],
        drive: Callable[[OpencodeClient, str], None],
        settings: dict | None = None,
        **env: str,
    ) -> OpencodeClient:
        """Run `drive` on a new session and save the transcript; on failure its tail goes to stderr."""
        self.script(*replies)
        client = self.client(name, settings=settings, **env)
        try:
            client.initialize()
            drive(client, client.new_session())
            self.save(name, client)
        except Exception:
            for entry in client.log[-8:]:
                print(json.dumps(entry)[:2000], file=sys.stderr)
            raise
        finally:
            client.stop()
        self.note(
            name, f"{len(self.fake.main_requests)} model calls; files {sorted(p.name for p in client.cwd.iterdir())}"
        )
        return client


def plain(client: OpencodeClient, session_id: str) -> None:
    client.answer(client.prompt(session_id, "Say hello"), timeout=150)


def reject_any_permission(client: OpencodeClient, prompt_id: int) -> None:
    """Wait for the prompt's answer, rejecting every permission asked on the way."""
    while is_permission(message := client.until(lambda m: is_permission(m) or m.get("id") == prompt_id)):
        client.respond(message["id"], select("reject"))


def run_command(client: OpencodeClient, session_id: str) -> None:
    reject_any_permission(client, client.prompt(session_id, "Make the file"))


def permission(option_id: str) -> Callable[[OpencodeClient, str], None]:
    def drive(client: OpencodeClient, session_id: str) -> None:
        prompt_id = client.prompt(session_id, "Make the file")
        client.respond(client.until(is_permission)["id"], select(option_id))
        client.answer(prompt_id)

    return drive


def allow_always(client: OpencodeClient, session_id: str) -> None:
    """`always` for `touch`, then another `touch` in the same session, one in a second session of the same process,
    and a `mkdir`: which of them is asked about again?"""
    permission("always")(client, session_id)
    reject_any_permission(client, client.prompt(session_id, "And another"))
    reject_any_permission(client, client.prompt(client.new_session(), "In a new session"))
    reject_any_permission(client, client.prompt(session_id, "Now a folder"))


def cancel_streaming(gate: threading.Event) -> Callable[[OpencodeClient, str], None]:
    def drive(client: OpencodeClient, session_id: str) -> None:
        prompt_id = client.prompt(session_id, "Talk slowly")
        client.until(lambda m: update_kind(m) == "agent_message_chunk")
        client.cancel(session_id)
        client.answer(prompt_id)
        gate.set()

    return drive


def cancel_permission(client: OpencodeClient, session_id: str) -> None:
    """Cancel while a permission is pending, answering the request only if the prompt does not end by itself."""
    prompt_id = client.prompt(session_id, "Make the file")
    asked = client.until(is_permission)
    client.cancel(session_id)
    try:
        client.answer(prompt_id, timeout=5)
    except queue.Empty:
        client.respond(asked["id"], CANCELLED)
        client.answer(prompt_id)


def shows_output(message: Message) -> bool:
    """A running command's output so far, which opencode sends as `tool_call_update` content."""
    return update_kind(message) == "tool_call_update" and "content" in message["params"]["update"]


def cancel_command(client: OpencodeClient, session_id: str) -> None:
    """Cancel while a command runs; its `touch` would come 4 s later if the command were not killed."""
    prompt_id = client.prompt(session_id, "Wait, then make the file")
    client.until(shows_output)
    client.cancel(session_id)
    client.answer(prompt_id)
    time.sleep(5)  # past the moment the command would have made late.txt: its absence is the point


def in_mode(mode_id: str) -> Callable[[OpencodeClient, str], None]:
    """Ask for a mode, then for a file and a command; a permission asked anyway is rejected."""

    def drive(client: OpencodeClient, session_id: str) -> None:
        client.set_mode(session_id, mode_id)
        reject_any_permission(client, client.prompt(session_id, "Make the files"))

    return drive


def slash(words: str) -> Callable[[OpencodeClient, str], None]:
    def drive(client: OpencodeClient, session_id: str) -> None:
        client.answer(client.prompt(session_id, words), timeout=60)

    return drive


def record_load(rec: Recorder) -> None:
    """A finished session taken up in new processes: session/load (replays the history), session/resume (does not)
    with session/list, session/load from another folder, then session/load of an id the CLI never saw."""
    rec.script(TOUCH, text("First answer."), text("Second answer."), text("Third answer."), text("Fourth answer."))
    first = rec.client("load_first", cwd=rec.root / "load")
    first.initialize()
    session_id = first.new_session()
    first.answer(first.prompt(session_id, "First question"))
    first.finish()
    for name, cwd in (("load", rec.root / "load"), ("load_other_folder", rec.root / "elsewhere")):
        second = rec.client(name, cwd=cwd)
        second.initialize()
        if "result" in second.load_session(session_id):
            second.answer(second.prompt(session_id, f"Question from {name}"))
            rec.note(name, f"the next model call carried {len(rec.fake.main_requests[-1]['messages'])} messages")
        rec.save(name, second)
    third = rec.client("resume", cwd=rec.root / "load")
    third.initialize()
    third.request("session/list", {"cwd": str(third.cwd)})
    params = {"sessionId": session_id, "cwd": str(third.cwd), "mcpServers": []}
    if "result" in third.request("session/resume", params):
        third.answer(third.prompt(session_id, "Question after resume"))
        rec.note("resume", f"the next model call carried {len(rec.fake.main_requests[-1]['messages'])} messages")
    rec.save("resume", third)
    unknown = rec.client("load_unknown")
    unknown.initialize()
    unknown.load_session(UNKNOWN_SESSION)
    rec.save("load_unknown", unknown)


def record_permissions(rec: Recorder) -> None:
    rec.scenario("shell_default", [TOUCH, text("Made it.")], run_command)
    rec.scenario("shell_allow", [TOUCH, text("Made it.")], permission("once"), OPENCODE_PERMISSION=ASK)
    rec.scenario("shell_deny", [TOUCH, text("Could not.")], permission("reject"), OPENCODE_PERMISSION=ASK)
    replies = [TOUCH, text("Made it."), bash("touch second.txt"), text("Again."), bash("touch third.txt")]
    replies += [text("And again."), bash("mkdir folder"), text("Folder.")]
    rec.scenario("shell_allow_always", replies, allow_always, OPENCODE_PERMISSION=ASK)
    write = tool_call("write", {"filePath": str(rec.root / "write_allow" / "a.txt"), "content": "hello\n"})
    rec.scenario("write_allow", [write, text("Wrote it.")], permission("once"), OPENCODE_PERMISSION=ASK)
    asking = config(rec.fake.url, permission=ASK_PERMISSIONS)
    rec.scenario("skip", [TOUCH, text("Made it.")], run_command, asking, OPENCODE_PERMISSION=ALLOW_ALL)
    record_repository_config(rec)


def record_repository_config(rec: Recorder) -> None:
    """A repository's opencode.json allows `bash` while Bridge's OPENCODE_PERMISSION asks: at the top level it loses,
    for the `build` agent it wins, unless OPENCODE_CONFIG_CONTENT sets that agent's permission too."""
    agent_ask = config(rec.fake.url, agent={"build": {"permission": ASK_PERMISSIONS}})
    for name, repo_config, settings in (
        ("repo_permission", {"permission": {"bash": "allow"}}, None),
        ("repo_agent_permission", {"agent": {"build": {"permission": {"bash": "allow"}}}}, None),
        ("repo_agent_permission_overridden", {"agent": {"build": {"permission": {"bash": "allow"}}}}, agent_ask),
    ):
        (rec.root / name).mkdir()
        (rec.root / name / "opencode.json").write_text(json.dumps(repo_config))
        rec.scenario(name, [TOUCH, text("Made it.")], run_command, settings, OPENCODE_PERMISSION=ASK)


def record_cancels(rec: Recorder) -> None:
    gate = threading.Event()
    slow = text("Slow words that keep on coming for a while", chunks=8, gate=gate)
    rec.scenario("cancel", [slow], cancel_streaming(gate))
    rec.scenario("cancel_permission", [TOUCH, text("After cancel.")], cancel_permission, OPENCODE_PERMISSION=ASK)
    rec.scenario("cancel_command", [bash("echo started; sleep 4; touch late.txt"), text("Waited.")], cancel_command)


def record_modes(rec: Recorder) -> None:
    write = tool_call("write", {"filePath": str(rec.root / "plan" / "a.txt"), "content": "hello\n"})
    rec.scenario("plan", [write, TOUCH, text("Planned.")], in_mode("plan"))
    rec.scenario("mode_unknown", [TOUCH, text("Made it.")], in_mode("yolo"))


def record(opencode: Path, out: Path, root: Path) -> list[str]:
    out.mkdir(parents=True, exist_ok=True)
    with PlainErrorsOpenAI() as fake, RecordingProxy() as proxy:
        rec = Recorder(opencode, out, root, fake, proxy)
        rec.scenario("plain", [text("Hello from the fake model, in several chunks.")], plain)
        record_permissions(rec)
        record_cancels(rec)
        record_modes(rec)
        rec.scenario("slash_unknown", [text("Never asked.")], slash("/src/main.py is broken, fix it"))
        rec.scenario("slash_command", [text("Initialised.")], slash("/init"))
        rec.scenario("api_error", [error(500, "Boom from fake")] * ATTEMPTS_PER_MODEL_CALL, plain)
        rec.scenario("api_error_401", [error(401, "Incorrect API key provided")], plain)
        record_load(rec)
        if proxy.requests:
            raise SystemExit(f"opencode tried to leave loopback: {proxy.requests}")
        return rec.facts


def loopback_only() -> bool:
    """True inside a network namespace whose only interface is loopback."""
    return [name for _, name in socket.if_nameindex()] == ["lo"]


def reexec_without_network() -> None:
    """Run this very command again inside a new network namespace with only loopback up (needs root)."""
    inner = [sys.executable, "-m", "tests.fakes.record_opencode", *sys.argv[1:]]
    script = 'ip link set lo up && exec "$@"'
    if os.environ.get(ISOLATED_MARK):
        raise SystemExit("record_opencode: still not in a loopback-only network namespace after `unshare --net`")
    path = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "PYTHONPATH": path, ISOLATED_MARK: "1"}
    raise SystemExit(subprocess.call(["unshare", "--net", "sh", "-c", script, "sh", *inner], env=env))


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--opencode", type=Path, default=Path(opencode_command(DEFAULT_OPENCODE_PREFIX)[0]))
    parser.add_argument("--out", type=Path, default=FIXTURES)
    args = parser.parse_args()
    if not loopback_only():
        reexec_without_network()
    with tempfile.TemporaryDirectory(prefix="record-opencode-") as root:
        facts = record(args.opencode.absolute(), args.out.absolute(), Path(root).resolve())
    print("\n".join(facts))
    print(f"recorded into {args.out}")


if __name__ == "__main__":
    main()
