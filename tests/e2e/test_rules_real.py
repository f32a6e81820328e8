"""End to end: the user's permission rules (jobs/actions/rules.py) answer the real agents' routine requests before
anyone is asked, and a decision can be remembered as a rule, with the real Claude Code CLI and the real Hermes CLI
(ACP) behind a real Bridge in `approve` mode, seen only through REST and SSE.

Each scripted model (127.0.0.1 only) asks to run shell commands: Claude Code with its Bash tool, Hermes with its
terminal tool. Claude Code 2.1.332 never asks about `git status` (nor `git status --short`): its own list of read-only
commands runs them unasked, so the routine command a rule lets through here is `git add`. Hermes asks only about the
commands it deems dangerous (`rm -r…` among them), offering allow_once, allow_session, allow_always, deny and
deny_always. The rules a test adds are for its own directory (a remembered "always" rule is for everywhere), and every
live rule is removed before and after each test.
Synchronisation follows each task's SSE stream to its end, answering pending requests as they arrive.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.bridge_server import BridgeServer, Script, data_events
from tests.e2e.test_claude import follow, of_kind, result_text, tool_results
from tests.e2e.test_hermes import hermes_bin, start_bridge
from tests.e2e.test_hermes import run as run_hermes
from tests.fakes.anthropic_server import text as claude_text
from tests.fakes.anthropic_server import tool_use
from tests.fakes.hermes_env import RecordingProxy
from tests.fakes.openai_server import FakeOpenAI, tool_call
from tests.fakes.openai_server import text as hermes_text

pytestmark = pytest.mark.e2e

DELETE = "rm -rf build"
ROUTINE = "git add notes.txt"
ROUTINE_RULES = ("Bash(git status)", "Bash(git add:*)")
DENY_MESSAGE = "E2E-RULE-9137: builds are removed by CI only."
UNANSWERED = "E2E: denied by the test, as nobody should have been asked"
# Compound commands whose first part alone a rule allows: each must wait for a person.
COMPOUNDS = (f"git status && {DELETE}", f"git status; {DELETE}", f"git status | {DELETE}")

Answer = Callable[[BridgeServer, str, dict], None]


@dataclass
class Run:
    """A finished task: its transcript, and the requests that waited for a person (answered by the test)."""

    task_id: str
    events: list[dict]
    waited: list[dict]

    def asked(self) -> list[dict]:
        """The task's permission requests as recorded on arrival (their status then included)."""
        return of_kind(self.events, "permission_request")

    def decisions(self) -> list[dict]:
        return of_kind(self.events, "permission_decision")


def deny_unanswered(bridge: BridgeServer, task_id: str, perm: dict) -> None:
    bridge.ok(bridge.decide(task_id, "deny", request_id=perm["request_id"], message=UNANSWERED))


def allow(bridge: BridgeServer, task_id: str, perm: dict) -> None:
    bridge.ok(bridge.decide(task_id, "allow", request_id=perm["request_id"]))


def answering(bridge: BridgeServer, answer: Answer, waited: list[dict]) -> Callable[[str, dict], None]:
    """A react(task_id, event) that notes each request arriving pending, with the pending listing's view of it, and
    answers it with `answer`: a test that expects no pending request still ends at once when one comes."""

    def react(task_id: str, event: dict) -> None:
        if event["event"] != "permission_request" or event["data"]["data"]["status"] != "pending":
            return
        request_id = event["data"]["data"]["request_id"]
        [listed] = [perm for perm in bridge.permissions(task_id) if perm["request_id"] == request_id]
        waited.append(listed)
        answer(bridge, task_id, listed)

    return react


def run_claude(
    bridge: BridgeServer, script: Script, cwd: Path, *commands: str, answer: Answer = deny_unanswered
) -> Run:
    """A Claude task in approve mode whose model runs `commands` (one Bash call each, in one reply; Claude Code asks
    about them one after another), followed to its end."""
    calls = [("Bash", {"command": command, "description": "e2e"}) for command in commands]
    script.push(tool_use(*calls[0], *calls[1:]), claude_text("Finished."))
    task_id = bridge.create_task("Run the commands.", cwd, permission_mode="approve")
    waited: list[dict] = []
    react = answering(bridge, answer, waited)
    events = data_events(follow(bridge, task_id, lambda event: react(task_id, event)))
    assert bridge.task(task_id)["status"] == "done", bridge.task(task_id)
    return Run(task_id, events, waited)


