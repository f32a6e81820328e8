"""Record Claude Code through its ACP adapter (`claude-agent-acp`) against the fake Anthropic API into
tests/fixtures/claude_acp/.

    .venv/bin/python -m tests.fakes.record_claude_acp [--prefix NPM_PREFIX] [--claude BIN | --bundled] [--out DIR]
        [--keep DIR]

`--prefix` is an npm prefix holding the adapter (`@agentclientprotocol/claude-agent-acp`, or its old name
`@zed-industries/claude-agent-acp`) and, for the new one, the `node` package (Node >= 22). The adapter runs the Claude
Code binary `--claude` names (default: bootstrap's pinned one; `CLAUDE_CODE_EXECUTABLE`), or with `--bundled` the one
it brings. `--keep` keeps HOME, the working folders, each process's stderr and what the fake received.

Offline: the environment of tests/fakes/claude_env.py with every proxy variable pointing at the recording proxy and
prompt suggestions off; the run fails if the proxy saw any request (the old adapter's bundled Claude Code 2.1.83 makes
some) or if a side call of the CLI took a scripted reply. Session ids, tool call ids and timings differ on every run;
long slash-command descriptions are cut (`elide_command_descriptions`). About 25 s. `ClaudeAcpClient` is record_qwen's
client (it refuses the agent's own requests other than permissions) with the adapter's command and a bounded exit: the
old adapter does not exit when its stdin closes. tests/fakes/CLAUDE_ACP_NOTES.md says what the transcripts show.
"""

from __future__ import annotations

import argparse
import itertools
import json
import queue
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from tests.fakes.anthropic_server import FakeAnthropic, Reply, error, slow_text, text, tool_use
from tests.fakes.claude_env import offline_env
from tests.fakes.hermes_env import PROXY_URL_VARS, RecordingProxy
from tests.fakes.record_gemini import CANCELLED, Message, is_permission, select, update_kind
from tests.fakes.record_qwen import QwenClient

REPO = Path(__file__).resolve().parent.parent.parent
DEFAULT_PREFIX = REPO / ".tools" / "claude-acp"
DEFAULT_CLAUDE_BIN = REPO / ".tools" / "claude" / "node_modules" / ".bin" / "claude"  # bootstrap's pinned CLI
FIXTURES = REPO / "tests" / "fixtures" / "claude_acp"
ADAPTERS = ("@agentclientprotocol/claude-agent-acp", "@zed-industries/claude-agent-acp")
EXIT_WAIT_S = 10  # after stdin closes; then SIGTERM, and the transcript's exit entry says so
TOUCH = tool_use("Bash", {"command": "touch made.txt", "description": "Create made.txt"})
TOUCH_AND_LIST = tool_use("Bash", {"command": "touch made.txt && ls", "description": "Create made.txt and list"})
DESCRIPTION_KEPT = 80
SUGGESTION_MARK = "[SUGGESTION MODE:"
SUGGESTION_WAIT_S = 15
UNKNOWN_SESSION = "00000000-0000-4000-8000-000000000000"


def adapter_command(prefix: Path) -> list[str]:
    """`node dist/index.js` of the adapter installed under `prefix`, with the prefix's own node when it has one (the
    new adapter needs Node >= 22; `claude-agent-acp` itself takes the first `node` on PATH)."""
    modules = prefix / "node_modules"
    node = modules / ".bin" / "node"
    for package in ADAPTERS:
        entry = modules / package / "dist" / "index.js"
        if entry.exists():
            return [str(node) if node.exists() else "node", str(entry)]
    raise SystemExit(f"no claude-agent-acp under {modules}")


