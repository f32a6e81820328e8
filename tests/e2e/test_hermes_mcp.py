"""End to end: the older Hermes MCP bridge's seven tool calls, with the arguments its README shows, through
`manage.py mcp` on stdio (the MCP SDK's own client, as Claude Desktop would spawn it), against the real Hermes CLI.

A real `runbridge` supplies the supervisor and the database; the MCP server is a second process on the same data
directory. Hermes talks only to the scripted fake OpenAI server on 127.0.0.1 with the offline HERMES_HOME of
tests/fakes/hermes_env.py; any other HTTP(S) attempt goes to a recording proxy, and the test fails if it saw any.
Synchronisation is hermes_status' own bounded wait, never a sleep.
"""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from mcp import Client, StdioServerParameters

from tests.bridge_server import REPO, BridgeServer, Script
from tests.fakes.hermes_env import (
    DEFAULT_HERMES_BIN,
    PROXY_VARS,
    RecordingProxy,
    installed_version,
    offline_env,
    write_hermes_home,
)
from tests.fakes.openai_server import FakeOpenAI, text, tool_call
from tests.support import skip_or_fail

pytestmark = pytest.mark.e2e

WAIT_S = 120  # within the 150 s cap; Hermes' cold start is 2-10 s
HEADER = re.compile(r"^([A-Z_]+): (.*)$", re.M)


def hermes_bin() -> Path:
    configured = os.environ.get("BRIDGE_TEST_HERMES_BIN")
    path = Path(configured) if configured else DEFAULT_HERMES_BIN
    if not (path.is_file() and os.access(path, os.X_OK)):
        skip_or_fail(f"no Hermes CLI at {path} (run `make hermes-cli`, or set BRIDGE_TEST_HERMES_BIN)")
    return path


class Reply:
    def __init__(self, result: Any) -> None:
        self.text = "\n".join(c.text for c in result.content if c.type == "text")
        self.is_error = bool(result.is_error)
        self.fields = {key: value for key, value in HEADER.findall(self.text.split("\n---")[0])}

    def __getitem__(self, key: str) -> str:
        assert key in self.fields, f"no {key}: line in:\n{self.text}"
        return self.fields[key]

    def __repr__(self) -> str:
        return f"Reply(is_error={self.is_error}):\n{self.text}"


class Session:
    def __init__(self, client: Client) -> None:
        self.client = client

    async def call(self, tool: str, **arguments: Any) -> Reply:
        return Reply(await self.client.call_tool(tool, arguments))

    async def until_done(self, reply: Reply) -> Reply:
        """hermes_status until the job has ended, each call waiting up to WAIT_S (bounded: a few calls at most)."""
        for _ in range(3):
            if reply["STATUS"] not in ("queued", "running"):
                return reply
            reply = await self.call("hermes_status", job_id=reply["JOB_ID"], wait_s=WAIT_S)
        return reply


@pytest.fixture(scope="module")
def fake():
    with FakeOpenAI() as server:
        yield server


@pytest.fixture(scope="module")
def proxy():
    with RecordingProxy() as server:
        yield server


@pytest.fixture(autouse=True)
def offline_only(proxy):
    """The safety net: Hermes must not have tried to reach anything but 127.0.0.1 during the test."""
    before = len(proxy.requests)
    yield
    assert proxy.requests[before:] == [], f"Hermes tried to leave loopback: {proxy.requests[before:]}"


@pytest.fixture(scope="module")
def bridges(tmp_path_factory, fake, proxy):
    """A runbridge (the supervisor) per BRIDGE_HERMES_MODE ("" = unset: auto), each with its own HERMES_HOME."""
    hermes, started = hermes_bin(), {}

    def bridge_in(mode: str) -> BridgeServer:
        if mode not in started:
            root = tmp_path_factory.mktemp(f"hermes-mcp-{mode or 'auto'}")
            env = offline_env(write_hermes_home(root / "hermes_home", fake.url, hermes), root / "home", proxy.url)
            env.update({"BRIDGE_HERMES_BIN": str(hermes), "BRIDGE_PASS_ENV": ",".join(PROXY_VARS)})
            if mode:
                env["BRIDGE_HERMES_MODE"] = mode
            started[mode] = BridgeServer(root, fake.url, extra_env=env).start()
        return started[mode]

    yield bridge_in
    for bridge in started.values():
        bridge.stop()