def run_hermes_command(bridge: BridgeServer, fake: FakeOpenAI, cwd: Path, command: str, answer: Answer) -> Run:
    """A Hermes task in approve mode whose model runs `command` with its terminal tool, followed to its end."""
    Script(fake).push(tool_call("terminal", {"command": command}), hermes_text("Finished."))
    waited: list[dict] = []
    task_id, events = run_hermes(
        bridge, "Run the command.", cwd, answering(bridge, answer, waited), permission_mode="approve"
    )
    assert events[-1]["data"]["data"]["status"] == "done", events[-1]
    return Run(task_id, events, waited)


def add_rule(bridge: BridgeServer, rule: str, decision: str, root: Path, **fields: str) -> dict:
    return bridge.ok(bridge.post("/v1/rules", {"rule": rule, "decision": decision, "root": str(root), **fields}))


def with_build(path: Path) -> Path:
    """`path` (made if missing) holding a build/ directory for `rm -rf build` to remove."""
    (path / "build").mkdir(parents=True)
    (path / "build" / "out.o").write_text("object\n")
    return path


def remove_live_rules(bridge: BridgeServer) -> None:
    for rule in bridge.ok(bridge.get("/v1/rules"))["rules"]:
        bridge.ok(bridge.client.delete(f"/v1/rules/{rule['id']}"))


def by_rule(run: Run, rule: dict, status: str) -> None:
    """The task's one request was decided on arrival by `rule`, and its transcript names the rule."""
    assert run.waited == [], f"a request waited for a person: {run.waited}"
    [asked] = run.asked()
    assert asked["status"] == status, f"the request was pending when it arrived: {asked}"
    [decided] = run.decisions()
    named = (decided["status"], decided["decided_via"], decided["rule_id"], decided["rule"])
    assert named == (status, "policy", rule["id"], rule["rule"]), decided
    assert (asked["rule_id"], asked["rule"]) == (rule["id"], rule["rule"]), asked
    assert decided["decided_by"] == f"rule {rule['id']}: {rule['rule']}", decided


# --- fixtures -------------------------------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def no_rules_left(request: pytest.FixtureRequest) -> Iterator[None]:
    """Rules are the server's, not the test's: none is live before a test, and none outlives it."""
    servers = [request.getfixturevalue(name) for name in ("bridge", "hermes_bridge") if name in request.fixturenames]
    for server in servers:
        remove_live_rules(server)
    yield
    for server in servers:
        remove_live_rules(server)


@pytest.fixture
def routine(bridge: BridgeServer, cwd: Path) -> list[dict]:
    """The allow rules for routine git commands, for the test's directory."""
    return [add_rule(bridge, rule, "allow", cwd) for rule in ROUTINE_RULES]


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
    server = start_bridge(tmp_path_factory.mktemp("rules-hermes"), openai_fake, proxy, hermes_bin(), "acp")
    yield server
    server.stop()


# --- Claude Code --------------------------------------------------------------------------------------------------


def test_an_allow_rule_lets_a_routine_git_command_run_unasked_and_the_transcript_names_the_rule(
    bridge, script, cwd, routine
):
    subprocess.run(["git", "init", "-q"], cwd=cwd, check=True)
    (cwd / "notes.txt").write_text("notes\n")

    run = run_claude(bridge, script, cwd, ROUTINE)

    by_rule(run, next(rule for rule in routine if rule["rule"] == "Bash(git add:*)"), "allowed")
    recorded = bridge.ok(bridge.get("/v1/task/events", task_id=run.task_id))["events"]
    assert [e["data"] for e in recorded if e["kind"] == "permission_decision"] == run.decisions()
    staged = subprocess.run(["git", "diff", "--cached", "--name-only"], cwd=cwd, capture_output=True, text=True)
    assert staged.stdout.split() == ["notes.txt"], "the command did not run"
    [block] = tool_results(script.requests[1])
    assert not block.get("is_error"), block


def test_a_command_no_rule_allows_waits_for_a_person(bridge, script, cwd, routine):
    with_build(cwd)

    run = run_claude(bridge, script, cwd, DELETE, answer=allow)

    [waited] = run.waited
    assert (waited["input"]["command"], waited["rule_id"]) == (DELETE, None), waited
    offered = {"rule": f"Bash({DELETE})", "decision": "allow", "remember": "project"}
    assert offered in waited["suggested_rules"], "Claude's permission_suggestions are not offered as rules"
    [decided] = run.decisions()
    assert (decided["status"], decided["decided_via"], decided["rule_id"]) == ("allowed", "api", None), decided
    assert not (cwd / "build").exists(), "the person's allow did not reach the agent"