def acp_env(base_url: str, home: Path, proxy_url: str, claude: Path | None = None) -> dict[str, str]:
    """claude_env.offline_env with the recording proxy instead of the closed port, so that an attempt to leave
    loopback is seen rather than only refused."""
    env = offline_env(base_url, str(home))
    env["CLAUDE_CODE_ENABLE_PROMPT_SUGGESTION"] = "false"  # else a tool-declaring model call ends every turn
    for name in PROXY_URL_VARS:
        env[name] = proxy_url
    if claude is not None:
        env["CLAUDE_CODE_EXECUTABLE"] = str(claude)
    return env


class ClaudeAcpClient(QwenClient):
    """One adapter process, every JSON-RPC line kept as the transcript and stderr kept in a file beside it."""

    def __init__(self, command: list[str], cwd: Path, env: dict[str, str], stderr: Path) -> None:
        self.start = time.monotonic()
        self.log: list[dict] = []
        self.lines: queue.Queue[bytes | None] = queue.Queue()
        self.cwd = cwd
        self._ids = itertools.count(1)
        with open(stderr, "wb") as sink:  # the adapter logs each session's phases there
            self.proc = subprocess.Popen(
                command, cwd=cwd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=sink
            )
        threading.Thread(target=self._read, name="claude-acp-stdout", daemon=True).start()

    def set_mode(self, session_id: str, mode_id: str) -> Message:
        return self.request("session/set_mode", {"sessionId": session_id, "modeId": mode_id})

    def finish(self, timeout: float = EXIT_WAIT_S) -> list[dict]:
        """Close stdin and wait for the exit; past `timeout`, SIGTERM (the exit entry then has `"after": "SIGTERM"`)."""
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        exit_entry: dict = {}
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            exit_entry["after"] = "SIGTERM"
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(timeout=timeout)
        while (line := self.lines.get(timeout=10)) is not None:
            self.log.append({"dir": "in", "t": self.elapsed(), "msg": json.loads(line)})
        self.log.append({"dir": "exit", "t": self.elapsed(), "code": self.proc.returncode, **exit_entry})
        return self.log


def elide_command_descriptions(entry: dict) -> dict:
    """The transcript entry with each long slash-command description in `available_commands_update` cut short (the
    CLI sends its ~40 commands and skills, 11-13 KB, twice per session); the names stay."""
    params = entry.get("msg", {}).get("params")
    update = params.get("update", {}) if isinstance(params, dict) else {}
    for command in update.get("availableCommands", []):
        description = command.get("description") or ""
        if len(description) > DESCRIPTION_KEPT:
            elided = len(description) - DESCRIPTION_KEPT
            command["description"] = f"{description[:DESCRIPTION_KEPT]}… <{elided} characters elided by the recorder>"
    return entry


def side_calls(fake: FakeAnthropic) -> int:
    """How many scripted-reply requests were the CLI predicting the user's next prompt rather than its agent loop
    (the fake counts every streamed request with tools as the loop's)."""
    return sum(SUGGESTION_MARK in json.dumps(body["messages"][-1]) for body in fake.main_requests)


def option_of_kind(request: Message, kind: str) -> str:
    """The optionId of the first offered option of `kind` (allow_once, allow_always, reject_once, ...)."""
    for option in request["params"]["options"]:
        if option["kind"] == kind:
            return option["optionId"]
    raise RuntimeError(f"no {kind} option in {request['params']['options']}")


