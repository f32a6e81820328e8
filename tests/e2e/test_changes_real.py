"""End to end: every task says what it changed, and isolated tasks work in git worktrees of their own that are merged
or discarded afterwards (docs/architecture.md, "Changes and worktrees"), with the real Claude Code CLI and the real
Hermes CLI, each behind a real Bridge and seen only through REST, SSE and MCP over HTTP.

Each agent's scripted model (127.0.0.1 only) edits files with the agent's own tools and relative paths: Claude Code
runs a Bash command, Hermes calls write_file and terminal. Synchronisation follows each task's SSE stream to its end.
"""

from __future__ import annotations

import asyncio
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests.bridge_server import BridgeServer, Script, data_events
from tests.e2e.test_claude import bash, follow
from tests.e2e.test_hermes import hermes_bin, start_bridge
from tests.e2e.test_hermes import run as run_hermes
from tests.fakes.anthropic_server import FakeAnthropic
from tests.fakes.anthropic_server import text as claude_text
from tests.fakes.hermes_env import RecordingProxy
from tests.fakes.openai_server import FakeOpenAI, tool_call
from tests.fakes.openai_server import text as hermes_text

pytestmark = pytest.mark.e2e

GIT_IDENTITY = ["-c", "user.name=Test", "-c", "user.email=test@example.com", "-c", "commit.gpgsign=false"]
START = {"keep.txt": "keep\n", "shared.txt": "one\ntwo\nthree\n", "gone.txt": "bye\n", ".gitignore": "*.log\n"}
# What the non-isolated task does, and what it must report: (status, lines added, lines removed) by path.
EDITS = {"shared.txt": "one\n2\nthree\n", "new/made.txt": "a\nb\n", "x.log": "noise\n"}
DELETED = "gone.txt"
EXPECTED = {
    "shared.txt": ("modified", 1, 1),
    "new/made.txt": ("added", 2, 0),
    "gone.txt": ("deleted", 0, 1),
}
FIRST, SECOND = "one\nFIRST\nthree\n", "one\nSECOND\nthree\n"


class Agent:
    """One real agent CLI behind its own Bridge, and the scripted model that tells it which files to edit."""

    name = ""

    def __init__(self, bridge: BridgeServer, fake: FakeAnthropic | FakeOpenAI, proxy: RecordingProxy | None = None):
        self.bridge, self.fake, self.proxy = bridge, fake, proxy

    def edit(self, cwd: Path, writes: dict[str, str], delete: str = "", **fields) -> str:
        """A task whose agent writes `writes` and deletes `delete` (relative paths) in its cwd, with every tool call
        allowed by policy, followed over SSE to its end; its id, once it is done."""
        task_id, events = self.run(Script(self.fake), cwd, writes, delete, {"permission_mode": "bypass", **fields})
        final = events[-1]["data"]["data"]
        assert (events[-1]["event"], final["status"]) == ("status", "done"), final
        assert events[-2]["event"] == "changes", "the changes event comes just before the end"
        return task_id

    def run(self, script: Script, cwd: Path, writes: dict[str, str], delete: str, fields: dict) -> tuple[str, list]:
        raise NotImplementedError


class ClaudeCode(Agent):
    """Edits with one Bash command: the worktree's path is not known in advance, so the paths are relative."""

    name = "claude"

    def run(self, script: Script, cwd: Path, writes: dict[str, str], delete: str, fields: dict) -> tuple[str, list]:
        script.push(bash(shell_edits(writes, delete)), claude_text("Edited."))
        task_id = self.bridge.create_task("Edit the files.", cwd, **fields)
        return task_id, data_events(follow(self.bridge, task_id))


class Hermes(Agent):
    """Edits with write_file calls and deletes with a terminal command, all in one reply, paths relative."""

    name = "hermes"

    def run(self, script: Script, cwd: Path, writes: dict[str, str], delete: str, fields: dict) -> tuple[str, list]:
        calls = [("write_file", {"path": path, "content": text}) for path, text in writes.items()]
        if delete:
            calls.append(("terminal", {"command": f"rm {delete}"}))
        script.push(tool_call(*calls[0], *calls[1:]), hermes_text("Edited."))
        return run_hermes(self.bridge, "Edit the files.", cwd, **fields)