def by_hand(bridge: BridgeServer, cwd: Path, question: str, source: str = "tool") -> str:
    """Start a Hermes session outside Bridge, as a person at a terminal would; returns its session id. With source
    "cli" (Hermes' default, what a person typing `hermes chat` gets) Hermes records the session's cwd."""
    run = subprocess.run(
        [str(hermes_bin()), "chat", f"--query={question}", "-Q", "--source", source],
        cwd=cwd,
        env={name: value for name, value in bridge.env.items() if not name.startswith(("BRIDGE_", "DJANGO_"))},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=WAIT_S,
    )
    assert run.returncode == 0, (run.stdout, run.stderr)
    match = re.findall(r"^session_id:\s*(\S+)\s*$", run.stderr, re.M)
    assert match, run.stderr
    return match[-1]


def message_texts(request: dict) -> list[tuple[str, str]]:
    out = []
    for message in request.get("messages") or []:
        content = message.get("content")
        if isinstance(content, list):
            content = "".join(part.get("text", "") for part in content if isinstance(part, dict))
        out.append((message.get("role"), content or ""))
    return out


def test_the_seven_tools_of_the_older_bridge_against_the_real_hermes(bridges, fake):
    bridge, script = bridges(""), Script(fake)
    cwd = bridge.work / "seven"
    cwd.mkdir()
    script.push(tool_call("terminal", {"command": "echo made by hermes > hello.txt"}), text("Wrote hello.txt."))

    async def steps(session: Session) -> dict[str, Reply]:
        replies = {"run": await session.call("hermes_run", task="Write hello.txt", cwd=str(cwd), wait_s=5)}
        replies["done"] = await session.until_done(replies["run"])
        replies["log"] = await session.call("hermes_read", path=replies["done"]["FULL_LOG"])
        replies["artifact"] = await session.call("hermes_read", path=str(cwd / "hello.txt"))
        script.push(text("The second answer."))
        session_id = replies["done"]["SESSION_ID"]
        resumed = await session.call("hermes_resume", session_id=session_id, task="Second question", cwd=str(cwd))
        replies["resumed"] = await session.until_done(resumed)
        replies["typo"] = await session.call("hermes_resume", session_id=session_id + "x", task="x", cwd=str(cwd))
        replies["jobs"] = await session.call("hermes_jobs", limit=10)
        replies["capabilities"] = await session.call("hermes_capabilities")
        replies["health"] = await session.call("hermes_health")
        return replies

    r = over_stdio(bridge.env, steps)
    run, done = r["run"], r["done"]
    assert not run.is_error and run["STATUS"] in ("queued", "running", "ok"), run
    assert "started one" not in run.text, "runbridge's supervisor is alive: the MCP server must not start another"
    assert done["STATUS"] == "ok" and done["EXIT_CODE"] == "0" and done.text.endswith("Wrote hello.txt."), done
    assert done["JOB_ID"] == run["JOB_ID"] and done["AGENT"] == "hermes" and done["CWD"] == str(cwd)
    assert (cwd / "hello.txt").read_text() == "made by hermes\n"
    assert "made by hermes" in r["artifact"].text and not r["artifact"].is_error

    log = r["log"]
    assert not log.is_error and Path(done["FULL_LOG"]).parent == (bridge.data_dir / "logs").resolve(), log
    for words in ("TASK:\n| Write hello.txt", "] tool_use: ", "echo made by hermes > hello.txt", "Wrote hello.txt."):
        assert words in log.text, (words, log)
    assert "] status: done" in log.text and "] init: " in log.text

    resumed = r["resumed"]
    assert resumed["STATUS"] == "ok" and resumed["SESSION_ID"] == done["SESSION_ID"], resumed
    assert resumed.text.endswith("The second answer.")
    history = message_texts(script.requests[-1])
    assert ("user", "Write hello.txt") in history and history[-1] == ("user", "Second question")
    typo = r["typo"]
    assert typo.is_error and "CODE: no_such_session" in typo.text and "state.db" in typo.text, typo

    jobs = r["jobs"]
    for reply in (done, resumed):
        assert re.search(rf"^{reply['JOB_ID']}\s+ok\s+hermes\s", jobs.text, re.M), jobs
    assert not r["capabilities"].is_error and "CATEGORIES:" in r["capabilities"].text, r["capabilities"]
    health = r["health"]
    assert not health.is_error and health["STATUS"] == "ok", health
    hermes = hermes_bin()
    assert health["HERMES"] == str(hermes) and health["HERMES_VERSION"] == installed_version(hermes)
    assert "ACP extra installed" in health["HERMES_MODE"] and health["SUPERVISOR"].startswith("alive (")