class Recorder:
    """Each scenario in a fresh adapter process, against one fake server, one HOME and one recording proxy."""

    def __init__(
        self, command: list[str], claude: Path | None, out: Path, root: Path, fake: FakeAnthropic, proxy: RecordingProxy
    ) -> None:
        self.command, self.claude, self.out, self.root, self.fake, self.proxy = command, claude, out, root, fake, proxy
        self.home = root / "home"
        self.home.mkdir(exist_ok=True)

    def client(
        self, name: str, cwd: Path | None = None, env: Mapping[str, str | None] | None = None
    ) -> ClaudeAcpClient:
        """A new process in `cwd` (default: a new git repository named after the scenario); `env` is set over the
        recorder's environment, a None value taking a variable out."""
        cwd = cwd or self.root / name
        if not cwd.exists():
            cwd.mkdir()
            subprocess.run(["git", "init", "-q", str(cwd)], check=True, timeout=30)  # a task's folder is a worktree
        full_env: dict[str, str | None] = {
            **acp_env(self.fake.url, self.home, self.proxy.url, self.claude),
            **(env or {}),
        }
        return ClaudeAcpClient(
            self.command,
            cwd,
            {variable: value for variable, value in full_env.items() if value is not None},
            self.root / f"{name}.stderr",
        )

    def script(self, *replies: Reply) -> None:
        self.fake.clear()
        self.fake.main_requests.clear()
        self.fake.log.clear()
        self.fake.push(*replies)

    def save(self, name: str, client: ClaudeAcpClient, suggesting: bool = False) -> None:
        """Write the transcript (and, beside the cwds, what the fake received); fail on a reply left over or one
        taken by the CLI's prompt suggestion where it should be off."""
        with open(self.out / f"acp_{name}.jsonl", "w") as f:
            f.writelines(json.dumps(elide_command_descriptions(entry)) + "\n" for entry in client.finish())
        self.keep_requests(name)
        if self.fake.remaining:
            raise SystemExit(f"{name}: {self.fake.remaining} scripted replies were not asked for")
        if side_calls(self.fake) and not suggesting:
            raise SystemExit(f"{name}: the CLI's prompt suggestion took a scripted reply")

    def keep_requests(self, name: str) -> None:
        (self.root / f"{name}.requests.json").write_text(json.dumps(self.fake.log, indent=1, default=str))

    def scenario(
        self,
        name: str,
        replies: list[Reply],
        drive: Callable[[ClaudeAcpClient, str], None],
        env: Mapping[str, str | None] | None = None,
    ) -> None:
        """Run `drive` on a new session and save the transcript; on failure its tail goes to stderr."""
        self.script(*replies)
        client = self.client(name, env=env)
        try:
            client.initialize()
            drive(client, client.new_session())
            self.save(name, client, suggesting=env is not None and "CLAUDE_CODE_ENABLE_PROMPT_SUGGESTION" in env)
        except Exception:
            for entry in client.log[-8:]:
                print(json.dumps(entry)[:2000], file=sys.stderr)
            self.keep_requests(name)
            raise
        finally:
            client.stop()


def plain(client: ClaudeAcpClient, session_id: str) -> None:
    client.answer(client.prompt(session_id, "Say hello"))


def asking(drive: Callable[[ClaudeAcpClient, str], None]) -> Callable[[ClaudeAcpClient, str], None]:
    """`drive` in the `default` mode (the adapter starts a session in `auto`, where a classifier decides)."""

    def in_default_mode(client: ClaudeAcpClient, session_id: str) -> None:
        client.set_mode(session_id, "default")
        drive(client, session_id)

    return in_default_mode


def reject_any_permission(client: ClaudeAcpClient, prompt_id: int) -> None:
    """Wait for the prompt's answer, rejecting every permission asked on the way."""
    while is_permission(message := client.until(lambda m: is_permission(m) or m.get("id") == prompt_id)):
        client.respond(message["id"], select(option_of_kind(message, "reject_once")))


def permission(kind: str) -> Callable[[ClaudeAcpClient, str], None]:
    def drive(client: ClaudeAcpClient, session_id: str) -> None:
        prompt_id = client.prompt(session_id, "Make the file")
        asked = client.until(is_permission)
        client.respond(asked["id"], select(option_of_kind(asked, kind)))
        client.answer(prompt_id)

    return drive