def shell_edits(writes: dict[str, str], delete: str) -> str:
    """One shell command doing the edits with relative paths (the worktree's path is not known in advance)."""
    steps = []
    for path, text in writes.items():
        assert not set("'%\\") & set(text + path), "kept out of printf's way"
        if "/" in path:
            steps.append(f"mkdir -p {path.rsplit('/', 1)[0]}")
        escaped = text.replace("\n", "\\n")
        steps.append(f"printf '{escaped}' > {path}")
    if delete:
        steps.append(f"rm {delete}")
    return " && ".join(steps)


# --- fixtures -------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def openai_fake() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as server:
        yield server


@pytest.fixture(scope="module")
def proxy() -> Iterator[RecordingProxy]:
    with RecordingProxy() as server:
        yield server


@pytest.fixture(scope="module")
def hermes_bridge(tmp_path_factory, openai_fake, proxy) -> Iterator[BridgeServer]:
    server = start_bridge(tmp_path_factory.mktemp("changes-hermes"), openai_fake, proxy, hermes_bin(), "acp")
    yield server
    server.stop()


@pytest.fixture(scope="module", params=["claude", "hermes"])
def agent(request) -> Agent:
    if request.param == "claude":
        return ClaudeCode(request.getfixturevalue("bridge"), request.getfixturevalue("fake"))
    fake, proxy = request.getfixturevalue("openai_fake"), request.getfixturevalue("proxy")
    return Hermes(request.getfixturevalue("hermes_bridge"), fake, proxy)


@pytest.fixture(autouse=True)
def offline_only(agent) -> Iterator[None]:
    """Hermes must not have tried to reach anything but 127.0.0.1 during the test."""
    before = len(agent.proxy.requests) if agent.proxy else 0
    yield
    if agent.proxy:
        assert agent.proxy.requests[before:] == [], f"Hermes tried to leave loopback: {agent.proxy.requests[before:]}"


@pytest.fixture
def cwd(agent, request) -> Path:
    """A directory of the test's own under the agent's Bridge's allowed root, holding START."""
    path = agent.bridge.work / request.node.name.replace("[", "_").replace("]", "")
    path.mkdir()
    for name, text in START.items():
        (path / name).write_text(text)
    (path / "untouched-untracked.txt").write_text("there before the task\n")
    return path


# --- helpers ----------------------------------------------------------------------------------------------------


def git(repo: Path, *args: str) -> str:
    done = subprocess.run(["git", *GIT_IDENTITY, *args], cwd=repo, capture_output=True, text=True, check=True)
    return done.stdout


def commit_all(path: Path) -> Path:
    """Make `path` a repository on `main` with one commit of what it holds but the untracked file."""
    git(path, "init", "-q", "-b", "main")
    git(path, "add", *START)
    git(path, "commit", "-q", "-m", "start")
    return path


def checkout(repo: Path) -> tuple[str, str, bytes]:
    """What the user has: HEAD, `git status --porcelain`, shared.txt's bytes."""
    return git(repo, "rev-parse", "HEAD"), git(repo, "status", "--porcelain"), (repo / "shared.txt").read_bytes()


def changes(bridge: BridgeServer, task_id: str) -> dict:
    answer = bridge.ok(bridge.get("/v1/task/changes", task_id=task_id))
    assert answer["state"] == "recorded", answer
    return answer


def changed(answer: dict) -> dict[str, tuple[str, int, int]]:
    return {f["path"]: (f["status"], f["added"], f["removed"]) for f in answer["files"]}


def worktree(bridge: BridgeServer, task_id: str) -> dict:
    found = bridge.task(task_id)["worktree"]
    assert found, f"task {task_id} has no worktree"
    return found


def mcp_call(bridge: BridgeServer, tool: str, **arguments) -> str:
    """One MCP tool call over Streamable HTTP at /mcp with the Bridge's token; the reply's text."""

    async def main() -> str:
        headers = {"Authorization": f"Bearer {bridge.token}"}
        async with (
            httpx2.AsyncClient(headers=headers, timeout=60, trust_env=False) as http,
            Client(streamable_http_client(bridge.url + "/mcp", http_client=http)) as client,
        ):
            result = await client.call_tool(tool, arguments)
        text = "\n".join(c.text for c in result.content if c.type == "text")
        assert not result.is_error, text
        return text

    return asyncio.run(main())