def test_a_deny_rules_message_reaches_the_agent(bridge, script, cwd):
    with_build(cwd)
    rule = add_rule(bridge, f"Bash({DELETE})", "deny", cwd, message=DENY_MESSAGE)

    run = run_claude(bridge, script, cwd, DELETE)

    by_rule(run, rule, "denied")
    assert run.decisions()[0]["message"] == DENY_MESSAGE
    [block] = tool_results(script.requests[1])
    assert block.get("is_error") is True and DENY_MESSAGE in result_text(block), block
    assert (cwd / "build" / "out.o").exists()


def test_a_decision_remembered_for_the_project_decides_the_next_one_there_and_not_elsewhere(bridge, script, cwd):
    project, elsewhere = with_build(cwd), with_build(cwd.parent / f"{cwd.name}-elsewhere")
    remembered: list[dict] = []

    def allow_and_remember(bridge: BridgeServer, task_id: str, perm: dict) -> None:
        body = {"request_id": perm["request_id"], "remember": "project"}
        remembered.extend(bridge.ok(bridge.decide(task_id, "allow", **body))["remembered"])

    first = run_claude(bridge, script, project, DELETE, answer=allow_and_remember)
    assert len(first.waited) == 1 and not (project / "build").exists()
    [rule] = remembered

    again = run_claude(bridge, script, with_build(project), DELETE)
    by_rule(again, rule, "allowed")
    assert not (project / "build").exists()

    outside = run_claude(bridge, script, elsewhere, DELETE)
    [waited] = outside.waited
    assert (waited["input"]["command"], waited["rule_id"]) == (DELETE, None), waited
    assert (elsewhere / "build" / "out.o").exists()

    assert (rule["rule"], rule["decision"], rule["root"]) == (f"Bash({DELETE})", "allow", str(project)), rule
    assert rule["from_request"] == {"task_id": first.task_id, "request_id": first.waited[0]["request_id"]}, rule
    assert [r["id"] for r in bridge.ok(bridge.get("/v1/rules"))["rules"]] == [rule["id"]]


def test_a_rule_for_the_first_part_does_not_let_a_compound_command_through(bridge, script, cwd, routine):
    with_build(cwd)

    run = run_claude(bridge, script, cwd, *COMPOUNDS)

    assert [perm["input"]["command"] for perm in run.waited] == list(COMPOUNDS), run.waited
    assert {perm["rule_id"] for perm in run.waited} == {None}
    assert [d["decided_via"] for d in run.decisions()] == ["api"] * len(COMPOUNDS)
    assert (cwd / "build" / "out.o").exists()


# --- Hermes (ACP) -------------------------------------------------------------------------------------------------


def test_hermes_allow_always_offered_and_taken_becomes_the_rule_that_decides_the_next_task(
    hermes_bridge, openai_fake, proxy
):
    bridge, base = hermes_bridge, hermes_bridge.work / "always"
    first_cwd, second_cwd = with_build(base / "first"), with_build(base / "second")
    config = (bridge.root / "hermes_home" / "config.yaml").read_text()
    proxied = len(proxy.requests)
    remembered: list[dict] = []
    always = {"rule": f"Bash({DELETE})", "decision": "allow", "remember": "always"}

    def take_allow_always(bridge: BridgeServer, task_id: str, perm: dict) -> None:
        assert always in perm["suggested_rules"], perm["suggested_rules"]
        body = {"request_id": perm["request_id"], "remember": "always", "rule": always["rule"]}
        remembered.extend(bridge.ok(bridge.decide(task_id, "allow", **body))["remembered"])

    first = run_hermes_command(bridge, openai_fake, first_cwd, DELETE, take_allow_always)
    second = run_hermes_command(bridge, openai_fake, second_cwd, DELETE, deny_unanswered)

    [waited] = first.waited
    kinds = [option.get("kind") for option in waited["suggestions"]]
    assert "allow_always" in kinds and "reject_always" in kinds, f"Hermes offered {waited['suggestions']}"
    assert {"rule": f"Bash({DELETE})", "decision": "deny", "remember": "always"} in waited["suggested_rules"]
    [rule] = remembered
    assert (rule["rule"], rule["decision"], rule["root"]) == (always["rule"], "allow", ""), rule
    assert not (first_cwd / "build").exists(), "the allow did not reach Hermes"
    assert (bridge.root / "hermes_home" / "config.yaml").read_text() == config, "Hermes remembered it too"
    by_rule(second, rule, "allowed")
    assert not (second_cwd / "build").exists(), "the rule's allow did not reach Hermes"
    assert proxy.requests[proxied:] == [], f"Hermes tried to leave loopback: {proxy.requests[proxied:]}"