def then_suggestion(
    fake: FakeAnthropic, drive: Callable[[ClaudeAcpClient, str], None]
) -> Callable[[ClaudeAcpClient, str], None]:
    """`drive`, then wait a while for the model call the CLI makes after the answer to predict the user's next
    prompt (not after a first turn without tools; not at all with the old adapter), and for what it publishes of it.
    The fake announces no requests, so its log is polled."""

    def and_wait(client: ClaudeAcpClient, session_id: str) -> None:
        drive(client, session_id)
        deadline = time.monotonic() + SUGGESTION_WAIT_S
        while not any(SUGGESTION_MARK in json.dumps(body) for body in fake.main_requests):
            if time.monotonic() > deadline:
                return
            time.sleep(0.1)
        try:
            client.until(lambda m: "promptSuggestions" in m.get("params", {}).get("update", {}).get("_meta", {}), 5)
        except queue.Empty:
            pass  # the CLI drops a suggestion its filters dislike

    return and_wait


def allow_always(client: ClaudeAcpClient, session_id: str) -> None:
    """Allow the first command always, then ask for a second like it: is it asked about again?"""
    permission("allow_always")(client, session_id)
    reject_any_permission(client, client.prompt(session_id, "And another"))


def cancel_streaming(client: ClaudeAcpClient, session_id: str) -> None:
    prompt_id = client.prompt(session_id, "Talk slowly")
    client.until(lambda m: update_kind(m) == "agent_message_chunk" and "_meta" not in m["params"]["update"])
    client.cancel(session_id)
    client.answer(prompt_id)


def cancel_permission(client: ClaudeAcpClient, session_id: str) -> None:
    """Cancel while a permission is pending, answering the request only if the prompt does not end by itself."""
    prompt_id = client.prompt(session_id, "Make the file")
    asked = client.until(is_permission)
    client.cancel(session_id)
    try:
        client.answer(prompt_id, timeout=5)
    except queue.Empty:
        client.respond(asked["id"], CANCELLED)
        client.answer(prompt_id)


def cancel_and_answer(client: ClaudeAcpClient, session_id: str) -> None:
    """Cancel while a permission is pending and answer the request `cancelled` at once, as Bridge does."""
    prompt_id = client.prompt(session_id, "Make the file")
    asked = client.until(is_permission)
    client.cancel(session_id)
    client.respond(asked["id"], CANCELLED)
    client.answer(prompt_id)


def choose_model(client: ClaudeAcpClient, session_id: str) -> None:
    """The protocol's session/set_model, then the model as a config option: a listed value, then an unlisted id."""
    client.request("session/set_model", {"sessionId": session_id, "modelId": "haiku"})
    for value in ("haiku", "claude-sonnet-4-5"):
        client.request("session/set_config_option", {"sessionId": session_id, "configId": "model", "value": value})
    plain(client, session_id)


def in_mode(mode_id: str) -> Callable[[ClaudeAcpClient, str], None]:
    """Ask for a mode, then for a command; a permission asked anyway is rejected."""

    def drive(client: ClaudeAcpClient, session_id: str) -> None:
        client.set_mode(session_id, mode_id)
        reject_any_permission(client, client.prompt(session_id, "Make the file"))

    return drive


def run_command(client: ClaudeAcpClient, session_id: str) -> None:
    reject_any_permission(client, client.prompt(session_id, "Make the file"))


def record_load(rec: Recorder) -> None:
    """A finished session taken up in new processes: session/load (replays the history), session/resume (does not)
    and session/list; then session/load of an id the CLI never saw."""
    rec.script(text("First answer."))
    first = rec.client("load_first", cwd=rec.root / "load")
    first.initialize()
    session_id = first.new_session()
    first.answer(first.prompt(session_id, "First question"))
    rec.save("load_first", first)
    rec.script(text("Second answer."))
    second = rec.client("load")
    second.initialize()
    if "result" in second.load_session(session_id):
        second.answer(second.prompt(session_id, "Second question"))
    rec.save("load", second)
    rec.script(text("Third answer."))
    third = rec.client("resume", cwd=rec.root / "load")
    third.initialize()
    third.request("session/list", {"cwd": str(third.cwd)})
    params = {"sessionId": session_id, "cwd": str(third.cwd), "mcpServers": []}
    if "result" in third.request("session/resume", params):
        third.answer(third.prompt(session_id, "Third question"))
    rec.save("resume", third)
    rec.script()
    unknown = rec.client("load_unknown")
    unknown.initialize()
    unknown.load_session(UNKNOWN_SESSION)
    rec.save("load_unknown", unknown)