# --- scenarios --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("in_git", [True, False], ids=["git", "plain"])
def test_a_task_reports_exactly_the_files_it_changed(agent, cwd, in_git):
    if in_git:
        commit_all(cwd)

    task_id = agent.edit(cwd, EDITS, delete=DELETED)

    answer = changes(agent.bridge, task_id)
    expected = EXPECTED if in_git else {**EXPECTED, "x.log": ("added", 1, 0)}  # outside git nothing is ignored
    assert changed(answer) == expected, answer
    assert (answer["kind"], answer["files_changed"]) == ("git" if in_git else "manifest", len(expected)), answer
    assert (answer["lines_added"], answer["lines_removed"]) == (
        sum(added for _, added, _ in expected.values()),
        sum(removed for _, _, removed in expected.values()),
    )
    assert {"+2", "-two", "+a", "+b", "-bye"} <= set(answer["patch"].splitlines()), answer["patch"]
    assert (cwd / "shared.txt").read_text() == EDITS["shared.txt"] and not (cwd / DELETED).exists()


def test_isolated_tasks_in_one_repository_keep_apart_then_merge_conflict_and_discard(agent, cwd):
    repo = commit_all(cwd)
    before = checkout(repo)

    first = agent.edit(repo, {"shared.txt": FIRST}, isolation="worktree")
    second = agent.edit(repo, {"shared.txt": SECOND}, isolation="worktree")

    assert checkout(repo) == before, "the user's checkout is untouched"
    trees = {task_id: worktree(agent.bridge, task_id) for task_id in (first, second)}
    for task_id, mine, theirs in ((first, "FIRST", "SECOND"), (second, "SECOND", "FIRST")):
        tree = trees[task_id]
        assert tree["state"] == "live" and tree["branch"] == f"bridge/{task_id.replace('-', '')[:8]}", tree
        assert tree["base_branch"] == "main" and Path(tree["cwd"]) != repo, tree
        assert (Path(tree["cwd"]) / "shared.txt").read_text() == f"one\n{mine}\nthree\n"
        answer = changes(agent.bridge, task_id)
        assert changed(answer) == {"shared.txt": ("modified", 1, 1)}, answer
        lines = answer["patch"].splitlines()
        assert f"+{mine}" in lines and not any(theirs in line for line in lines), answer["patch"]

    status = mcp_call(agent.bridge, "hermes_status", job_id=first, wait_s=0).splitlines()
    assert status[0] == "STATUS: ok" and "CHANGED: 1 file(s), +1 -1" in status, status
    assert "CHANGED_FILE: modified shared.txt +1 -1" in status, status
    tree = trees[first]
    assert f"WORKTREE: live {tree['branch']} (base main) {tree['path']}" in status, status

    strategy, parents = ("squash", 1) if agent.name == "claude" else ("merge", 2)
    merged = agent.bridge.ok(agent.bridge.post("/v1/task/merge", {"task_id": first, "strategy": strategy}))
    assert merged["worktree"]["state"] == "merged", merged
    assert git(repo, "show", "main:shared.txt") == FIRST
    assert len(git(repo, "rev-list", "--parents", "-n1", "main").split()) == 1 + parents
    assert not Path(trees[first]["path"]).exists()
    landed = checkout(repo)

    refused = agent.bridge.post("/v1/task/merge", {"task_id": second, "strategy": strategy})
    assert refused.status_code == 409, refused.text
    assert (refused.json()["code"], refused.json()["files"]) == ("merge_conflict", ["shared.txt"]), refused.json()
    assert checkout(repo) == landed and git(repo, "show", "main:shared.txt") == FIRST, "the refusal changed nothing"
    kept = worktree(agent.bridge, second)
    assert kept["state"] == "live" and (Path(kept["cwd"]) / "shared.txt").read_text() == SECOND, "nothing is lost"

    discarded = agent.bridge.ok(agent.bridge.post("/v1/task/discard", {"task_id": second}))
    assert discarded["worktree"]["state"] == "discarded", discarded
    assert not Path(kept["path"]).exists()
    assert git(repo, "branch", "--list", kept["branch"]) == ""
    assert kept["path"] not in git(repo, "worktree", "list")