@pytest.mark.parametrize("mode", ["oneshot", pytest.param("", id="auto")])
def test_hermes_resume_continues_a_session_started_by_hand(bridges, fake, mode):
    bridge, script = bridges(mode), Script(fake)
    cwd = bridge.work / f"by-hand-{mode or 'auto'}"
    cwd.mkdir()
    script.push(text("Answered at a terminal."))
    hand_id = by_hand(bridge, cwd, "Asked at a terminal")
    script.push(text("Continued by Bridge."))

    async def steps(session: Session) -> tuple[Reply, Reply]:
        resumed = await session.call("hermes_resume", session_id=hand_id, task="Go on from there", cwd=str(cwd))
        typo = await session.call("hermes_resume", session_id=hand_id[:-1], task="x", cwd=str(cwd))
        return await session.until_done(resumed), typo

    resumed, typo = over_stdio(bridge.env, steps)
    assert typo.is_error and "CODE: no_such_session" in typo.text, typo
    assert resumed["STATUS"] == "ok" and resumed["SESSION_ID"] == hand_id and resumed["CWD"] == str(cwd), resumed
    assert resumed.text.endswith("Continued by Bridge.")
    history = message_texts(script.requests[-1])
    assert ("user", "Asked at a terminal") in history and history[-1] == ("user", "Go on from there")


@pytest.mark.parametrize("mode", ["oneshot", pytest.param("", id="auto")])
def test_latest_where_bridge_ran_no_session_continues_hermes_own_newest_one_there(bridges, fake, mode):
    bridge, script = bridges(mode), Script(fake)
    cwd, elsewhere = bridge.work / f"latest-{mode or 'auto'}", bridge.work / f"latest-elsewhere-{mode or 'auto'}"
    cwd.mkdir()
    elsewhere.mkdir()
    script.push(text("Answered at a terminal."))
    hand_id = by_hand(bridge, cwd, "Asked at a terminal here", source="cli")
    script.push(text("Answered elsewhere."))
    by_hand(bridge, elsewhere, "Asked at a terminal elsewhere", source="cli")  # Hermes' newest, in another cwd
    script.push(text("Continued by Bridge."))

    async def steps(session: Session) -> tuple[Reply, Reply]:
        resumed = await session.call("hermes_resume", session_id="latest", task="Go on from there", cwd=str(cwd))
        return resumed, await session.until_done(resumed)

    resumed, done = over_stdio(bridge.env, steps)
    note = (
        f"NOTE: Bridge has run no hermes session in {cwd}, so 'latest' is Hermes' own newest session recorded there: "
        f"{hand_id}."
    )
    assert note in resumed.text.splitlines(), resumed
    assert done["STATUS"] == "ok" and done["SESSION_ID"] == hand_id and done["CWD"] == str(cwd), done
    assert done.text.endswith("Continued by Bridge.")
    history = message_texts(script.requests[-1])
    assert ("user", "Asked at a terminal here") in history and history[-1] == ("user", "Go on from there")
    assert ("user", "Asked at a terminal elsewhere") not in history


def test_a_terminal_session_started_outside_the_roots_is_not_resumed_there(bridges, fake):
    """Hermes moves a resumed session back into the directory it recorded (cli.py `_restore_session_cwd`), which may
    lie outside the allowed roots: Bridge's launcher refuses such a resume before Hermes starts."""
    bridge, script = bridges("oneshot"), Script(fake)
    started_in, cwd = (bridge.root / "outside-the-roots").resolve(), bridge.work / "restore"
    started_in.mkdir()
    cwd.mkdir()
    script.push(text("Answered at a terminal."))
    hand_id = by_hand(bridge, started_in, "Asked outside the roots", source="cli")
    asked = len(script.requests)

    async def steps(session: Session) -> Reply:
        resumed = await session.call("hermes_resume", session_id=hand_id, task="Write where you are", cwd=str(cwd))
        return await session.until_done(resumed)

    done = over_stdio(bridge.env, steps)
    assert done["STATUS"] == "error" and done["EXIT_CODE"] == "1" and done["CWD"] == str(cwd), done
    refusal = (
        f"hermes_launch.py: session {hand_id} was started in {started_in}, and Hermes continues a session only "
        f"there, not in this task's cwd {cwd}: resume it with that cwd (if it is inside Bridge's allowed roots), or "
        "start a new session here"
    )
    assert done["ERROR"] == f"hermes exited with code 1: {refusal}", done
    assert len(script.requests) == asked, "Hermes never started, so the model was never asked"


def over_stdio(env: dict[str, str], steps) -> Any:
    async def main() -> Any:
        params = StdioServerParameters(command=sys.executable, args=[str(REPO / "manage.py"), "mcp"], env=env, cwd=REPO)
        async with Client(params, read_timeout_seconds=WAIT_S + 30) as client:
            return await steps(Session(client))

    return asyncio.run(main())