def record_permissions(rec: Recorder) -> None:
    rec.scenario("shell_allow", [TOUCH_AND_LIST, text("Made it.")], asking(permission("allow_once")))
    rec.scenario("shell_deny", [TOUCH, text("Could not.")], asking(permission("reject_once")))
    stage, stage_more = (tool_use("Bash", {"command": f"git add {path}"}) for path in ("-A", "."))
    rec.scenario("shell_allow_always", [stage, text("Staged."), stage_more, text("Again.")], asking(allow_always))
    write = tool_use("Write", {"file_path": str(rec.root / "write_allow" / "a.txt"), "content": "hello\n"})
    rec.scenario("write_allow", [write, text("Wrote it.")], asking(permission("allow_once")))
    rec.scenario("cancel", [slow_text("Slow words that keep on coming for a while", 0.5)], cancel_streaming)
    rec.scenario("cancel_permission", [TOUCH], asking(cancel_permission))
    rec.scenario("cancel_permission_answered", [TOUCH], asking(cancel_and_answer))


def record_modes(rec: Recorder) -> None:
    rec.scenario("auto", [TOUCH, text("Made it.")], run_command)
    rec.scenario("bypass_root", [TOUCH, text("Made it.")], in_mode("bypassPermissions"))
    sandbox = {"IS_SANDBOX": "1"}
    rec.scenario("bypass_sandbox", [TOUCH, text("Made it.")], in_mode("bypassPermissions"), env=sandbox)
    rec.scenario("plan", [TOUCH, text("Planned.")], in_mode("plan"))


def record(command: list[str], claude: Path | None, out: Path, root: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    with FakeAnthropic() as fake, RecordingProxy() as proxy:
        rec = Recorder(command, claude, out, root, fake, proxy)
        rec.scenario("plain", [text("Hello from the fake model, in several chunks.")], plain)
        suggesting = {"CLAUDE_CODE_ENABLE_PROMPT_SUGGESTION": None}
        replies = [TOUCH, text("Made it.")]  # the suggestion's call gets the fake's "(script exhausted)"
        drive = asking(then_suggestion(fake, permission("allow_once")))
        rec.scenario("suggestion", replies, drive, env=suggesting)
        record_permissions(rec)
        record_modes(rec)
        rec.scenario("model", [text("Hello from haiku.")], choose_model)
        rec.scenario("api_error", [error(500, "Boom from fake")], plain)
        rec.scenario("no_key", [], plain, env={"ANTHROPIC_API_KEY": None})
        record_load(rec)
        if proxy.requests:
            raise SystemExit(f"claude-agent-acp tried to leave loopback: {proxy.requests}")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--prefix", type=Path, default=DEFAULT_PREFIX)
    parser.add_argument("--claude", type=Path, default=DEFAULT_CLAUDE_BIN, help="the Claude Code binary to run")
    parser.add_argument("--bundled", action="store_true", help="run the Claude Code the adapter brings instead")
    parser.add_argument("--out", type=Path, default=FIXTURES)
    parser.add_argument("--keep", type=Path, default=None, help="a folder to keep HOME, the cwds and stderr in")
    args = parser.parse_args()
    claude = None if args.bundled else args.claude
    if args.keep:
        args.keep.mkdir(parents=True, exist_ok=True)
        record(adapter_command(args.prefix), claude, args.out, args.keep.resolve())
    else:
        with tempfile.TemporaryDirectory(prefix="record-claude-acp-") as root:
            record(adapter_command(args.prefix), claude, args.out, Path(root).resolve())
    print(f"recorded into {args.out}")


if __name__ == "__main__":
    main()
